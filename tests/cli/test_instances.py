"""``svcgw instances``: list and show, with status fields, forward address and dead-letter count."""

from __future__ import annotations

import orjson
from redis import Redis

from svcgw.keys import PLAIN as keys
from svcgw.settings import Settings
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import provision


def test_instances_list_and_show(env: dict[str, str], settings: Settings, redis: Redis) -> None:
    first, second = provision(settings), provision(settings)
    redis.hset(
        keys.instance(first.appid), mapping={"status": "offline", "reason": "relogin", "since": "1700"}
    )

    everything = ok(env, "instances", "list")
    assert sorted(i["appid"] for i in everything) == sorted([first.appid, second.appid])
    mine = ok(env, "instances", "list", "--account", first.account)
    assert [i["appid"] for i in mine] == [first.appid]
    shown = mine[0]
    assert (shown["status"], shown["reason"], shown["since"]) == ("offline", "relogin", "1700")
    assert shown["account"] == first.account and shown["dead_letters"] == 0
    assert "receiver_token" not in shown and first.receiver_token not in orjson.dumps(everything).decode()

    # The table shows when as readable UTC; --json keeps the number.
    table = svcgw(env, "instances", "list", "--account", first.account)
    assert table.exit_code == 0 and "1970-01-01 00:28:20Z" in table.stdout and "1700" not in table.stdout
    assert "1970-01-01 00:28:20Z" in svcgw(env, "instances", "show", first.appid).stdout

    assert "no instance 'we_nope'" in fails(env, "instances", "show", "we_nope")
    assert "no account" in fails(env, "instances", "list", "--account", "acc_nope")
