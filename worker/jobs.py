"""Deliveries as RQ jobs.

Every delivery is an RQ job (JSON serializer, id = delivery id, function
``worker.jobs.deliver``) in the queue ``SVCGW_QUEUE`` so that rq-dashboard
lists it and RQ's registries hold it: retries wait in RQ's scheduled
registry and dead letters in its failed registry, from which ``rq requeue``
replays them. The jobs are run by ``svcgw worker``, whose engine executes
many at once in one process; a stock ``rq worker`` must not consume the queue.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any

from redis import Redis
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer
from rq.utils import utcformat

__all__ = ["FUNC_NAME", "deliver", "exc_info_field", "job_fields"]

FUNC_NAME = "worker.jobs.deliver"

# Job.create wants a connection but only builds the object here; a client
# opens no socket until it sends a command, and this one never does.
_UNUSED_CONNECTION = Redis()


def deliver(delivery_id: str) -> None:
    """The job's entry point as RQ sees it; deliveries run only in ``svcgw worker``."""
    raise RuntimeError(
        f"delivery {delivery_id} was taken by a stock rq worker; run `svcgw worker` on this queue instead"
    )


def job_fields(
    delivery_id: str,
    *,
    queue_name: str,
    description: str,
    failure_ttl: int,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The fields of RQ's job hash for a freshly queued delivery, as RQ itself writes them."""
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
