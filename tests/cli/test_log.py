"""``svcgw log``: an instance's callback log with the bodies exactly as received."""

from __future__ import annotations

import time

import orjson
from click.testing import CliRunner
from redis import Redis

from cli.main import cli
from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import provision
from tests.svcgw.delivery.test_deadletters import ingest
from tests.svcgw.intake.test_calllog import DAY, post_every, small_post


def test_log_prints_raw_bodies(env: dict[str, str], settings: Settings) -> None:
    tenant = provision(settings)
    body = b'{ "event_type": "Msg", "events": [ {"id": 1688850000000000001, "v": 1e2} ] }'
    delivery_id = ingest(settings, tenant, body)
    ingest_again = svcgw(env, "log", tenant.appid, "--since", "1h", "--json")
    assert ingest_again.exit_code == 0, ingest_again.output
    (entry,) = orjson.loads(ingest_again.stdout)
    assert entry["body"] == body.decode() and entry["delivery_id"] == delivery_id
    assert entry["state"] == "queued" and (entry["accepted"], entry["duplicates"]) == (1, 0)

    human = CliRunner().invoke(cli, ["log", tenant.appid, "--since", "30m"], env=env)
    assert human.exit_code == 0 and body in human.stdout_bytes

    assert "45s, 30m, 1h or 2d" in fails(env, "log", tenant.appid, "--since", "yesterday", code=2)
    assert "no instance 'we_nope'" in fails(env, "log", "we_nope")


def test_log_without_since_prints_only_the_retention(env: dict[str, str], settings: Settings, redis: Redis) -> None:
    """Redis trims the log a stream node at a time; posts it still holds past the retention are not printed."""
    tenant = provision(settings)
    now = time.time()
    post_every(settings.redis_url or "", settings, tenant, 600, 181, small_post, ends_at=now - 300)  # 30 h
    held = redis.xlen(keys.callback_log(tenant.appid))
    assert held > DAY // 600  # older posts are still stored ...

    printed = ok(env, "log", tenant.appid, "--limit", "1000")
    assert len(printed) == DAY // 600  # ... and not printed
    assert all(entry["received_at"] >= now - DAY for entry in printed)
    table = svcgw(env, "log", tenant.appid, "--limit", "1000")
    assert table.exit_code == 0 and table.stdout.count("--- ") == DAY // 600
