"""Everything the service knows of RQ's formats, in one place.

Deliveries are RQ jobs, so that rq-dashboard, ``rq info`` and ``rq requeue`` see them, but
``svcgw worker`` runs them itself and the service's scripts write RQ's keys directly. What they
write is RQ's own, read off RQ here and spelt nowhere else in Python:

* **key names, per shard** (:class:`RqNames`, :func:`classes`): a job's hash, a queue, the set of
  queues, the failed, scheduled and deferred registries, a worker's hash and the sets of workers,
  from RQ's class attributes (``Job.redis_job_namespace_prefix``,
  ``Queue.redis_queue_namespace_prefix``, ``Queue.redis_queues_keys``, each registry's
  ``key_template``, ``Worker.redis_worker_namespace_prefix``, ``Worker.redis_workers_keys``) and
  ``worker_registration.WORKERS_BY_QUEUE_KEY``;
* **the job hash** (:class:`JobTemplate`, :func:`job_fields`): what RQ's own ``Job.create`` writes
  for a delivery (:func:`job_fields_by_rq`, the reference), its function (:data:`FUNC_NAME`), the
  JSON serializer (:data:`SERIALIZER`), the description rq-dashboard shows
  (:func:`job_description`) and a dead letter's error text (:func:`exc_info_field`);
* **a job's statuses and the fields the Lua scripts set** (:data:`QUEUED` .. :data:`DEFERRED`,
  :data:`SCRIPT_STATUSES`, :data:`SCRIPT_FIELDS`): a script is one text sent as it is, so
  ``svcgw/storage/lua/*.lua`` spell them as literals, and the tests hold each literal to the
  names here;
* **times** (:func:`rq_time`, :func:`rq_now`): as RQ writes them into its hashes;
* **the registries' scores**: a retry is scored by when it is due and a service event waiting in
  the deferred registry by when it was deferred, as RQ scores them; a dead letter by when it
  expires (:func:`failed_score`, :func:`failed_live`);
* **a worker's registration** (:func:`worker_fields`, :func:`worker_heartbeat`,
  :func:`worker_death` and the fields RQ's worker counts in): what ``svcgw worker`` writes so that
  ``Worker.all``, ``rq info`` and rq-dashboard list it (``worker.presence``).

``tests/svcgw/storage/test_rqformat.py`` holds what the service writes to what RQ's own API and
command line read (``Job.fetch``, ``Queue``, the registries, ``Worker.all``, ``rq info``,
``rq requeue``): an RQ release that changes a format fails a test there, not production.

On a Redis Cluster each shard has its own set of RQ classes, whose names carry the shard's tag
in front (:func:`classes`): ``{s3}rq:job:<id>``. RQ's tools are not Cluster clients, so there
they are the service's own readers' names only; on one Redis (no tag) the classes are RQ's own.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from redis import Redis
from rq import worker_registration
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.registry import DeferredJobRegistry, FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry
from rq.results import Result
from rq.serializers import JSONSerializer
from rq.utils import utcformat
from rq.version import VERSION as RQ_VERSION
from rq.worker import Worker, WorkerStatus

__all__ = [
    "DEFERRED",
    "ENQUEUED_AT",
    "FAILED",
    "FUNC_NAME",
    "QUEUED",
    "SCHEDULED",
    "SCRIPT_FIELDS",
    "SCRIPT_STATUSES",
    "SERIALIZER",
    "STARTED",
    "WORKER_COUNTS",
    "WORKER_CURRENT_JOB",
    "WORKER_KEPT_DEAD",
    "JobTemplate",
    "RqClasses",
    "RqNames",
    "classes",
    "dashboard_text",
    "exc_info_field",
    "failed_live",
    "failed_score",
    "failure_result",
    "job_description",
    "job_fields",
    "job_fields_by_rq",
    "rq_now",
    "rq_time",
    "template",
    "worker_death",
    "worker_fields",
    "worker_heartbeat",
]


@dataclass(frozen=True)
class RqClasses:
    """RQ's classes for one shard: their class attributes name that shard's keys."""

    job: type[Job]
    queue: type[Queue]
    failed: type[FailedJobRegistry]
    scheduled: type[ScheduledJobRegistry]
    deferred: type[DeferredJobRegistry]
    started: type[StartedJobRegistry]


def _template(tag: str, template: str) -> str:
    # A registry's key_template is a str.format template: the tag's braces are literal there.
    return tag.replace("{", "{{").replace("}", "}}") + template


@functools.cache
def classes(tag: str = "") -> RqClasses:
    """RQ's own classes without a tag; with one, subclasses whose names carry it in front."""
    if not tag:
        return RqClasses(Job, Queue, FailedJobRegistry, ScheduledJobRegistry, DeferredJobRegistry, StartedJobRegistry)
    suffix = "".join(ch for ch in tag if ch.isalnum())
    job = type(f"Job_{suffix}", (Job,), {"redis_job_namespace_prefix": tag + Job.redis_job_namespace_prefix})
    queue = type(
        f"Queue_{suffix}",
        (Queue,),
        {
            "redis_queue_namespace_prefix": tag + Queue.redis_queue_namespace_prefix,
            "redis_queues_keys": tag + Queue.redis_queues_keys,
            "job_class": job,
        },
    )

    def registry(base: type[FailedJobRegistry] | type[ScheduledJobRegistry] | type[DeferredJobRegistry]
                 | type[StartedJobRegistry]) -> type:  # fmt: skip
        return type(f"{base.__name__}_{suffix}", (base,), {"key_template": _template(tag, base.key_template)})

    return RqClasses(
        job=job,
        queue=queue,
        failed=registry(FailedJobRegistry),
        scheduled=registry(ScheduledJobRegistry),
        deferred=registry(DeferredJobRegistry),
        started=registry(StartedJobRegistry),
    )


