"""Deliveries: their ids, their records, and the RQ jobs that carry them.

This module is the only writer of a new delivery. The records are written by
one piece of Lua, ``svcgw/lua/delivery.lua``, which both writers include:

* the ingest script (``ingest``, run by :mod:`svcgw.ingest` for a
  post to a receiver) checks the token, drops repeats, and writes the
  delivery of the new events;
* :func:`queue_delivery` (service events such as ``InstanceOffline``) adds
  the same write to a MULTI pipeline as one ``EVAL``.

Service events of one instance are delivered in order, each with a
per-instance sequence number ``seq`` (``svcgw/lua/chain.lua``): a service
event is not attempted while an earlier one of its instance is queued or
retrying. The instance's undelivered service events wait in a list,
``keys.service_events(appid)``; the first is queued like any delivery, and
each of the others waits as an RQ job with status ``deferred`` in RQ's
deferred registry. The script that records a delivery as delivered or dead
(``svcgw/lua/queue_finish.lua``) takes it off the list and queues the next,
in the same step. Both scripts touch only the keys they are given: the caller
reads the list and names its members' hashes (:mod:`svcgw.chainkeys`).
A worker killed mid-attempt holds nothing of the list: its job goes back
to the queue when its lease runs out, still first. One that vanishes
without ending (its job deleted with rq's own command-line tools, its data
evicted) is skipped when the instance's next service event is queued.
A dead service event that is replayed (``svcgw dlq replay``) is in no list
any more: it gets its one attempt at once, neither waiting for nor holding
back the instance's later service events, and keeps its ``seq``, by which
a consumer tells it is older than those. Customer events are in no list.

A delivery is: RQ's job hash, which also holds the delivery's fields for a
post's delivery (named by its log entry, svcgw.deliveryid; a service event's
has a delivery hash of its own, :func:`svcgw.keys.delivery`), the job id at
the queue's tail, the queue in ``rq:queues``, and the post in the callback
log. Every delivery is an RQ
job (JSON serializer, id = delivery id, function ``worker.jobs.deliver``) in
the queue ``SVCGW_QUEUE`` so that rq-dashboard lists it and RQ's registries hold it: retries wait in RQ's scheduled
registry and dead letters in its failed registry, from which ``rq requeue``
replays them. The jobs are run by ``svcgw worker``, whose engine executes
many at once in one process; a stock ``rq worker`` must not consume the queue.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from redis import Redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import utcformat

from .chainkeys import member_keys
from .envelope import build_envelope
from .keys import KeySpace
from .scripts import text
from .settings import Settings

__all__ = [
    "FUNC_NAME",
    "JobTemplate",
    "exc_info_field",
    "job_description",
    "job_fields",
    "job_fields_by_rq",
    "new_delivery_id",
    "queue_delivery",
    "seq_pieces",
    "template",
]

FUNC_NAME = "worker.jobs.deliver"

# Job.create wants a connection but only builds the object here; a client
# opens no socket until it sends a command, and this one never does.
_UNUSED_CONNECTION = Redis()

# Where each event's seq goes in the envelope built for queue_delivery.lua: a
# byte that serialised JSON never holds raw, so cutting the envelope at it
# cuts nowhere else.
_SEQ_SLOT = b"\x00"


class JobTemplate:
    """RQ's job hash for the deliveries of one queue, built once by RQ's own ``Job.create``.

    Only four fields differ between deliveries (the id inside ``data``, the
    description and the two times); the rest is copied from the template.
    ``tests/worker/test_jobs.py`` holds the result equal to what
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
        stamp = utcformat(now or datetime.now(UTC).replace(tzinfo=None))
        # What Job.data holds for deliver(delivery_id) (JSONSerializer.dumps),
        # compressed as Job.to_dict does.
        data = zlib.compress(json.dumps((FUNC_NAME, None, [delivery_id], {})).encode("utf-8"))
        return {"created_at": stamp, "enqueued_at": stamp, "description": description, "data": data}


