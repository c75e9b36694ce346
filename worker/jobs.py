"""Deliveries as RQ jobs.

Every delivery is an RQ job (JSON serializer, id = delivery id, function
``worker.jobs.deliver``) in the queue ``SVCGW_QUEUE`` so that rq-dashboard
lists it and RQ's registries hold it: retries wait in RQ's scheduled
registry and dead letters in its failed registry, from which ``rq requeue``
replays them. The jobs are run by ``svcgw worker``, whose engine executes
many at once in one process; a stock ``rq worker`` must not consume the queue.
"""

from __future__ import annotations

import functools
import json
import zlib
from datetime import UTC, datetime
from typing import Any

from redis import Redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import utcformat

__all__ = ["FUNC_NAME", "JobTemplate", "deliver", "exc_info_field", "job_fields", "job_fields_by_rq", "template"]

FUNC_NAME = "worker.jobs.deliver"

# Job.create wants a connection but only builds the object here; a client
# opens no socket until it sends a command, and this one never does.
_UNUSED_CONNECTION = Redis()


def deliver(delivery_id: str) -> None:
    """The job's entry point as RQ sees it; deliveries run only in ``svcgw worker``."""
    raise RuntimeError(
        f"delivery {delivery_id} was taken by a stock rq worker; run `svcgw worker` on this queue instead"
    )


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