class RqNames:
    """RQ's key names on one shard (``tag``: ``""``, or ``{s<i>}`` on a Cluster)."""

    __slots__ = ("_job", "_queue", "_registries", "_result", "queues", "tag", "worker_prefix", "workers")

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        rq = classes(tag)
        self._job = rq.job.redis_job_namespace_prefix
        self._queue = rq.queue.redis_queue_namespace_prefix
        self._result: str = tag + Result.get_key("")  # type: ignore[no-untyped-call]
        self._registries = {
            "failed": rq.failed.key_template,
            "scheduled": rq.scheduled.key_template,
            "deferred": rq.deferred.key_template,
        }
        # Set of the queues' keys (``rq info`` and rq-dashboard list the queues from it).
        self.queues: str = rq.queue.redis_queues_keys
        # A worker's hash is ``worker_prefix + name``; ``workers`` lists every worker's.
        self.worker_prefix = tag + Worker.redis_worker_namespace_prefix
        self.workers = tag + Worker.redis_workers_keys

    def job(self, job_id: str) -> str:
        """RQ's job hash."""
        return self._job + job_id

    def result(self, job_id: str) -> str:
        """RQ's results stream of a job: a dead letter's :func:`failure_result`, which rq-dashboard shows."""
        return self._result + job_id

    def queue(self, queue_name: str) -> str:
        """RQ's queue: a list of job ids, oldest first."""
        return self._queue + queue_name

    def failed(self, queue_name: str) -> str:
        """RQ's failed registry: dead letters, scored by expiry (:func:`failed_score`)."""
        return self._registries["failed"].format(queue_name)

    def scheduled(self, queue_name: str) -> str:
        """RQ's scheduled registry: retries, scored by due time."""
        return self._registries["scheduled"].format(queue_name)

    def deferred(self, queue_name: str) -> str:
        """RQ's deferred registry: service events waiting for an earlier one of their instance, scored by
        when they were deferred (``DeferredJobRegistry.add``: the time)."""
        return self._registries["deferred"].format(queue_name)

    def workers_of(self, queue_name: str) -> str:
        """The set of the workers of one queue (RQ names it in its module, not on a class)."""
        return self.tag + worker_registration.WORKERS_BY_QUEUE_KEY % queue_name


