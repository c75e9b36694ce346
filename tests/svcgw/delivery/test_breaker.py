"""Breaker records: the finish script's rule (``breaker.lua``, on a real Redis), their reading and their combining."""

from __future__ import annotations

import asyncio

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery import breaker, failingorigins
from svcgw.delivery.breaker import BreakerRecord, combine, parse
from svcgw.shards.clients import ShardRedis
from svcgw.storage import scripts
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace

ACCOUNT = "acc_0123456789abcdef"
DESTINATION = "https://hooks.example.com:443"
NAME = breaker.name(ACCOUNT, DESTINATION)
CAP, FLOOR = 16, 1

_CALL = "\nreturn probe_outcome(KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]))"


class Outcomes:
    """``probe_outcome`` of the finish script, called alone against the test's Redis."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.script = redis.register_script(scripts.source("breaker") + _CALL)

    def __call__(self, mark: str, now: float, destination: str = NAME) -> int:
        return int(self.script(keys=[keys.breakers], args=[destination, mark, repr(now), CAP, FLOOR]))

    def record(self, destination: str = NAME) -> BreakerRecord | None:
        value = self.redis.hget(keys.breakers, destination)
        return None if value is None else parse(destination, value)


def _probe(limit: int, since: float, at: float, word: str, opened: float | None = None) -> BreakerRecord:
    """The test account's record of the test origin."""
    return BreakerRecord(DESTINATION, limit, since, at, word, opened, account=ACCOUNT)


def test_timeouts_halve_the_limit_down_to_the_probes_and_begin_once(redis: Redis) -> None:
    outcome = Outcomes(redis)
    assert outcome("t:99.5", 100.0) == breaker.CHANGED | breaker.BEGAN
    assert outcome.record() == _probe(8, since=100.0, at=100.0, word="t")
    limits = []
    for n in range(5):
        assert outcome("t:99.5", 101.0 + n) == breaker.CHANGED  # began once
        record = outcome.record()
        assert record is not None
        limits.append(record.limit)
    assert limits == [4, 2, 1, 1, 1]
    assert record.since == 100.0 and record.hanging


def test_answers_add_one_each_and_at_the_caps_the_destination_is_open_again(redis: Redis) -> None:
    outcome = Outcomes(redis)
    for n in range(5):
        outcome("t:99.0", 100.0 + n)
    # The first answer after timeouts reopens it (its held-back jobs come forward), once.
    assert outcome("a", 110.0) == breaker.CHANGED | breaker.REOPENED
    assert outcome.record() == _probe(2, 100.0, 110.0, "a", opened=110.0)
    bits = [outcome("a", 111.0 + n) for n in range(CAP - 2)]
    assert bits[:-1] == [breaker.CHANGED] * (CAP - 3)
    assert bits[-1] == breaker.CHANGED | breaker.ENDED
    record = outcome.record()
    assert record is not None and record.word == "o" and record.limit == CAP and not record.tripped
    # Open, an answer changes nothing: a healthy origin's attempts write nothing.
    assert outcome("a", 130.0) == 0
    assert outcome.record() == record


def test_a_timeout_of_an_attempt_older_than_the_reopening_is_old_news(redis: Redis) -> None:
    outcome = Outcomes(redis)
    outcome("t:99.0", 100.0)
    outcome("a", 110.0)
    # Sent before the answer that reopened it, timed out after: changes nothing.
    assert outcome("t:105.0", 112.0) == 0
    assert outcome.record() == _probe(9, 100.0, 110.0, "a", opened=110.0)
    # Sent after it: the origin hangs again.
    assert outcome("t:110.5", 113.0) == breaker.CHANGED
    assert outcome.record() == _probe(4, 100.0, 113.0, "t")
    # Open again, a new timeout begins a new breaker from the caps.
    for n in range(CAP):
        outcome("a", 114.0 + n)
    assert outcome("t:200.0", 201.0) == breaker.CHANGED | breaker.BEGAN
    assert outcome.record() == _probe(8, 201.0, 201.0, "t")


def test_an_answer_to_a_destination_never_probed_and_no_destination_write_nothing(redis: Redis) -> None:
    outcome = Outcomes(redis)
    assert outcome("a", 100.0) == 0
    assert outcome("t:99.0", 100.0, destination="") == 0
    assert redis.hlen(keys.breakers) == 0


def test_a_record_is_read_only_in_its_own_form() -> None:
    assert parse("acc_a d", b"3:10.5:11:a:11") == BreakerRecord("d", 3, 10.5, 11.0, "a", opened=11.0, account="acc_a")
    assert parse("acc_a d", "1:10:12:t:") == BreakerRecord("d", 1, 10.0, 12.0, "t", account="acc_a")
    for broken in ("", "1:2:3", "x:1:2:t:", "1:2:3:z:", "1:2:3:t:4:5"):
        assert parse("acc_a d", broken) is None


def test_a_record_is_named_by_its_account_and_its_destination() -> None:
    assert breaker.name("acc_a", DESTINATION) == "acc_a https://hooks.example.com:443"
    assert breaker.split(breaker.name("acc_a", DESTINATION)) == ("acc_a", DESTINATION)
    assert breaker.name("", DESTINATION) == breaker.name("acc_a", "") == ""
    # A record of an earlier version, named by its origin alone, is not read: it names no account.
    assert breaker.split(DESTINATION) is None
    assert parse(DESTINATION, "1:10:12:t:") is None
    assert _probe(1, 10.0, 12.0, "t").name == NAME


