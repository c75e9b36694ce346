"""Deliveries as RQ jobs: the job hash is what RQ itself would write."""

from __future__ import annotations

from datetime import datetime

from svcgw.deliveries import job_fields, job_fields_by_rq


def test_job_fields_equal_what_rq_writes() -> None:
    moment = datetime(2026, 11, 22, 3, 44, 57, 123456)
    for delivery_id, description, queue, ttl in [
        ("dlv_0123456789abcdef01234567", "Msg for we_x", "svcgw", 2592000),
        ("dlv_ffffffffffffffffffffffff", "GapClosed for we_\u4f60", "other", 60),
    ]:
        ours = job_fields(delivery_id, queue_name=queue, description=description, failure_ttl=ttl, now=moment)
        theirs = job_fields_by_rq(delivery_id, queue_name=queue, description=description, failure_ttl=ttl, now=moment)
        assert ours == theirs


def test_each_delivery_gets_its_own_copy() -> None:
    first = job_fields("dlv_a", queue_name="svcgw", description="a", failure_ttl=60)
    first["status"] = "changed"
    assert job_fields("dlv_b", queue_name="svcgw", description="b", failure_ttl=60)["status"] == "queued"


def test_flat_fields_load_in_rq_as_the_full_ones(redis) -> None:  # type: ignore[no-untyped-def]
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from svcgw.deliveries import template

    flat = template("svcgw", 60).flat("dlv_flat", "Msg for we_y")
    assert b"" not in flat[1::2]
    redis.hset("rq:job:dlv_flat", mapping=dict(zip(flat[::2], flat[1::2], strict=True)))
    redis.hset("rq:job:dlv_full", mapping=job_fields("dlv_full", queue_name="svcgw", description="Msg for we_y",
                                                     failure_ttl=60))
    loaded = Job.fetch("dlv_flat", connection=redis, serializer=JSONSerializer)
    full = Job.fetch("dlv_full", connection=redis, serializer=JSONSerializer)
    assert loaded.args == ["dlv_flat"] and loaded.func_name == "worker.jobs.deliver"
    for name in ("origin", "description", "result_ttl", "failure_ttl", "worker_name", "started_at", "ended_at"):
        assert getattr(loaded, name) == getattr(full, name), name
    assert loaded.get_status() == full.get_status() == "queued"