# --- the job hash ---------------------------------------------------------------
FUNC_NAME = "worker.jobs.deliver"
# How a job's function and arguments are kept in its hash (``data``); RQ's tools are given it.
SERIALIZER: Final = JSONSerializer

# Job.create wants a connection but only builds the object here; a client
# opens no socket until it sends a command, and this one never does.
_UNUSED_CONNECTION = Redis()


class JobTemplate:
    """RQ's job hash for the deliveries of one queue, built once by RQ's own ``Job.create``.

    Only four fields differ between deliveries (the id inside ``data``, the
    description and the two times); the rest is copied from the template.
    ``tests/svcgw/storage/test_rqformat.py`` holds the result equal to what
    ``Job.create`` writes.
    """

    def __init__(self, queue_name: str, failure_ttl: int) -> None:
        self.fields = job_fields_by_rq("dlv_template", queue_name=queue_name, description="", failure_ttl=failure_ttl)
        # RQ reads a missing field as an empty one, so a job hash written in
        # a hurry (the receiver's) leaves the empty ones out.
        self._constant = [
            _bytes(part)
            for name, value in self.fields.items()
            if value != "" and name not in _VARYING
            for part in (name, value)
        ]

    def fields_for(self, delivery_id: str, description: str, now: datetime | None = None) -> dict[str, Any]:
        fields = dict(self.fields)
        fields.update(self._varying(delivery_id, description, now))
        return fields

    def flat(self, delivery_id: str, description: str, now: datetime | None = None) -> list[bytes]:
        """Field, value, field, value, ... of the non-empty fields, ready for HSET."""
        flat = list(self._constant)
        for name, value in self._varying(delivery_id, description, now).items():
            flat.append(name.encode())
            flat.append(_bytes(value))
        return flat

    def lean(self, delivery_id: str, now: datetime | None = None) -> list[bytes]:
        """RQ's fields of a delivery named by its post (svcgw.deliveryid), whose job hash holds its fields too.

        Only what ``Job.fetch`` and the worker read: origin, status, created_at and data. RQ
        reads the others' absence as it reads them empty (rq-dashboard shows no description).
        """
        varying = self._varying(delivery_id, "", now)
        lean = {"origin": self.fields["origin"], "status": self.fields["status"]}
        lean.update(created_at=varying["created_at"], data=varying["data"])
        return [_bytes(part) for name, value in lean.items() for part in (name, value)]

    @staticmethod
    def _varying(delivery_id: str, description: str, now: datetime | None) -> dict[str, Any]:
        stamp = _stamp(now or datetime.now(UTC).replace(tzinfo=None))
        # What Job.data holds for deliver(delivery_id) (SERIALIZER.dumps), compressed as Job.to_dict
        # does: json.dumps((FUNC_NAME, None, [delivery_id], {})), its constant parts made once.
        data = _compressed(_DATA_HEAD + json.dumps(delivery_id).encode("utf-8") + _DATA_TAIL)
        return {"created_at": stamp, "enqueued_at": stamp, "description": description, "data": data}


_VARYING = frozenset(("created_at", "enqueued_at", "description", "data"))
_DATA_HEAD: Final = f"[{json.dumps(FUNC_NAME)}, null, [".encode()
_DATA_TAIL: Final = b"], {}]"


