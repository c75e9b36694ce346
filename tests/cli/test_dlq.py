"""``svcgw dlq``: dead letters made by the real pipeline, listed, shown and replayed."""

from __future__ import annotations

import time

import orjson
import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import Tenant, provision
from tests.support import Sink
from tests.svcgw.delivery.fanout import fan_out, kill_among
from tests.svcgw.delivery.test_deadletters import ingest, kill
from tests.worker.support import deliver_all
from worker.engine import Engine


@pytest.fixture
def fast_env(env: dict[str, str]) -> dict[str, str]:
    return dict(env, SVCGW_RETRY_SCHEDULE="0.05")


def deliver(settings: Settings) -> None:
    """Run the delivery engine in-process until nothing is queued or scheduled."""
    redis = Redis.from_url(settings.redis_url or "")
    try:
        engine = Engine(settings, redis, TokenVault.from_settings(settings))
        deliver_all(engine)
    finally:
        redis.close()


def test_dlq_list_show_replay(fast_env: dict[str, str], sink: Sink) -> None:
    settings = Settings.from_env(fast_env)
    tenant: Tenant = provision(settings, url=sink.url)
    other = provision(settings, url=sink.url)
    sink.set(status=500)
    body = b'{"event_type":"Msg","events":[{"id":1688850000000000001,"text":"hi"}]}'
    delivery_id = ingest(settings, tenant, body)
    other_id = ingest(settings, other, body)
    deliver(settings)
    assert len(sink.posts()) == 4  # two deliveries, one retry each

    listed = ok(fast_env, "dlq", "list", "--appid", tenant.appid)
    assert [d["id"] for d in listed] == [delivery_id]
    letter = listed[0]
    assert letter["attempts"] == 2 and letter["last_error"] == "HTTP 500"
    assert (letter["appid"], letter["account"], letter["event_type"]) == (tenant.appid, tenant.account, "Msg")
    assert {d["id"] for d in ok(fast_env, "dlq", "list")} == {delivery_id, other_id}
    assert [d["id"] for d in ok(fast_env, "dlq", "list", "--account", other.account)] == [other_id]

    for args in (("dlq", "list"), ("instances", "list")):
        table = svcgw(fast_env, *args)
        assert table.exit_code == 0 and tenant.appid in table.stdout, table.output

    detail = ok(fast_env, "dlq", "show", delivery_id)
    assert [a["status"] for a in detail["attempts"]] == [500, 500]
    assert '"id":1688850000000000001' in detail["body"]
    human = svcgw(fast_env, "dlq", "show", delivery_id)
    assert human.exit_code == 0 and "1688850000000000001" in human.stdout and "HTTP 500" in human.stdout

    # A replay is one fresh attempt; failing again returns it with its history.
    replayed = ok(fast_env, "dlq", "replay", delivery_id)
    assert replayed == [{"id": delivery_id, "appid": tenant.appid, "status": "replayed"}]
    assert ok(fast_env, "dlq", "list", "--appid", tenant.appid) == []
    deliver(settings)
    assert len(sink.posts()) == 5
    again = ok(fast_env, "dlq", "show", delivery_id)
    assert [a["attempt"] for a in again["attempts"]] == [1, 2, 3]

    sink.set(status=200)
    assert [r["status"] for r in ok(fast_env, "dlq", "replay", "--all")] == ["replayed", "replayed"]
    deliver(settings)
    assert ok(fast_env, "dlq", "list") == []
    assert sink.posts()[-1].headers["x-svc-attempt"] in ("3", "4")

    missing = svcgw(fast_env, "dlq", "replay", delivery_id, "--json")
    assert missing.exit_code == 1 and orjson.loads(missing.stdout)[0]["status"] == "not_found"
    assert "not replayed" in missing.stderr
    assert "no dead letter" in fails(fast_env, "dlq", "show", delivery_id)
    assert "exactly one" in fails(fast_env, "dlq", "replay", code=2)
    assert "exactly one" in fails(fast_env, "dlq", "replay", "--all", "--appid", tenant.appid, code=2)


def test_dlq_replay_by_appid(fast_env: dict[str, str], sink: Sink) -> None:
    settings = Settings.from_env(fast_env)
    tenant, other = provision(settings, url=sink.url), provision(settings, url=sink.url)
    sink.set(status=500)
    mine = [
        ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"' + n + b'"}]}') for n in (b"1", b"2")
    ]
    theirs = ingest(settings, other, b'{"event_type":"Msg","events":[{"id":"3"}]}')
    deliver(settings)

    replayed = ok(fast_env, "dlq", "replay", "--appid", tenant.appid)
    assert sorted(r["id"] for r in replayed) == sorted(mine)
    assert [d["id"] for d in ok(fast_env, "dlq", "list")] == [theirs]