def test_the_record_changed_last_counts_and_a_tie_goes_to_the_lower_limit() -> None:
    older, newer = BreakerRecord("d", 1, 1.0, 5.0, "t"), BreakerRecord("d", 16, 1.0, 6.0, "o")
    assert combine([older, newer]) == newer == combine([newer, older])
    low = BreakerRecord("d", 2, 1.0, 6.0, "a")
    assert combine([newer, low]) == low
    assert combine([]) is None


def _read(
    settings: Settings, now: float, account: str = ACCOUNT
) -> tuple[dict[str, BreakerRecord], dict[str, BreakerRecord]]:
    async def go() -> tuple[dict[str, BreakerRecord], dict[str, BreakerRecord]]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        wanted = ["http://a.test:80", "http://b.test:80", "http://c.test:80"]
        try:
            one = await breaker.tripped(client, keys, settings, wanted, account=account, now=now)
            other = KeySpace("{s1}")
            both = await breaker.tripped_anywhere([ShardRedis(client, keys), ShardRedis(client, other)], settings,
                                                  wanted, account=account, now=now)  # fmt: skip
            return one, both
        finally:
            await client.aclose()

    return asyncio.run(go())


def _names(**records: str) -> dict[str, str]:
    return {breaker.name(ACCOUNT, f"http://{host}.test:80"): value for host, value in records.items()}


def test_readers_show_what_is_probed_combined_over_the_shards(settings: Settings, redis: Redis) -> None:
    redis.hset(keys.breakers, mapping=_names(a="1:90:100:t:", b="16:90:100:o:95"))
    redis.hset(KeySpace("{s1}").breakers, mapping=_names(a="16:90:101:o:101", c="4:99:100:a:99"))
    one, both = _read(settings, 102.0)
    assert set(one) == {"http://a.test:80"}
    # Shard 1 reopened a after shard 0's timeouts; c is answering below its caps there.
    assert set(both) == {"http://c.test:80"}
    assert both["http://c.test:80"].as_dict() == {
        "destination": "http://c.test:80", "probing_since": 99.0, "attempts_in_flight": 4, "answering": True,
        "last_change": 100.0,
    }  # fmt: skip
    # Nothing changed it for longer than a failure is remembered: forgotten.
    forgotten = 100.0 + failingorigins.forget_after(settings) + 1
    assert _read(settings, forgotten) == ({}, {})


def test_readers_show_an_account_its_own_records_only(settings: Settings, redis: Redis) -> None:
    # Another account's attempts to the same origin hang: nothing of it is shown to this one,
    # nor is a record of an earlier version, named by the origin alone.
    redis.hset(keys.breakers, mapping={breaker.name("acc_other", "http://a.test:80"): "1:90:100:t:",
                                                   "http://a.test:80": "1:90:100:t:"})  # fmt: skip
    assert _read(settings, 102.0) == ({}, {})
    one, both = _read(settings, 102.0, account="acc_other")
    assert set(one) == set(both) == {"http://a.test:80"}
    assert both["http://a.test:80"].account == "acc_other"

    async def unnamed() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            await breaker.tripped_anywhere([ShardRedis(client, keys)], settings, ["http://a.test:80"])
        finally:
            await client.aclose()

    with pytest.raises(ValueError, match="per account"):
        asyncio.run(unnamed())


def test_every_accounts_records_are_read_by_name(settings: Settings, redis: Redis) -> None:
    mine, theirs = breaker.name(ACCOUNT, "http://a.test:80"), breaker.name("acc_other", "http://a.test:80")
    redis.hset(keys.breakers, mapping={mine: "1:90:100:t:", theirs: "2:90:100:a:99",
                                                   "http://a.test:80": "1:90:100:t:"})  # fmt: skip

    async def every() -> dict[str, BreakerRecord]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await breaker.tripped(client, keys, settings, now=102.0)
        finally:
            await client.aclose()

    found = asyncio.run(every())
    assert set(found) == {mine, theirs}
    assert (found[theirs].account, found[theirs].destination) == ("acc_other", "http://a.test:80")


def test_the_workers_read_forgets_what_lapsed(redis: Redis) -> None:
    read = redis.register_script(scripts.text("breaker_read"))
    redis.hset(keys.breakers, mapping={
        "http://open-old.test:80": "16:10:40:o:30", "http://open.test:80": "16:10:90:o:80",
        "http://hung.test:80": "1:10:50:t:", "http://stale.test:80": "1:10:1:t:", "http://x.test:80": "junk",
    })  # fmt: skip
    kept = read(keys=[keys.breakers], args=[100.0, 30.0, 95.0])
    assert {kept[i].decode() for i in range(0, len(kept), 2)} == {"http://open.test:80", "http://hung.test:80"}
    assert set(redis.hkeys(keys.breakers)) == {b"http://open.test:80", b"http://hung.test:80"}


@pytest.mark.parametrize("cap", [1, 16])
def test_the_finish_scripts_argument_names_the_caps_and_a_floor_within_them(env: dict[str, str], cap: int) -> None:
    settings = Settings.from_env(dict(env, SVCGW_DESTINATION_CONCURRENCY=str(cap)))
    assert breaker.script_argument(settings) == f"{cap}:{min(cap, breaker.TRIALS)}"
