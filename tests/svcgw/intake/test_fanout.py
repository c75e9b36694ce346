"""What the ingest script is given for the further destinations of a post (svcgw.intake.fanout.plan): pure."""

from __future__ import annotations

import itertools

from svcgw.intake.fanout import plan
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace


def _job(delivery_id: str) -> list[bytes]:
    return [b"origin", b"svcgw", b"data", delivery_id.encode()]


def test_no_destination_no_plan() -> None:
    assert plan(keys, [], _job) is None


def test_per_destination_a_dlv_delivery_its_job_and_the_destinations_index() -> None:
    ids = (f"dlv_{n:024x}" for n in itertools.count(1))
    fan = plan(keys, ["dst_a", "dst_b"], _job, new_id=lambda: next(ids))
    assert fan is not None
    first, second = "dlv_" + "0" * 23 + "1", "dlv_" + "0" * 23 + "2"
    assert fan.deliveries == ((first, "dst_a"), (second, "dst_b"))
    assert fan.keys == (
        f"svcgw:delivery:{first}", f"rq:job:{first}", "svcgw:destination-deliveries:dst_a",
        f"svcgw:delivery:{second}", f"rq:job:{second}", "svcgw:destination-deliveries:dst_b",
    )  # fmt: skip
    assert fan.args == (2, first, "dst_a", *_job(first), second, "dst_b", *_job(second))
    assert fan.log_field == f"{first}:dst_a {second}:dst_b"


def test_every_key_carries_the_shards_tag_on_a_cluster() -> None:
    fan = plan(KeySpace("{s3}"), ["dst_a"], _job)
    assert fan is not None
    assert all(key.startswith("{s3}") and key.count("{") == 1 for key in fan.keys)
    ((delivery_id, _),) = fan.deliveries
    assert delivery_id.startswith("dlv_") and len(delivery_id) == 28
