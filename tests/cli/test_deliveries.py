"""``svcgw deliveries``: list, show and retry now, on deliveries made by the real pipeline."""

from __future__ import annotations

import orjson
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import provision
from tests.support import Sink, is_delivered, wait_for
from tests.svcgw.delivery.fanout import fan_out, ingest_fanned
from tests.svcgw.delivery.test_deadletters import ingest
from tests.worker.support import add_destination
from tests.worker.test_engine import Running


def test_list_show_and_retry(env: dict[str, str], sink: Sink, redis: Redis) -> None:
    env = dict(env, SVCGW_RETRY_SCHEDULE="3600,3600")
    settings = Settings.from_env(env)
    tenant = provision(settings, url=sink.url)
    sink.set(status=502)
    failing = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"c1"},{"id":12345678901234567890123}]}')
    with Running(settings):
        wait_for(lambda: redis.hget(keys.delivery(failing), "state") == b"retrying", timeout=10, what="a retry")
        pending = ingest(settings, tenant, b'{"event_type":"GapClosed","events":[{"gap":1}]}')
        wait_for(lambda: redis.hget(keys.delivery(pending), "state") == b"retrying", timeout=10, what="a retry")

        page = ok(env, "deliveries", "list", tenant.appid)
        assert [d["id"] for d in page["deliveries"]] == [pending, failing]
        assert page["next_before"] is None
        first = page["deliveries"][1]
        assert first["event_ids"] == ["c1", "12345678901234567890123"]
        assert first["state"] == "retrying" and first["next_attempt_at"] > first["received_at"] + 3000
        assert first["attempts"][0]["status"] == 502 and first["attempts"][0]["response"] == '{"ok":true}'

        gaps = ok(env, "deliveries", "list", tenant.appid, "--event-type", "GapClosed")["deliveries"]
        assert [d["id"] for d in gaps] == [pending]
        assert [d["id"] for d in ok(env, "deliveries", "list", tenant.appid, "--event-id", "c1")["deliveries"]] == [
            failing
        ]
        assert ok(env, "deliveries", "list", tenant.appid, "--state", "delivered")["deliveries"] == []

        human = svcgw(env, "deliveries", "list", tenant.appid)
        assert human.exit_code == 0 and failing in human.stdout and "HTTP 502" in human.stdout
        assert "retrying" in human.stdout
        detail = svcgw(env, "deliveries", "show", failing)
        assert detail.exit_code == 0 and "c1" in detail.stdout and '{"ok":true}' in detail.stdout
        assert ok(env, "deliveries", "show", failing)["attempts"][0]["attempt"] == 1

        sink.set(status=200)
        queued = ok(env, "deliveries", "retry", failing)
        assert queued["queued"] is True and queued["id"] == failing
        wait_for(lambda: is_delivered(redis, failing), timeout=10, what="delivery")
        said = svcgw(env, "deliveries", "retry", pending)
        assert said.exit_code == 0 and "queued for its next attempt now" in said.stdout
        wait_for(lambda: is_delivered(redis, pending), timeout=10, what="delivery")

    assert "only a retrying delivery" in fails(env, "deliveries", "retry", failing)
    assert "no delivery" in fails(env, "deliveries", "show", "dlv_000000000000000000000000")
    assert "no instance" in fails(env, "deliveries", "list", "we_not_there")
    assert "state" in fails(env, "deliveries", "list", tenant.appid, "--state", "lost", code=2)
    assert "before" in fails(env, "deliveries", "list", tenant.appid, "--before", "garbage")
    delivered = orjson.loads(svcgw(env, "deliveries", "list", tenant.appid, "--state", "delivered", "--json").stdout)
    assert len(delivered["deliveries"]) == 2


def test_a_destination_being_probed_is_shown_beside_its_deliveries(env: dict[str, str], redis: Redis) -> None:
    env = dict(env, SVCGW_RETRY_SCHEDULE="3600,3600", SVCGW_DELIVERY_TIMEOUT="1", SVCGW_DESTINATION_CONCURRENCY="2")
    settings = Settings.from_env(env)
    hanging = Sink().start()
    hanging.set(delay=30)  # never answers within the timeout
    try:
        tenant = provision(settings, url=hanging.url)
        ids = [ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"p%d"}]}' % n) for n in range(6)]
        assert ok(env, "deliveries", "list", tenant.appid)["probing"] is None
        with Running(settings):
            wait_for(lambda: redis.hlen(keys.breakers) == 1, timeout=10, what="the destination probed")
            page = ok(env, "deliveries", "list", tenant.appid)
            destination = hanging.url.removesuffix("/hook")
            assert page["probing"]["destination"] == destination
            assert page["probing"]["attempts_in_flight"] == 1 and page["probing"]["answering"] is False
            human = svcgw(env, "deliveries", "list", tenant.appid)
            assert human.exit_code == 0 and f"destination {destination} is being probed" in human.stdout
            waiting = next(d for d in ids if redis.hget(keys.delivery(d), "attempts") is None)
            assert ok(env, "deliveries", "show", waiting)["probing"]["destination"] == destination
            assert "is being probed" in svcgw(env, "deliveries", "show", waiting).stdout
    finally:
        hanging.stop()