_VARYING = frozenset(("created_at", "enqueued_at", "description", "data"))


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
        serializer=JSONSerializer,
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


def exc_info_field(text: str) -> bytes:
    """RQ keeps a failed job's error text zlib-compressed in the job hash."""
    return zlib.compress(text.encode("utf-8"))


def rq_time(moment: datetime) -> str:
    return utcformat(moment)


# What a job description may repeat of a delivery: rq-dashboard prints the
# description into its pages without escaping it, so nothing else of what a
# sender chose gets there.
_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def job_description(event_type: str, appid: str) -> str:
    """``Msg for we_...``: what rq-dashboard shows of a delivery, made only of plain names."""
    kind = event_type if _PLAIN.fullmatch(event_type) else "event"
    instance = appid if _PLAIN.fullmatch(appid) else "an instance"
    return f"{kind} for {instance}"


def new_delivery_id() -> str:
    """``dlv_`` and 24 lowercase hex digits; also the RQ job id."""
    return "dlv_" + secrets.token_hex(12)


def queue_delivery(
    pipe: Any,
    keys: KeySpace,
    settings: Settings,
    *,
    appid: str,
    account: str,
    event_type: str,
    events: Sequence[dict[str, Any]],
    delivery_id: str,
    now: float,
    chain: Sequence[str],
) -> None:
    """Add to ``pipe`` (sync or asyncio, in MULTI mode) the command that queues one service-event delivery.

    ``chain``: the ids in the instance's service-event chain, as read under the transaction's
    WATCH of it (:mod:`svcgw.chainkeys`): the script touches their hashes, so it names them.

    Only buffers: one ``EVAL`` of ``queue_delivery`` (:mod:`svcgw.scripts`), which writes the same
    records as the ingest script writes for an accepted post, with the events
    as the envelope's ``events`` and nothing counted as a duplicate. It also
    gives each event the instance's next ``seq`` and queues the delivery
    behind the instance's earlier service events (see the module's text).
    EVAL, not EVALSHA, so a script cache flushed meanwhile cannot fail the
    transaction; its result in the transaction's answers is the first ``seq``.
    """
    if any("seq" in event for event in events):
        raise ValueError("service events get their seq when queued; the event objects must not have one")
    pieces = seq_pieces(appid, event_type, events)
    chain = list(chain)
    queue_key = keys.rq.queue(settings.queue_name)
    job = job_fields(
        delivery_id,
        queue_name=settings.queue_name,
        description=job_description(event_type, appid),
        failure_ttl=settings.dead_letter_retention,
    )
    pipe.eval(
        text("queue_delivery"),
        8 + 2 * len(chain),
        keys.delivery(delivery_id),
        keys.rq.job(delivery_id),
        queue_key,
        keys.rq.queues,
        keys.callback_log(appid),
        keys.service_events(appid),
        keys.service_event_seq(appid),
        keys.rq.deferred(settings.queue_name),
        *member_keys(keys, chain),
        appid,
        account,
        event_type,
        repr(now),
        len(events),
        delivery_id,
        queue_key,
        settings.log_retention,
        job["enqueued_at"],
        len(chain),
        len(pieces),
        *chain,
        *pieces,
        *(part for name, value in job.items() for part in (name, value)),
    )


def seq_pieces(appid: str, event_type: str, events: Sequence[dict[str, Any]]) -> list[bytes]:
    """The envelope of ``events``, cut where each event's ``seq`` goes (its last member).

    Joining the pieces with the numbers in between gives the body:
    ``{"appid":...,"events":[{"id":...,"seq":7}]}``.
    """
    raw_events = []
    for event in events:
        raw = orjson.dumps(event)
        raw_events.append(raw[:-1] + (b',"seq":' if len(raw) > 2 else b'"seq":') + _SEQ_SLOT + b"}")
    return build_envelope(appid, event_type, raw_events).split(_SEQ_SLOT)
