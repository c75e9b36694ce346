"""What the ingest script is given for the further destinations of a post (svcgw.intake.fanout.plan): pure."""

from __future__ import annotations

import itertools

from svcgw.intake.fanout import plan
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace


def _job(delivery_id: str, named: bool = False) -> list[bytes]:
    if named:  # RQ's lean fields: one hash with the delivery's
        return [b"origin", b"svcgw"]
    return [b"origin", b"svcgw", b"data", delivery_id.encode()]


DST_A, DST_B = "dst_" + "a" * 16, "dst_0123456789abcdef"


def test_no_destination_no_plan() -> None:
    assert plan(keys, [], _job) is None


def test_named_by_the_post_one_lean_hash_each() -> None:
    primary = "we_1-1795645968935-0"
    fan = plan(keys, [DST_A, DST_B], _job, primary=primary)
    assert fan is not None and fan.named
    first, second = f"{primary}_{'a' * 16}", f"{primary}_0123456789abcdef"
    assert fan.deliveries == ((first, DST_A), (second, DST_B))
    # The delivery's hash is its job hash: the same name twice, as the script's KEYS take it.
    assert fan.keys == (
        f"rq:job:{first}", f"rq:job:{first}", f"svcgw:destination-index:{DST_A}",
        f"rq:job:{second}", f"rq:job:{second}", f"svcgw:destination-index:{DST_B}",
    )  # fmt: skip
    assert fan.args == (1, first, DST_A, b"origin", b"svcgw", second, DST_B, b"origin", b"svcgw")


def test_a_primary_of_the_older_form_gives_dlv_deliveries() -> None:
    fan = plan(keys, [DST_A], _job, primary="dlv_" + "0" * 24)
    assert fan is not None and not fan.named
    ((delivery_id, _),) = fan.deliveries
    assert delivery_id.startswith("dlv_")


def test_per_destination_a_dlv_delivery_its_job_and_the_destinations_index() -> None:
    ids = (f"dlv_{n:024x}" for n in itertools.count(1))
    fan = plan(keys, ["dst_a", "dst_b"], _job, new_id=lambda: next(ids))
    assert fan is not None
    first, second = "dlv_" + "0" * 23 + "1", "dlv_" + "0" * 23 + "2"
    assert fan.deliveries == ((first, "dst_a"), (second, "dst_b"))
    assert fan.keys == (
        f"svcgw:delivery:{first}", f"rq:job:{first}", "svcgw:destination-index:dst_a",
        f"svcgw:delivery:{second}", f"rq:job:{second}", "svcgw:destination-index:dst_b",
    )  # fmt: skip
    assert fan.args == (2, first, "dst_a", *_job(first), second, "dst_b", *_job(second))


def test_every_key_carries_the_shards_tag_on_a_cluster() -> None:
    fan = plan(KeySpace("{s3}"), ["dst_a"], _job)
    assert fan is not None
    assert all(key.startswith("{s3}") and key.count("{") == 1 for key in fan.keys)
    ((delivery_id, _),) = fan.deliveries
    assert delivery_id.startswith("dlv_") and len(delivery_id) == 28