def test_dlq_replay_since(env: dict[str, str], redis: Redis) -> None:
    settings = Settings.from_env(env)
    tenant = provision(settings)
    other = provision(settings)
    now = time.time()
    old = kill(settings, tenant, "o1", died_at=now)
    recent = kill(settings, tenant, "r1", died_at=now)
    elsewhere = kill(settings, other, "e1", died_at=now)
    redis.hset(keys.delivery(old), "dead_at", repr(now - 3 * 3600))

    assert ok(env, "dlq", "replay", "--since", "2h", "--appid", tenant.appid) == [
        {"id": recent, "appid": tenant.appid, "status": "replayed"}
    ]
    assert ok(env, "dlq", "replay", "--since", "1d", "--account", other.account) == [
        {"id": elsewhere, "appid": other.appid, "status": "replayed"}
    ]
    assert "died earlier" in fails(env, "dlq", "replay", old, "--since", "30m")
    human = svcgw(env, "dlq", "replay", "--since", "4h")
    assert human.exit_code == 0 and old in human.stdout and "1 of 1 queued" in human.stdout
    assert "--since" in fails(env, "dlq", "replay", code=2)
    assert "duration" in fails(env, "dlq", "replay", "--since", "soon", code=2)
    assert "--account" in fails(env, "dlq", "replay", "--appid", tenant.appid, "--account", other.account, code=2)


def test_dlq_list_all_lists_past_a_page(env: dict[str, str]) -> None:
    settings = Settings.from_env(env)
    tenant, other = provision(settings), provision(settings)
    now = time.time()
    mine = [kill(settings, tenant, f"m{n}", died_at=now) for n in range(3)]
    theirs = kill(settings, other, "t0", died_at=now)

    assert len(ok(env, "dlq", "list", "--limit", "2")) == 2
    assert {d["id"] for d in ok(env, "dlq", "list", "--all")} == {*mine, theirs}
    assert {d["id"] for d in ok(env, "dlq", "list", "--all", "--appid", tenant.appid)} == set(mine)
    assert [d["id"] for d in ok(env, "dlq", "list", "--all", "--account", other.account)] == [theirs]
    table = svcgw(env, "dlq", "list", "--all")
    assert table.exit_code == 0 and all(letter in table.stdout for letter in (*mine, theirs))
    assert "--all lists every dead letter" in fails(env, "dlq", "list", "--all", "--limit", "2", code=2)
    assert "--all lists every dead letter" in fails(env, "dlq", "list", "--all", "--offset", "1", code=2)
    assert ok(env, "dlq", "list", "--all", "--appid", provision(settings).appid) == []


def test_dlq_names_the_destination_of_each_dead_letter(env: dict[str, str]) -> None:
    settings = Settings.from_env(env)
    tenant = provision(settings)
    plain = kill(settings, tenant, "p1", died_at=time.time() - 5)
    primary = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"f1"}]}')
    (to_a,) = fan_out(settings, primary, ["dst_aaaa0000aaaa0000"])
    kill_among(settings, to_a, tenant.appid, 2)

    listed = ok(env, "dlq", "list", "--appid", tenant.appid)
    assert [(d["id"], d["destination"]) for d in listed] == [(to_a, "dst_aaaa0000aaaa0000"), (plain, None)]
    assert [d["id"] for d in ok(env, "dlq", "list", "--destination", "dst_aaaa0000aaaa0000")] == [to_a]
    assert [d["id"] for d in ok(env, "dlq", "list", "--account", tenant.account, "--destination", "primary")] == [plain]
    assert [d["id"] for d in ok(env, "dlq", "list", "--all", "--destination", "dst_aaaa0000aaaa0000")] == [to_a]
    table = svcgw(env, "dlq", "list")
    assert table.exit_code == 0 and "destination" in table.stdout
    lines = {line.split()[1]: line for line in table.stdout.splitlines() if len(line.split()) > 2}
    assert "dst_aaaa0000aaaa0000" in lines[to_a] and "primary" in lines[plain]
    assert ok(env, "dlq", "show", to_a)["destination"] == "dst_aaaa0000aaaa0000"
    assert "dst_aaaa0000aaaa0000" in svcgw(env, "dlq", "show", to_a).stdout