def _stamp(moment: datetime) -> str:
    """``utcformat(moment)`` (RQ's ``%Y-%m-%dT%H:%M:%S.%fZ``) in a third of its time: once per post at ingest."""
    return moment.isoformat(timespec="microseconds") + "Z"


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def job_fields(
    delivery_id: str,
    *,
    queue_name: str,
    description: str,
    failure_ttl: int,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The fields of RQ's job hash for a freshly queued delivery, as RQ itself writes them."""
    return template(queue_name, failure_ttl).fields_for(delivery_id, description, now)


@functools.lru_cache(maxsize=16)
def template(queue_name: str, failure_ttl: int) -> JobTemplate:
    return JobTemplate(queue_name, failure_ttl)


def job_fields_by_rq(
    delivery_id: str,
    *,
    queue_name: str,
    description: str,
    failure_ttl: int,
    now: datetime | None = None,
) -> dict[str, Any]:
    """:func:`job_fields` computed by ``rq.job.Job.create`` for every delivery (the reference)."""
    job = Job.create(
        FUNC_NAME,
        args=[delivery_id],
        id=delivery_id,
        connection=_UNUSED_CONNECTION,
        serializer=SERIALIZER,
        result_ttl=0,
        failure_ttl=failure_ttl,
        description=description,
        origin=queue_name,
        status=JobStatus.QUEUED,
    )
    stamp = now or datetime.now(UTC).replace(tzinfo=None)
    job.created_at = stamp
    job.enqueued_at = stamp
    fields: dict[str, Any] = {}
    for name, value in job.to_dict().items():
        fields[name] = value.value if isinstance(value, JobStatus) else value
    return fields


# --- a job's statuses, and what the scripts set in a job hash --------------------------------
QUEUED: Final[str] = JobStatus.QUEUED.value
SCHEDULED: Final[str] = JobStatus.SCHEDULED.value  # a retry, due at its score
STARTED: Final[str] = JobStatus.STARTED.value  # claimed: an attempt under way
FAILED: Final[str] = JobStatus.FAILED.value  # a dead letter
DEFERRED: Final[str] = JobStatus.DEFERRED.value  # a service event behind an earlier one of its instance

# What the Lua scripts (svcgw/storage/lua/) set in a job hash as they move a job on, spelt there as
# literals: a script is one text, sent as it is, and names passed in with every call would cost
# every call their bytes. tests/svcgw/storage/test_rqformat.py holds every status and field a
# script spells to these, and these to RQ's Job.
SCRIPT_STATUSES: Final = frozenset((QUEUED, SCHEDULED, STARTED, FAILED, DEFERRED))
ENQUEUED_AT: Final = "enqueued_at"
SCRIPT_FIELDS: Final = frozenset(
    ("status", ENQUEUED_AT, "started_at", "worker_name", "ended_at", "exc_info", "description")
)


def _compressed(raw: bytes) -> bytes:
    """A job's ``data`` as a zlib stream, as RQ compresses it (``zlib.compress`` in ``Job.to_dict``).

    RQ reads it with ``zlib.decompress``, which takes any zlib stream. ``zlib.compress`` sets up
    a 32 KiB window and 128 KiB of hashes for every call: about 50 µs, for a job's data of some 70
    bytes once per post at ingest, a sixth of the receiver's CPU per post. The smallest window and
    hash table give the same bytes back in under 4 µs, and compress a few dozen bytes as well.
    """
    packer = zlib.compressobj(1, zlib.DEFLATED, 9, 1)
    return packer.compress(raw) + packer.flush()


def exc_info_field(text: str) -> bytes:
    """A failed job's error text, zlib-compressed, as RQ reads it from the job hash (``Job.restore``).

    RQ 2's own worker writes it to a results stream instead and ``job.exc_info`` reads this field
    where the stream has none, as for every dead letter here (what rq-dashboard shows).
    """
    return zlib.compress(text.encode("utf-8"))


def failure_result(text: str) -> list[str]:
    """RQ's record of a failed run whose error is ``text``, as the field-value pairs of a results stream's entry.

    RQ 2 keeps a run's outcome in a stream (``Result.save``: ``rq:results:<id>``, :meth:`RqNames.result`),
    and rq-dashboard shows a failed job's ``exc_info`` from its latest entry only, never from the hash;
    RQ's own ``Result.serialize`` writes the fields.
    """
    fields = Result(job_id="", type=Result.Type.FAILED, connection=_UNUSED_CONNECTION, exc_string=text,
                    serializer=SERIALIZER).serialize()  # fmt: skip
    return [str(part) for pair in fields.items() for part in pair]


def rq_time(moment: datetime) -> str:
    """``moment`` as RQ writes times into its hashes."""
    return utcformat(moment)


def rq_now() -> str:
    """Now, as RQ writes times into its hashes."""
    return rq_time(datetime.now(UTC).replace(tzinfo=None))


# --- the registries' scores -------------------------------------------------------------
def failed_score(died_at: float, failure_ttl: float) -> float:
    """A dead letter's score in RQ's failed registry: when it expires, as ``FailedJobRegistry.add`` scores it."""
    return died_at + failure_ttl


def failed_live(score: float, now: float) -> bool:
    """Whether a failed registry's member of this score is still a dead letter: RQ's cleanup drops it once passed."""
    return score > now


# --- a worker's registration ----------------------------------------------------------
# The fields of a worker's hash that RQ's worker keeps as it runs jobs: the job it holds
# (``set_current_job_id``), and its counts (``increment_successful_job_count``,
# ``increment_failed_job_count``, ``increment_total_working_time``: HINCRBY, HINCRBYFLOAT).
WORKER_CURRENT_JOB: Final = "current_job"
WORKER_COUNTS: Final = ("successful_job_count", "failed_job_count", "total_working_time")
# Seconds a dead worker's hash is kept (``register_death``).
WORKER_KEPT_DEAD: Final = 60


def worker_fields(queue_name: str, *, pid: int, hostname: str, now: str) -> dict[Any, str | int]:
    """The hash of a worker that was just born, as RQ's ``register_birth`` writes it (``Worker.all`` reads it)."""
    successful, failed, working = WORKER_COUNTS
    return {
        "birth": now,
        "last_heartbeat": now,
        "queues": queue_name,
        "pid": pid,
        "hostname": hostname,
        "ip_address": "",
        "version": RQ_VERSION,
        "python_version": sys.version,
        "state": WorkerStatus.IDLE.value,
        successful: 0,
        failed: 0,
        working: 0,
    }


def worker_heartbeat(now: str, *, busy: bool) -> dict[Any, str]:
    """What a heartbeat sets: RQ's ``heartbeat`` (the time) and ``set_state`` (busy while it holds a job)."""
    return {"last_heartbeat": now, "state": (WorkerStatus.BUSY if busy else WorkerStatus.IDLE).value}


def worker_death(now: str) -> dict[Any, str]:
    """RQ's ``register_death``: when; and the state ``rq info`` and rq-dashboard show of it."""
    return {"death": now, "state": "dead"}


# What a job description may repeat of a delivery: rq-dashboard prints the
# description into its pages without escaping it, so nothing else of what a
# sender chose gets there.
_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def job_description(event_type: str, appid: str, destination_id: str = "") -> str:
    """``Msg for we_...``: what rq-dashboard shows of a delivery, made only of plain names.

    A further destination's delivery is named with its destination (``Msg for we_... to dst_...``).
    """
    kind = event_type if _PLAIN.fullmatch(event_type) else "event"
    instance = appid if _PLAIN.fullmatch(appid) else "an instance"
    further = f" to {destination_id}" if destination_id and _PLAIN.fullmatch(destination_id) else ""
    return f"{kind} for {instance}{further}"


# Characters a dead letter's error text does not carry to rq-dashboard, which prints it unescaped
# on a job's page: an address or an exception's message is not markup there.
_MARKUP = str.maketrans({"<": "(", ">": ")", "&": "+", '"': "'", "`": "'"})


def dashboard_text(text: str) -> str:
    """``text`` without the characters that are markup in a page (see ``_MARKUP``), on one line."""
    return " ".join(text.translate(_MARKUP).split())
