"""Liveness state: the gateway's marks, GapClosed, the flips and what they queue, the display."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.intake import gapclosed
from svcgw.liveness import transitions
from svcgw.liveness.events import iso8601
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision, run

T = TypeVar("T")


def with_async(settings: Settings, action: Callable[[AsyncRedis], Awaitable[T]]) -> T:
    async def go() -> T:
        # The receiver's client: raw bytes.
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await action(client)
        finally:
            await client.aclose()

    return run(go())


@pytest.fixture
def text(redis_url: str) -> Any:
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def started(settings: Settings, interval: float = 60.0) -> str:
    appid = provision(settings).appid
    with_async(settings, lambda r: transitions.mark_started(r, keys, appid, interval))
    return appid


def offline(settings: Settings, appid: str, **flip: Any) -> str | None:
    return with_async(settings, lambda r: transitions.go_offline(r, keys, settings, appid, **flip))


def online(settings: Settings, appid: str, **flip: Any) -> str | None:
    return with_async(settings, lambda r: transitions.go_online(r, keys, settings, appid, **flip))


def queued_events(text: Any, settings: Settings) -> list[dict[str, Any]]:
    """Service events queued, then those waiting behind an earlier one of their instance, oldest first."""
    waiting = text.zrange(keys.rq.deferred(settings.queue_name), 0, -1)
    ids = text.lrange(keys.rq.queue(settings.queue_name), 0, -1) + waiting
    return [orjson.loads(text.hget(keys.delivery(d), "body")) for d in ids]


def fields(text: Any, appid: str) -> dict[str, str]:
    return dict(text.hgetall(keys.instance(appid)))


# --- the gateway's marks -------------------------------------------------------------
def test_mark_started_schedules_the_first_probe_within_one_interval(settings: Settings, text: Any) -> None:
    before = time.time()
    appid = started(settings, interval=60)
    state = fields(text, appid)
    assert state["maintained"] == "1" and state["status"] == "online"
    due = text.zscore(keys.probe_schedule, appid)
    assert before + 30 <= due <= time.time() + 60
    assert float(state["next_probe"]) == pytest.approx(due)


def test_stop_and_logout_leave_the_schedule(settings: Settings, text: Any) -> None:
    appid = started(settings)
    with_async(settings, lambda r: transitions.mark_stopped(r, keys, appid))
    assert text.zscore(keys.probe_schedule, appid) is None
    assert fields(text, appid)["status"] == "stopped"
    assert fields(text, appid)["maintained"] == "0"

    with_async(settings, lambda r: transitions.mark_started(r, keys, appid, 60))
    assert text.zscore(keys.probe_schedule, appid) is not None
    with_async(settings, lambda r: transitions.mark_logged_out(r, keys, appid))
    assert text.zscore(keys.probe_schedule, appid) is None
    assert fields(text, appid)["status"] == "logged_out"


def test_record_proxy(settings: Settings, text: Any) -> None:
    appid = started(settings)
    with_async(settings, lambda r: transitions.record_proxy(r, keys, appid, "socks5://10.0.0.1:1080"))
    assert fields(text, appid)["proxy"] == "socks5://10.0.0.1:1080"


# --- GapClosed ---------------------------------------------------------------------------
def test_parse_gap_closed_reads_code_and_message() -> None:
    raws = [
        b'{"code":-11002,"message":"logged in elsewhere"}',
        b'{"code":0}',
        b'{"code":true}',
        b'{"message":"no code"}',
        b"[1]",
        b'{"code":"-1"}',
    ]
    assert gapclosed.parse_gap_closed(raws) == [(-11002, "logged in elsewhere"), (0, "")]


def test_gap_closed_asks_for_a_probe_at_once(settings: Settings, text: Any) -> None:
    appid = started(settings)
    outcome = with_async(settings, lambda r: gapclosed.on_gap_closed(r, keys, appid, [(-11001, "reconnect")]))
    assert outcome == "probe"
    assert text.zscore(keys.probe_schedule, appid) <= time.time()
    state = fields(text, appid)
    assert (state["gap_code"], state["gap_message"]) == ("-11001", "reconnect")


def test_a_manual_gap_closed_is_not_overwritten_by_a_later_probe_request(settings: Settings, text: Any) -> None:
    appid = started(settings)
    closes = [(-1, "x"), (-1008, "phone")]
    assert with_async(settings, lambda r: gapclosed.on_gap_closed(r, keys, appid, closes)) == "manual"
    assert with_async(settings, lambda r: gapclosed.on_gap_closed(r, keys, appid, [(-1, "error")])) == "probe"
    assert fields(text, appid)["gap_code"] == "-1008"


def test_gap_closed_zero_and_unmaintained_instances_change_nothing(settings: Settings, text: Any) -> None:
    appid = started(settings)
    due = text.zscore(keys.probe_schedule, appid)
    assert with_async(settings, lambda r: gapclosed.on_gap_closed(r, keys, appid, [(0, "closed by user")])) == "none"
    assert text.zscore(keys.probe_schedule, appid) == due
    assert "gap_code" not in fields(text, appid)

    with_async(settings, lambda r: transitions.mark_stopped(r, keys, appid))
    assert with_async(settings, lambda r: gapclosed.on_gap_closed(r, keys, appid, [(-11002, "")])) == "none"
    assert text.zscore(keys.probe_schedule, appid) is None
    assert "gap_code" not in fields(text, appid)


def test_long_start_clears_a_pending_gap(settings: Settings, text: Any) -> None:
    appid = started(settings)
    with_async(settings, lambda r: gapclosed.on_gap_closed(r, keys, appid, [(-11002, "")]))
    with_async(settings, lambda r: transitions.mark_started(r, keys, appid, 60))
    assert not {"gap_code", "gap_message", "gap_at", "gap_manual"} & set(fields(text, appid))


# --- flips ---------------------------------------------------------------------------------
def test_offline_flips_once_and_queues_one_event(settings: Settings, text: Any) -> None:
    appid = started(settings)
    text.hset(keys.instance(appid), "last_seen", "1795319037.5")
    first = offline(settings, appid, reason="connection lost", action_required="relogin", detected_at=1795319097.2)
    again = offline(settings, appid, reason="connection lost", action_required="relogin", detected_at=1795319157.0)
    assert first is not None and again is None
    (envelope,) = queued_events(text, settings)
    assert envelope == {
        "appid": appid,
        "event_type": "InstanceOffline",
        "events": [
            {
                "id": f"InstanceOffline:{appid}:1795319097",
                "reason": "connection lost",
                "action_required": "relogin",
                "detected_at": "2026-11-22T03:44:57+00:00",
                "last_seen_at": "2026-11-22T03:43:57+00:00",
                "seq": 1,
            }
        ],
    }
    state = fields(text, appid)
    assert state["status"] == "offline" and state["maintained"] == "1"
    assert text.zscore(keys.probe_schedule, appid) is not None  # relogin: retries go on


def test_a_flip_queues_one_delivery_per_further_destination_that_takes_its_event(settings: Settings, text: Any) -> None:
    appid = started(settings)
    account = text.hget(keys.instance(appid), "account")
    # Routing records as the registry writes them (svcgw.callbacks.routes): the account's, then the instance's own.
    oncall, archive, crm = "dst_" + "a" * 16, "dst_" + "b" * 16, "dst_" + "c" * 16
    routed = {"InstanceOffline": oncall, "InstanceRecovered": oncall, "Msg": crm}
    text.hset(keys.routes_account(account), mapping=routed)
    text.hset(keys.routes_instance(appid), "*", archive)
    primary = offline(settings, appid, reason="lost", action_required="relogin", detected_at=time.time())
    assert primary is not None

    ((_, entry),) = text.xrange(keys.callback_log(appid))
    pairs = [pair.split(":") for pair in entry["f"].split()]
    assert entry["delivery"] == primary and [destination for _, destination in pairs] == [oncall, archive]
    body = text.hget(keys.delivery(primary), "body")
    for delivery_id, destination in pairs:
        record = text.hgetall(keys.delivery(delivery_id))
        assert record["destination"] == destination and record["primary"] == primary
        assert record["body"] == body and record["event_type"] == "InstanceOffline" and "chain" not in record
        assert text.hget(keys.rq.job(delivery_id), "status") == "queued"
        assert [f["d"] for _, f in text.xrange(keys.destination_deliveries(destination))] == [delivery_id]
    # Queued each, behind none of the instance's service events: only the primary is in its chain.
    assert text.lrange(keys.service_events(appid), 0, -1) == [primary]
    assert text.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [primary, *(d for d, _ in pairs)]
    assert text.exists(keys.destination_deliveries(crm)) == 0


def test_a_flip_of_an_instance_without_further_destinations_writes_only_its_own(settings: Settings, text: Any) -> None:
    appid = started(settings)
    primary = offline(settings, appid, reason="lost", action_required="relogin", detected_at=time.time())
    ((_, entry),) = text.xrange(keys.callback_log(appid))
    assert entry["delivery"] == primary and "f" not in entry
    assert text.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [primary]


def test_concurrent_flips_queue_exactly_one_event(settings: Settings, redis_url: str) -> None:
    appid = started(settings)
    results: list[str | None] = []
    barrier = threading.Barrier(8)

    def flip(action: Callable[[Any], Awaitable[str | None]]) -> None:
        async def go() -> str | None:
            client = AsyncRedis.from_url(redis_url)
            try:
                barrier.wait()
                return await action(client)
            finally:
                await client.aclose()

        results.append(run(go()))

    def race(action: Callable[[Any], Awaitable[str | None]]) -> list[str | None]:
        results.clear()
        threads = [threading.Thread(target=flip, args=(action,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [r for r in results if r is not None]

    offline = race(
        lambda c: transitions.go_offline(
            c, keys, settings, appid, reason="lost", action_required="relogin", detected_at=1.0
        )
    )
    online = race(lambda c: transitions.go_online(c, keys, settings, appid, auto_reconnected=True, at=time.time()))
    assert len(offline) == 1 and len(online) == 1
    text = Redis.from_url(redis_url, decode_responses=True)
    assert [e["event_type"] for e in queued_events(text, settings)] == ["InstanceOffline", "InstanceRecovered"]
    text.close()


def test_manual_stops_maintenance_and_an_upgrade_sends_nothing_more(settings: Settings, text: Any) -> None:
    appid = started(settings)
    offline(settings, appid, reason="lost", action_required="relogin", detected_at=time.time())
    upgraded = offline(
        settings, appid, reason="logged in on another device", action_required="manual", detected_at=time.time()
    )
    assert upgraded is None
    assert len(queued_events(text, settings)) == 1
    state = fields(text, appid)
    assert state["action_required"] == "manual" and state["maintained"] == "0"
    assert text.zscore(keys.probe_schedule, appid) is None
    # Not maintained: no probe can bring it back on its own.
    assert online(settings, appid, auto_reconnected=True, at=time.time()) is None


def test_recovery_after_an_offline_reports_its_length(settings: Settings, text: Any) -> None:
    appid = started(settings)
    offline(settings, appid, reason="lost", action_required="relogin", detected_at=1795319097.0)
    online(settings, appid, auto_reconnected=True, at=1795319160.9)
    _, envelope = queued_events(text, settings)
    assert envelope["events"] == [
        {
            "id": f"InstanceRecovered:{appid}:1795319160",
            "recovered_at": "2026-11-22T03:46:00+00:00",
            "offline_seconds": 63,
            "auto_reconnected": True,
            "seq": 2,
        }
    ]
    state = fields(text, appid)
    assert state["status"] == "online"
    assert not {"reason", "action_required", "offline_since"} & set(state)
    assert online(settings, appid, auto_reconnected=True, at=time.time()) is None


def test_long_start_after_manual_owes_a_recovery_not_auto_reconnected(settings: Settings, text: Any) -> None:
    appid = started(settings)
    offline(settings, appid, reason="phone", action_required="manual", detected_at=time.time() - 30)
    before = time.time()
    with_async(settings, lambda r: transitions.mark_started(r, keys, appid, 60))
    # The first probe is due at once, to send the recovery.
    assert text.zscore(keys.probe_schedule, appid) <= time.time()
    state = fields(text, appid)
    assert state["status"] == "online" and "offline_since" in state

    assert online(settings, appid, auto_reconnected=True, at=time.time()) is not None
    recovered = queued_events(text, settings)[-1]["events"][0]
    assert recovered["auto_reconnected"] is False
    assert 29 <= recovered["offline_seconds"] <= 31
    assert recovered["recovered_at"] in {iso8601(before), iso8601(before + 1)}
    assert "offline_since" not in fields(text, appid)


def test_stopped_instances_do_not_flip(settings: Settings, text: Any) -> None:
    appid = started(settings)
    with_async(settings, lambda r: transitions.mark_stopped(r, keys, appid))
    assert offline(settings, appid, reason="x", action_required="relogin", detected_at=1) is None
    assert queued_events(text, settings) == []


# --- display ---------------------------------------------------------------------------------
def test_describe() -> None:
    assert transitions.describe({"account": "acc_1"}) == {
        "status": "not_started",
        "maintained": False,
        "reason": None,
        "action_required": None,
        "since": None,
        "last_probe": None,
        "next_probe": None,
        "last_seen": None,
        "offline_since": None,
        "probe_error": None,
    }
    offline = transitions.describe(
        {
            b"status": b"offline",
            b"maintained": b"1",
            b"reason": b"connection lost",
            b"action_required": b"relogin",
            b"since": b"1795319097.2",
            b"offline_since": b"1795319097.2",
            b"last_probe": b"1795319157.0",
            b"next_probe": b"1795319217.0",
            b"last_seen": b"1795319037.0",
            b"probing": b"1795319217.0",
        }
    )
    assert offline["status"] == "offline"
    assert offline["reason"] == "connection lost" and offline["action_required"] == "relogin"
    assert offline["since"] == "2026-11-22T03:44:57+00:00"
    assert offline["next_probe"] == "2026-11-22T03:46:57+00:00"
    assert offline["last_seen"] == "2026-11-22T03:43:57+00:00"
    assert "probing" not in offline
    stopped = transitions.describe({"status": "stopped", "maintained": "0", "reason": "old", "next_probe": "1"})
    assert stopped["reason"] is None and stopped["next_probe"] is None
