"""What the service knows of RQ's formats: its key names, per shard, from RQ's own classes.

Deliveries are RQ jobs, so that rq-dashboard, ``rq info`` and ``rq requeue`` see them, but
``svcgw worker`` runs them itself and the service's scripts write RQ's keys directly. Every name
they write is RQ's own, read off RQ's class attributes here (``Job.redis_job_namespace_prefix``,
``Queue.redis_queue_namespace_prefix``, ``Queue.redis_queues_keys``, each registry's
``key_template``, the worker registration's), never spelt out again: an RQ release that renames
one renames it for the service too, and ``tests/svcgw/test_rqformat.py`` holds what the service
writes to what RQ's API reads.

On a Redis Cluster each shard has its own set of RQ classes, whose names carry the shard's tag
in front (:func:`classes`): ``{s3}rq:job:<id>``. RQ's tools are not Cluster clients, so there
they are the service's own readers' names only; on one Redis (no tag) the classes are RQ's own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rq import worker_registration
from rq.job import Job
from rq.queue import Queue
from rq.registry import DeferredJobRegistry, FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry
from rq.worker import Worker

__all__ = ["RqClasses", "RqNames", "classes"]


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

    __slots__ = ("_job", "_queue", "_registries", "queues", "tag", "worker_prefix", "workers")

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        rq = classes(tag)
        self._job = rq.job.redis_job_namespace_prefix
        self._queue = rq.queue.redis_queue_namespace_prefix
        self._registries = {
            "failed": rq.failed.key_template,
            "scheduled": rq.scheduled.key_template,
            "deferred": rq.deferred.key_template,
        }
        # Set of the queues' keys (``rq info`` and rq-dashboard list the queues from it).
        self.queues: str = rq.queue.redis_queues_keys
        # A worker's hash is ``worker_prefix + name``; ``workers`` lists every worker's.
        self.worker_prefix = tag + Worker.redis_worker_namespace_prefix
        self.workers = tag + worker_registration.REDIS_WORKER_KEYS

    def job(self, job_id: str) -> str:
        """RQ's job hash."""
        return self._job + job_id

    def queue(self, queue_name: str) -> str:
        """RQ's queue: a list of job ids, oldest first."""
        return self._queue + queue_name

    def failed(self, queue_name: str) -> str:
        """RQ's failed registry: dead letters, scored by expiry."""
        return self._registries["failed"].format(queue_name)

    def scheduled(self, queue_name: str) -> str:
        """RQ's scheduled registry: retries, scored by due time."""
        return self._registries["scheduled"].format(queue_name)

    def deferred(self, queue_name: str) -> str:
        """RQ's deferred registry: service events waiting for an earlier one of their instance."""
        return self._registries["deferred"].format(queue_name)

    def workers_of(self, queue_name: str) -> str:
        """The set of the workers of one queue."""
        return self.tag + worker_registration.WORKERS_BY_QUEUE_KEY % queue_name