def test_a_further_destination_being_probed_is_shown_beside_its_deliveries(
    env: dict[str, str], redis: Redis, sink: Sink
) -> None:
    env = dict(env, SVCGW_RETRY_SCHEDULE="3600,3600", SVCGW_DELIVERY_TIMEOUT="1", SVCGW_DESTINATION_CONCURRENCY="2")
    settings = Settings.from_env(env)
    hanging = Sink().start()
    hanging.set(delay=30)  # never answers within the timeout; the primary address (sink) answers at once
    try:
        tenant = provision(settings, url=sink.url)
        stuck = add_destination(settings, Scope(account=tenant.account), hanging.url)
        posted = [
            ingest_fanned(settings, tenant, b'{"event_type":"Msg","events":[{"id":"q%d"}]}' % n, [stuck.id])
            for n in range(4)
        ]
        further = [ids[0] for _, ids in posted]
        with Running(settings):
            wait_for(lambda: redis.hlen(keys.breakers) == 1, timeout=10, what="the destination probed")
            wait_for(lambda: all(is_delivered(redis, primary) for primary, _ in posted), what="the primary's")
            destination = hanging.url.removesuffix("/hook")
            page = ok(env, "deliveries", "list", tenant.appid, "--destination", stuck.id)
            assert page["probing"] is not None and page["probing"]["destination"] == destination, page
            assert {d["id"] for d in page["deliveries"]} == set(further)
            human = svcgw(env, "deliveries", "list", tenant.appid, "--destination", stuck.id)
            assert human.exit_code == 0 and f"destination {destination} is being probed" in human.stdout
            # The primary address answers: its deliveries are not shown as probed.
            assert ok(env, "deliveries", "list", tenant.appid, "--destination", "primary")["probing"] is None
            # Pending or retrying (its retry an hour away), it waits for its destination.
            assert ok(env, "deliveries", "show", further[-1])["probing"]["destination"] == destination
            assert ok(env, "deliveries", "show", posted[0][0])["probing"] is None  # delivered
    finally:
        hanging.stop()


def test_deliveries_to_further_destinations_name_them(env: dict[str, str]) -> None:
    settings = Settings.from_env(env)
    tenant = provision(settings)
    primary = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"d1"}]}')
    to_a, to_b = fan_out(settings, primary, ["dst_aaaa0000aaaa0000", "dst_bbbb0000bbbb0000"])

    page = ok(env, "deliveries", "list", tenant.appid)
    assert [(d["id"], d["destination"]) for d in page["deliveries"]] == [
        (primary, None),
        (to_a, "dst_aaaa0000aaaa0000"),
        (to_b, "dst_bbbb0000bbbb0000"),
    ]
    only = ok(env, "deliveries", "list", tenant.appid, "--destination", "dst_bbbb0000bbbb0000")["deliveries"]
    assert [d["id"] for d in only] == [to_b]
    primaries = ok(env, "deliveries", "list", tenant.appid, "--destination", "primary")["deliveries"]
    assert [d["id"] for d in primaries] == [primary]
    assert "destination" in fails(env, "deliveries", "list", tenant.appid, "--destination", "somewhere")

    table = svcgw(env, "deliveries", "list", tenant.appid)
    assert table.exit_code == 0 and "destination" in table.stdout
    rows = {line.split()[1]: line for line in table.stdout.splitlines() if line.split()[1:2] in ([primary], [to_a])}
    assert "primary" in rows[primary] and "dst_aaaa0000aaaa0000" in rows[to_a]
    assert ok(env, "deliveries", "show", to_a)["destination"] == "dst_aaaa0000aaaa0000"
    detail = svcgw(env, "deliveries", "show", to_b)
    assert detail.exit_code == 0 and "dst_bbbb0000bbbb0000" in detail.stdout
    assert "primary" in svcgw(env, "deliveries", "show", primary).stdout
