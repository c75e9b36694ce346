"""``svcgw instances``: list and show, with status fields, forward address and dead-letter count."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import orjson
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import provision

# Text that is a number: an id or a shard's name may be one and stays text; nothing else may.
_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")
_NAMES = frozenset(("shard",))


def no_numbers_as_text(document: object, where: str = "") -> list[str]:
    """Where in a ``--json`` document a number is given as a string (empty when none is)."""
    if isinstance(document, dict):
        return [
            found
            for name, value in document.items()
            if name not in _NAMES
            for found in no_numbers_as_text(value, f"{where}.{name}")
        ]
    if isinstance(document, list):
        return [found for i, value in enumerate(document) for found in no_numbers_as_text(value, f"{where}[{i}]")]
    return [where] if isinstance(document, str) and _NUMBER.fullmatch(document) else []


def test_instances_list_and_show(env: dict[str, str], settings: Settings, redis: Redis) -> None:
    first, second = provision(settings), provision(settings)
    redis.hset(keys.instance(first.appid), mapping={"status": "offline", "reason": "relogin", "since": "1700"})

    everything = ok(env, "instances", "list")
    assert sorted(i["appid"] for i in everything) == sorted([first.appid, second.appid])
    mine = ok(env, "instances", "list", "--account", first.account)
    assert [i["appid"] for i in mine] == [first.appid]
    shown = mine[0]
    assert (shown["status"], shown["reason"], shown["since"]) == ("offline", "relogin", 1700.0)
    assert shown["account"] == first.account and shown["dead_letters"] == 0
    assert "receiver_token" not in shown and first.receiver_token not in orjson.dumps(everything).decode()

    # The table shows when as readable UTC; --json keeps the number.
    table = svcgw(env, "instances", "list", "--account", first.account)
    assert table.exit_code == 0 and "1970-01-01 00:28:20Z" in table.stdout and "1700" not in table.stdout
    assert "1970-01-01 00:28:20Z" in svcgw(env, "instances", "show", first.appid).stdout

    assert "no instance 'we_nope'" in fails(env, "instances", "show", "we_nope")
    assert "no account" in fails(env, "instances", "list", "--account", "acc_nope")


def test_instances_show_prints_every_time_readably_and_list_names_the_shard(
    env: dict[str, str], settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    stored = {
        "status": "offline", "since": "1795753069.5", "offline_since": "1795753069.5", "gap_at": "1795753000",
        "last_probe": "1.7957530699908056e+9", "last_seen": "1795752000.25", "next_probe": "1795753129.125",
    }  # fmt: skip
    redis.hset(keys.instance(tenant.appid), mapping=stored)

    shown = svcgw(env, "instances", "show", tenant.appid)
    assert shown.exit_code == 0, shown.output
    for name, value in stored.items():
        if name != "status":
            readable = datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            assert re.search(rf"{name}\s+.*{re.escape(readable)}", shown.stdout), (name, shown.stdout)
    assert "e+9" not in shown.stdout and "1795753" not in shown.stdout
    # --json: every time a JSON number of Unix seconds, whatever its stored spelling.
    data = ok(env, "instances", "show", tenant.appid)
    for name, value in stored.items():
        if name != "status":
            assert data[name] == float(value) and isinstance(data[name], float), name
    assert no_numbers_as_text(data) == [] and no_numbers_as_text(ok(env, "instances", "list")) == []
    for other in (("accounts", "list"), ("keys", "list", "--account", tenant.account), ("dlq", "list", "--all")):
        assert no_numbers_as_text(ok(env, *other)) == [], other

    (row,) = ok(env, "instances", "list", "--account", tenant.account)
    assert row["shard"] == "0"  # one Redis: every instance is shard 0's
    listed = svcgw(env, "instances", "list", "--account", tenant.account)
    header = next(line for line in listed.stdout.splitlines() if "appid" in line)
    assert re.search(r"account\s*\W\s*shard\s*\W\s*status", header), listed.stdout
