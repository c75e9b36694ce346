"""Attempt records in the delivery hash, and those an earlier version left in a list of their own."""

from __future__ import annotations

import time

from redis import Redis

from svcgw.config.settings import Settings
from svcgw.delivery import attemptrecords
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.queue import Finish
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import exc_info_field
from tests.conftest import provision
from tests.support import attempt_records, wait_for
from tests.svcgw.delivery.test_deadletters import list_dead, show
from tests.svcgw.delivery.test_listing import fail_once, listed, post, shown
from tests.worker.support import claim, finish, with_queue


# --- pure ---------------------------------------------------------------------------
def test_fields_are_numbered_from_one() -> None:
    assert attemptrecords.fields(3) == ["a1", "a2", "a3"]
    assert attemptrecords.fields(0) == []
    assert [attemptrecords.count_of(v) for v in (None, b"2", "7", b"x", b"-1")] == [0, 2, 7, 0, 0]


def test_the_hash_record_wins_and_the_old_list_fills_in() -> None:
    assert attemptrecords.merged(3, [None, b"h2", b"h3"], [b"l1"]) == [b"l1", b"h2", b"h3"]
    assert attemptrecords.merged(2, [b"h1", b"h2"], [b"l1", b"l2"]) == [b"h1", b"h2"]
    assert attemptrecords.merged(2, [b"h1", None], []) == [b"h1"]  # a lost record is left out, not invented
    assert attemptrecords.merged(0, [], [b"l1", b"l2"]) == [b"l1", b"l2"]  # an old delivery read as it was
    assert attemptrecords.from_hash({"attempts": b"2", "a1": b"x", "a2": b"y", "body": b"{}"}) == [b"x", b"y"]


# --- against Redis -----------------------------------------------------------------------
def test_records_are_fields_of_the_delivery_hash_small_enough_for_its_listpack(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    delivery_id = post(settings, tenant, "e1")
    fail_once(settings, delivery_id, tenant.appid, due_in=0.0)  # with the answer's first 1 KB
    stored = redis.hgetall(keys.delivery(delivery_id))
    assert stored[b"attempts"] == b"1" and b"a1" in stored
    # Under hash-max-listpack-value (svcgw.storage.serverconfig; tests/bench/memory.py measures the encoding's effect).
    assert len(stored[b"a1"]) < 2048
    assert redis.exists(keys.delivery_attempts(delivery_id)) == 0
    assert [a["status"] for a in attempt_records(redis, delivery_id)] == [503]


def test_a_delivery_attempted_before_an_upgrade_keeps_its_earlier_records(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = post(settings, tenant, "e1")
    fail_once(settings, delivery_id, tenant.appid, due_in=0.0)
    # What an earlier version left: the first record in a list key of its own, none in the hash.
    legacy = keys.delivery_attempts(delivery_id)
    redis.rpush(legacy, redis.hget(keys.delivery(delivery_id), "a1") or b"")
    redis.hdel(keys.delivery(delivery_id), "a1")

    wait_for(lambda: with_queue(settings, lambda q: q.promote_due()).moved, timeout=5, what="the retry to be due")
    assert claim(settings, 1) == [delivery_id]
    died_at = time.time()
    attempt = Attempt(ok=False, at=died_at, duration=0.01, status=500, error="HTTP 500", destination="d")
    retention = settings.dead_letter_retention
    dead = Finish(
        delivery_id,
        tenant.appid,
        "dead",
        attempt.record(2),
        due=died_at + retention,
        retention=retention,
        error=exc_info_field("HTTP 500"),
    )
    assert finish(settings, dead)

    assert redis.hget(keys.delivery(delivery_id), "attempts") == b"2"
    assert redis.hexists(keys.delivery(delivery_id), "a2") and not redis.hexists(keys.delivery(delivery_id), "a1")
    # The old list expires with the dead letter rather than staying for ever.
    assert 0 < redis.ttl(legacy) <= retention and redis.ttl(keys.delivery(delivery_id)) > 0

    expected = [(1, 503), (2, 500)]
    assert [(a.number, a.status) for a in shown(settings, delivery_id).attempts] == expected
    (listed_delivery,) = listed(settings, tenant.appid).deliveries
    assert [(a.number, a.status) for a in listed_delivery.attempts] == expected
    assert [(a["attempt"], a["status"]) for a in show(settings, delivery_id).attempts] == expected
    (letter,) = list_dead(settings, appid=tenant.appid)
    assert letter.attempts == 2 and letter.last_error == "HTTP 500"
