"""Instance counts for /metrics: kept in step with every status change, computed once for older data."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ResponseError

from svcgw.config.settings import Settings
from svcgw.liveness import transitions
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.scripts import register as register_script
from svcgw.storage.scripts import source
from svcgw.views import metrics
from svcgw.views.metrics import snapshot
from tests.conftest import provision, run, with_store


def _snapshot(settings: Settings) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await snapshot(client, keys, settings.queue_name)
        finally:
            await client.aclose()

    return run(go())


def _live(settings: Settings, action: Any) -> Any:
    async def go() -> Any:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await action(client)
        finally:
            await client.aclose()

    return run(go())


def _counted_by_hand(redis: Redis) -> tuple[dict[str, int], int]:
    """What the scrape used to compute by reading every instance."""
    statuses: dict[str, int] = {}
    errors = 0
    for appid in redis.smembers(keys.instances):
        status, probe_error = redis.hmget(keys.instance(appid.decode()), ["status", "probe_error"])
        name = status.decode() if status else "not_started"
        statuses[name] = statuses.get(name, 0) + 1
        errors += 1 if probe_error else 0
    return statuses, errors


def _probe_finished(redis: Redis, appid: str, error: str) -> None:
    script = redis.register_script(source("probe_finish"))
    script(
        keys=[keys.instance(appid), keys.metrics_instances, keys.instances],
        args=["lease", repr(time.time()), "0", "", error, appid],
    )


def _matches(settings: Settings, redis: Redis) -> dict[str, Any]:
    data = _snapshot(settings)
    statuses, errors = _counted_by_hand(redis)
    assert (data["instances"], data["probe_errors"]) == (statuses, errors)
    return data


def test_counts_follow_every_status_change(settings: Settings, redis: Redis) -> None:
    assert _matches(settings, redis)["instances"] == {}
    first, second, third = (provision(settings).appid for _ in range(3))
    assert _matches(settings, redis)["instances"] == {"not_started": 3}

    _live(settings, lambda r: transitions.mark_started(r, keys, first, 60))
    _live(settings, lambda r: transitions.mark_started(r, keys, second, 60))
    assert _matches(settings, redis)["instances"] == {"not_started": 1, "online": 2}

    now = time.time()
    _live(
        settings,
        lambda r: transitions.go_offline(
            r, keys, settings, first, reason="gone", action_required="relogin", detected_at=now
        ),
    )
    _live(  # a second flip changes nothing
        settings,
        lambda r: transitions.go_offline(
            r, keys, settings, first, reason="gone", action_required="relogin", detected_at=now
        ),
    )
    assert _matches(settings, redis)["instances"] == {"not_started": 1, "online": 1, "offline": 1}
    _live(settings, lambda r: transitions.go_online(r, keys, settings, first, auto_reconnected=True, at=time.time()))
    assert _matches(settings, redis)["instances"] == {"not_started": 1, "online": 2}

    _probe_finished(redis, second, "upstream timed out")
    _probe_finished(redis, second, "upstream timed out again")
    assert _matches(settings, redis)["probe_errors"] == 1
    _probe_finished(redis, second, "")
    assert _matches(settings, redis)["probe_errors"] == 0
    _probe_finished(redis, first, "upstream timed out")
    _live(settings, lambda r: transitions.mark_started(r, keys, first, 60))  # a long/start clears the error
    assert _matches(settings, redis)["probe_errors"] == 0

    _live(settings, lambda r: transitions.mark_stopped(r, keys, first))
    _live(settings, lambda r: transitions.mark_logged_out(r, keys, second))
    _live(settings, lambda r: transitions.mark_logged_out(r, keys, third))
    assert _matches(settings, redis)["instances"] == {"stopped": 1, "logged_out": 2}

    # Registering an appid again does not count it twice.
    account = redis.hget(keys.instance(first), "account")
    assert account is not None
    with_store(settings, lambda store: store.register_instance(first, account.decode()))
    assert _matches(settings, redis)["instances"] == {"stopped": 1, "logged_out": 2}


def test_a_scrape_reads_the_counts_not_the_instances(settings: Settings, redis: Redis) -> None:
    for _ in range(3):
        provision(settings)
    assert _snapshot(settings)["instances"] == {"not_started": 3}
    # Were the scrape to read every instance, it would find none now.
    redis.rename(keys.instances, "elsewhere")
    assert _snapshot(settings)["instances"] == {"not_started": 3}


@pytest.mark.parametrize("count", [0, 5])
def test_counts_are_computed_once_for_instances_registered_before_they_were_kept(
    settings: Settings, redis: Redis, count: int
) -> None:
    appids = [provision(settings).appid for _ in range(count)]
    for n, appid in enumerate(appids):
        if n % 2:
            redis.hset(keys.instance(appid), mapping={"status": "online", "maintained": "1"})
        if n == 1:
            redis.hset(keys.instance(appid), "probe_error", "upstream timed out")
    redis.delete(keys.metrics_instances)  # as before the counts were kept

    data = _matches(settings, redis)
    assert data["instances"] == ({"not_started": 3, "online": 2} if count else {})
    assert data["probe_errors"] == (1 if count else 0)
    built = redis.hget(keys.metrics_instances, "built_at")
    assert built is not None

    provision(settings)  # counted from now on, not computed again
    _matches(settings, redis)
    assert redis.hget(keys.metrics_instances, "built_at") == built


# --- the rebuild names every instance hash it reads ------------------------------------------
def _register_behind(redis: Redis, appid: str) -> None:
    """A registration as the store makes it, on a client of its own: the set and, if they exist, the counts."""
    redis.hset(keys.instance(appid), mapping={"account": "acc_x", "status": "online"})
    counts = (keys.instances, keys.metrics_instances, keys.instance(appid))
    redis.eval(source("liveness_registered"), len(counts), *counts, appid)


def _interleaved(monkeypatch: pytest.MonkeyPatch, between: Any) -> list[int]:
    """Run ``between(n)`` before the rebuild script's n-th call (after its read); the calls' KEYS counts."""
    calls: list[int] = []

    def register(redis: Any, name: str) -> Any:
        script = register_script(redis, name)

        async def call(**given: Any) -> Any:
            calls.append(len(given["keys"]))
            between(len(calls))
            return await script(**given)

        return call

    monkeypatch.setattr(metrics, "register", register)
    return calls


def test_a_registration_between_the_read_and_the_count_makes_the_rebuild_read_again(
    settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        provision(settings)
    redis.delete(keys.metrics_instances)
    calls = _interleaved(monkeypatch, lambda n: _register_behind(redis, "we_late") if n == 1 else None)

    assert _live(settings, lambda r: metrics.rebuild_instance_counts(r, keys)) is True
    assert calls == [2 + 3, 2 + 4]  # the second read names the late instance too
    assert _matches(settings, redis)["instances"] == {"not_started": 3, "online": 1}


def test_a_rebuild_gives_up_after_a_few_reads_and_the_next_scrape_counts(
    settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    provision(settings)
    redis.delete(keys.metrics_instances)
    calls = _interleaved(monkeypatch, lambda n: _register_behind(redis, f"we_late{n}"))

    assert _live(settings, lambda r: metrics.rebuild_instance_counts(r, keys)) is False
    assert len(calls) == metrics.REBUILD_ATTEMPTS
    assert redis.exists(keys.metrics_instances) == 0
    monkeypatch.undo()
    assert _matches(settings, redis)["instances"] == {"not_started": 1, "online": metrics.REBUILD_ATTEMPTS}


def test_the_count_script_refuses_a_set_that_is_not_the_one_named(redis: Redis) -> None:
    counts_script = redis.register_script(source("liveness_counts"))
    members = ["we_a", "we_b", "we_c"]
    redis.sadd(keys.instances, *members)

    def count(appids: list[str]) -> int:
        named = [keys.instance(appid) for appid in appids]
        return int(counts_script(keys=[keys.instances, keys.metrics_instances, *named], args=["1", "0", *appids]))

    assert count(["we_a", "we_b"]) == -1  # one fewer
    assert count(["we_a", "we_b", "we_x"]) == -1  # as many, one of them another
    assert redis.exists(keys.metrics_instances) == 0
    with pytest.raises(ResponseError, match="one instance key per appid"):
        counts_script(keys=[keys.instances, keys.metrics_instances], args=["1", "0", *members])
    assert count(members) == 1
    assert redis.hget(keys.metrics_instances, "status|not_started") == b"3"
    assert count(members) == 0  # they exist now


def test_a_shard_counts_only_its_own_instances_of_the_set(settings: Settings, redis: Redis) -> None:
    """Shard 0's set is the registry's, of every shard; an instance's hash names its shard (none: shard 0)."""
    redis.sadd(keys.instances, "we_old", "we_zero", "we_one", "we_two")
    redis.hset(keys.instance("we_old"), mapping={"account": "acc_x", "status": "online"})  # before shards
    redis.hset(keys.instance("we_zero"), mapping={"account": "acc_x", "shard": "0", "probe_error": "timeout"})
    redis.hset(keys.instance("we_one"), mapping={"account": "acc_x", "shard": "1"})
    redis.hset(keys.instance("we_two"), mapping={"account": "acc_x", "shard": "2", "status": "online"})

    data = _snapshot(settings)
    assert (data["instances"], data["probe_errors"]) == ({"online": 1, "not_started": 1}, 1)
    assert redis.hget(keys.metrics_instances, "shard") == b"0"


