"""``svcgw destinations``: further destinations of an account or instance, managed from the command line."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner
from redis import Redis

from cli.main import cli
from svcgw.callbacks.destinationrules import MAX_DESTINATIONS
from svcgw.callbacks.signing import verify
from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import provision
from tests.support import Sink

TOKEN = "bearer-token-that-must-never-be-printed"


def test_add_list_show_update_disable_rotate_remove(
    env: dict[str, str], settings: Settings, redis: Redis, sink: Sink
) -> None:
    tenant = provision(settings, url=sink.url)  # the primary address, untouched throughout
    primary = dict(redis.hgetall(keys.callback_instance(tenant.appid)))

    added = svcgw(
        env, "destinations", "add", "--account", tenant.account, "--url", sink.url + "/crm", "--label", "CRM",
        "--event-types", "Msg", "--rate", "20", "--bearer-token", TOKEN, "--json",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert TOKEN not in added.output
    saved = orjson.loads(added.stdout)
    dest, test = saved["destination"], saved["test"]
    assert (dest["scope"], dest["account"], dest["label"], dest["event_types"], dest["rate"]) == (
        "account", tenant.account, "CRM", ["Msg"], 20.0,
    )  # fmt: skip
    assert dest["bearer"] is True and dest["enabled"] is True and dest["secret"].startswith("whsec_")
    # The test POST, signed with the destination's own secret, with its token.
    assert test["ok"] is True and test["status"] == 200
    (post,) = sink.posts()
    assert post.path == "/hook/crm" and post.headers["authorization"] == f"Bearer {TOKEN}"
    assert verify(dest["secret"], post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])
    assert orjson.loads(post.body)["event_type"] == "SvcCallbackTest" and "appid" not in orjson.loads(post.body)

    own = ok(env, "destinations", "add", "--appid", tenant.appid, "--url", sink.url + "/own", "--no-test")
    assert own["test"] is None and own["destination"]["appid"] == tenant.appid and len(sink.posts()) == 1

    # --account lists the account's own; --appid every one the instance's events go to.
    listed = ok(env, "destinations", "list", "--account", tenant.account)
    assert [d["id"] for d in listed] == [dest["id"]] and "secret" not in listed[0]
    applying = ok(env, "destinations", "list", "--appid", tenant.appid)
    assert [(d["id"], d["scope"]) for d in applying] == [
        (dest["id"], "account"),
        (own["destination"]["id"], "instance"),
    ]
    table = svcgw(env, "destinations", "list", "--appid", tenant.appid)
    assert table.exit_code == 0 and dest["id"] in table.stdout and "every type" in table.stdout
    assert TOKEN not in table.output and dest["secret"] not in table.output

    shown = svcgw(env, "destinations", "show", dest["id"])
    assert shown.exit_code == 0 and dest["secret"] in shown.stdout and TOKEN not in shown.output
    assert ok(env, "destinations", "show", dest["id"])["secret"] == dest["secret"]

    # A filter or rate change sends no test; a new origin drops the token and sends one.
    changed = ok(env, "destinations", "update", dest["id"], "--all-events", "--no-rate", "--label", "archive")
    assert (
        changed["test"] is None
        and changed["destination"]["event_types"] == []
        and changed["destination"]["rate"] is None
    )
    moved = ok(env, "destinations", "update", dest["id"], "--url", "http://localhost:" + sink.url.split(":")[2])
    assert moved["destination"]["bearer"] is False and moved["test"]["ok"] is True
    assert "authorization" not in sink.posts()[-1].headers
    assert not redis.hexists(keys.destination(dest["id"]), "token")

    disabled = ok(env, "destinations", "disable", dest["id"])
    assert disabled["destination"]["enabled"] is False and not redis.exists(keys.routes_account(tenant.account))
    enabled = ok(env, "destinations", "update", dest["id"], "--enable")
    assert enabled["destination"]["enabled"] is True and enabled["test"]["ok"] is True
    assert redis.hgetall(keys.routes_account(tenant.account)) == {b"*": dest["id"].encode()}

    rotated = ok(env, "destinations", "rotate", dest["id"])["destination"]
    assert rotated["secret"] != dest["secret"]
    tested = ok(env, "destinations", "test", dest["id"])
    last = sink.posts()[-1]
    assert tested["ok"] is True
    assert verify(rotated["secret"], last.headers["x-svc-timestamp"], last.body, last.headers["x-svc-signature"])

    removed = ok(env, "destinations", "remove", dest["id"])
    assert removed["id"] == dest["id"] and "secret" not in removed
    assert not redis.exists(keys.destination(dest["id"]))
    assert "no destination" in fails(env, "destinations", "show", dest["id"])
    assert dict(redis.hgetall(keys.callback_instance(tenant.appid))) == primary


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--url", "ftp://example.com/hook"), "code -40011"),
        (("--url", "http://127.0.0.1:8080/anything"), "code -40012"),
        (("--url", "http://10.1.2.3/hook"), "code -40013"),
        (("--url", "http://127.0.0.1:9/", "--event-types", "msg"), "code -40020"),
        (("--url", "http://127.0.0.1:9/", "--event-types", "SvcCallbackTest"), "code -40020"),
        (("--url", "http://127.0.0.1:9/", "--rate", "0"), "code -40021"),
        (("--url", "http://127.0.0.1:9/", "--rate", "fast"), "code -40021"),
        (("--url", "http://127.0.0.1:9/", "--label", "x" * 101), "code -40000"),
    ],
)
def test_refused_values_answer_their_code_and_nothing_is_saved(
    env: dict[str, str], settings: Settings, redis: Redis, args: tuple[str, ...], said: str
) -> None:
    tenant = provision(settings)
    assert said in fails(env, "destinations", "add", "--appid", tenant.appid, *args)
    assert not redis.exists(keys.destinations_instance(tenant.appid))


def test_the_help_of_list_says_what_appid_lists(env: dict[str, str]) -> None:
    shown = " ".join(svcgw(env, "destinations", "list", "--help").stdout.split())
    assert "its account's and its own" in shown and "One instance's own destinations" not in shown
    added = " ".join(svcgw(env, "destinations", "add", "--help").stdout.split())
    assert "One instance's own destinations" in added


def test_usage_errors_and_the_bound(env: dict[str, str], settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    assert "exactly one" in fails(env, "destinations", "list", code=2)
    assert "exactly one" in fails(
        env, "destinations", "add", "--account", tenant.account, "--appid", tenant.appid, "--url", "http://127.0.0.1:9/",
        code=2,
    )  # fmt: skip
    assert "no instance 'we_nope'" in fails(env, "destinations", "list", "--appid", "we_nope")
    assert "no destination 'dst_0000000000000000'" in fails(env, "destinations", "disable", "dst_0000000000000000")
    # An unknown destination reads as the console answers it: the message and -40404, for each command.
    for command in ("show", "update", "disable", "rotate", "test", "remove"):
        said = fails(env, "destinations", command, "dst_0000000000000000")
        assert said.strip() == "Error: no destination 'dst_0000000000000000' (code -40404)", (command, said)
    for _ in range(MAX_DESTINATIONS):
        ok(env, "destinations", "add", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/", "--no-test")
    assert "code -40920" in fails(
        env, "destinations", "add", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/", "--no-test"
    )
    one = ok(env, "destinations", "list", "--appid", tenant.appid)[0]["id"]
    for clash in (
        ("--rate", "1", "--no-rate"),
        ("--event-types", "Msg", "--all-events"),
        ("--bearer-token", "t", "--no-bearer"),
    ):
        assert "exclude" in fails(env, "destinations", "update", one, *clash, code=2)


def test_a_token_from_stdin_is_sealed_and_never_printed(env: dict[str, str], settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    piped = CliRunner().invoke(
        cli,
        ["destinations", "add", "--account", tenant.account, "--url", "http://127.0.0.1:9/", "--no-test",
         "--bearer-token", "-", "--json"],
        env=env,
        input="from-stdin-token\n",
    )  # fmt: skip
    assert piped.exit_code == 0, piped.output
    assert "from-stdin-token" not in piped.stdout
    dest = orjson.loads(piped.stdout)["destination"]
    sealed = redis.hget(keys.destination(dest["id"]), "token")
    assert sealed is not None and b"from-stdin-token" not in sealed
    assert TokenVault.from_settings(settings).open(sealed) == "from-stdin-token"


def test_a_failed_test_keeps_the_destination(env: dict[str, str], settings: Settings) -> None:
    tenant = provision(settings)
    result = svcgw(env, "destinations", "add", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/nothing-listens")
    assert result.exit_code == 0, result.output
    assert "test POST failed" in result.stdout and "saved all the same" in result.stdout
    assert len(ok(env, "destinations", "list", "--appid", tenant.appid)) == 1


@pytest.mark.parametrize("token", ["tok\r\nX-Injected: 1", "tok\x00en"])
def test_a_token_with_control_characters_is_refused_and_nothing_is_saved(
    env: dict[str, str], settings: Settings, redis: Redis, sink: Sink, token: str
) -> None:
    tenant = provision(settings, url=sink.url)
    primary = dict(redis.hgetall(keys.callback_instance(tenant.appid)))
    kept = ok(env, "destinations", "add", "--appid", tenant.appid, "--url", sink.url + "/kept", "--no-test")
    for args in (
        ("callback", "set", "--appid", tenant.appid, "--url", sink.url, "--bearer-token", token),
        ("destinations", "add", "--account", tenant.account, "--url", sink.url + "/new", "--bearer-token", token),
        ("destinations", "update", kept["destination"]["id"], "--bearer-token", token),
    ):
        said = fails(env, *args)
        assert "(code -40022)" in said and "control characters" in said and token not in said, args
    assert dict(redis.hgetall(keys.callback_instance(tenant.appid))) == primary
    assert not redis.exists(keys.destinations_account(tenant.account))
    assert not redis.hexists(keys.destination(kept["destination"]["id"]), "token")
    assert sink.posts() == []