def test_counts_of_the_earlier_rule_are_computed_again(settings: Settings, redis: Redis) -> None:
    """Counts without the shard they count were made by counting every instance of the set: replaced once."""
    redis.sadd(keys.instances, "we_zero", "we_one")
    redis.hset(keys.instance("we_zero"), mapping={"account": "acc_x"})
    redis.hset(keys.instance("we_one"), mapping={"account": "acc_x", "shard": "1", "status": "online"})
    redis.hset(keys.metrics_instances, mapping={"built_at": "1", "status|not_started": 1, "status|online": 1})

    assert _snapshot(settings)["instances"] == {"not_started": 1}
    built = redis.hget(keys.metrics_instances, "built_at")
    assert built != b"1"
    assert _snapshot(settings)["instances"] == {"not_started": 1}
    assert redis.hget(keys.metrics_instances, "built_at") == built  # computed once


def test_a_rebuild_over_more_instances_than_lua_can_unpack(settings: Settings, redis: Redis) -> None:
    appids = [f"we_{n:012x}" for n in range(10_000)]
    with redis.pipeline(transaction=False) as pipe:
        pipe.sadd(keys.instances, *appids)
        for n, appid in enumerate(appids):
            pipe.hset(keys.instance(appid), mapping={"status": "online" if n % 4 else "stopped"})
        pipe.execute()

    assert _live(settings, lambda r: metrics.rebuild_instance_counts(r, keys)) is True
    assert _matches(settings, redis)["instances"] == {"online": 7_500, "stopped": 2_500}


def test_a_scrape_counts_the_destinations_being_probed_not_those_back_at_their_caps(
    settings: Settings, redis: Redis
) -> None:
    now = time.time()
    assert _snapshot(settings)["probing_destinations"] == 0
    redis.hset(keys.breakers, mapping={
        "acc_a http://hung.test:80": f"1:{now - 9}:{now - 1}:t:",
        "acc_a http://opening.test:80": f"4:{now - 9}:{now}:a:{now}",
        "acc_a http://open.test:80": f"16:{now - 9}:{now}:o:{now}", "acc_a http://junk.test:80": "junk",
        # Of an earlier version, named by the origin alone: not read, it lapses.
        "http://old.test:80": f"1:{now - 9}:{now - 1}:t:",
    })  # fmt: skip
    assert _snapshot(settings)["probing_destinations"] == 2
    # Each account's destination counts once: two accounts' endpoints on one hanging host are two.
    redis.hset(keys.breakers, "acc_b http://hung.test:80", f"1:{now - 9}:{now - 1}:t:")
    assert _snapshot(settings)["probing_destinations"] == 3
