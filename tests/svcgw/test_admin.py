"""The administration commands against the real test Redis, with --json shapes and user errors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result
from redis import Redis

from cli.main import cli
from svcgw import keys
from svcgw.settings import Settings
from svcgw.vault import TokenVault
from tests.conftest import Tenant, provision
from tests.support import Sink
from tests.worker.test_deadletters import ingest
from worker.engine import Engine


@pytest.fixture(autouse=True)
def keep_logging() -> Iterator[None]:
    # The group configures logging on the runner's captured stderr; put it back.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def svcgw(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def ok(env: dict[str, str], *args: str) -> Any:
    result = svcgw(env, *args, "--json")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return orjson.loads(result.stdout)


def fails(env: dict[str, str], *args: str, code: int = 1) -> str:
    result = svcgw(env, *args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.stderr


# --- accounts and keys -----------------------------------------------------------
def test_accounts_create_list_deny_allow(env: dict[str, str]) -> None:
    created = ok(env, "accounts", "create", "--name", "Acme", "--devices", "5", "--valid-until", "2031-12-31")
    assert created["id"].startswith("acc_")
    assert (created["name"], created["devices"], created["valid_until"]) == ("Acme", 5, "2031-12-31")

    listed = ok(env, "accounts", "list")
    assert [a["id"] for a in listed] == [created["id"]]
    assert listed[0]["instances"] == 0 and listed[0]["denied"] == []

    denied = ok(
        env, "accounts", "deny", "--account", created["id"], "message/sendText", "/svc/api/login/logout"
    )
    assert denied == {"account": created["id"], "denied": ["login/logout", "message/sendText"]}
    allowed = ok(env, "accounts", "allow", "--account", created["id"], "login/logout")
    assert allowed["denied"] == ["message/sendText"]

    table = svcgw(env, "accounts", "list")
    assert table.exit_code == 0 and created["id"] in table.stdout and "Acme" in table.stdout


def test_account_user_errors(env: dict[str, str]) -> None:
    assert "2031-02-30" in fails(
        env, "accounts", "create", "--name", "x", "--valid-until", "2031-02-30", code=2
    )
    assert "no account 'acc_nope'" in fails(
        env, "accounts", "deny", "--account", "acc_nope", "message/sendText"
    )
    account = ok(env, "accounts", "create", "--name", "x")["id"]
    assert "module/action" in fails(env, "accounts", "deny", "--account", account, "sendText")


def test_keys_create_list_revoke(env: dict[str, str]) -> None:
    account = ok(env, "accounts", "create", "--name", "Acme")["id"]
    created = ok(env, "keys", "create", "--account", account)
    assert created["id"].startswith("key_") and created["key"].startswith("sk_")

    listed = ok(env, "keys", "list", "--account", account)
    assert [k["id"] for k in listed] == [created["id"]]
    assert listed[0]["revoked"] is False and created["key"] not in orjson.dumps(listed).decode()

    revoked = ok(env, "keys", "revoke", created["id"])
    assert revoked["revoked"] is True and revoked["revoked_at"] is not None
    assert ok(env, "keys", "list", "--account", account)[0]["revoked"] is True

    assert "no key 'key_nope'" in fails(env, "keys", "revoke", "key_nope")
    assert "no account" in fails(env, "keys", "create", "--account", "acc_nope")
    human = svcgw(env, "keys", "create", "--account", account)
    assert human.exit_code == 0 and "sk_" in human.stdout and "only this once" in human.stdout


# --- callback configuration --------------------------------------------------------
def test_callback_set_show_rotate_clear(env: dict[str, str], settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    token = "bearer-token-that-must-never-be-printed"

    shown = ok(env, "callback", "show", "--appid", tenant.appid)
    assert shown == {"account": None, "appid": tenant.appid, "url": None, "secret": None, "bearer": False}

    result = svcgw(
        env, "callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/hook",
        "--bearer-token", token, "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert token not in result.output
    first = orjson.loads(result.stdout)
    assert first["url"] == "http://127.0.0.1:9/hook" and first["bearer"] is True
    assert first["secret"].startswith("whsec_")
    sealed = redis.hget(keys.callback_instance(tenant.appid), "token")
    assert sealed is not None and token.encode() not in sealed
    assert TokenVault.from_settings(settings).open(sealed) == token

    # Without --bearer-token the token is kept; the secret stays with the address.
    again = ok(env, "callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:10/hook")
    assert again["bearer"] is True and again["secret"] == first["secret"]
    for human in (
        svcgw(env, "callback", "show", "--appid", tenant.appid),
        svcgw(env, "instances", "show", tenant.appid),
        svcgw(env, "instances", "show", tenant.appid, "--json"),
    ):
        assert human.exit_code == 0 and token not in human.output

    rotated = ok(env, "callback", "rotate-secret", "--appid", tenant.appid)
    assert rotated["secret"] != first["secret"] and rotated["bearer"] is True

    no_bearer = ok(
        env, "callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:10/x", "--no-bearer"
    )
    assert no_bearer["bearer"] is False

    cleared = ok(env, "callback", "clear", "--appid", tenant.appid)
    assert cleared["url"] is None and cleared["bearer"] is False and cleared["secret"] == rotated["secret"]


def test_instance_falls_back_to_the_account_default(env: dict[str, str], settings: Settings) -> None:
    tenant = provision(settings)
    default = ok(env, "callback", "set", "--account", tenant.account, "--url", "http://127.0.0.1:11/default")
    assert default["account"] == tenant.account and default["appid"] is None

    instance = ok(env, "instances", "show", tenant.appid)
    assert instance["forward_url"] == "http://127.0.0.1:11/default"
    assert instance["forward_source"] == "account"
    ok(env, "callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:12/own")
    assert ok(env, "instances", "show", tenant.appid)["forward_source"] == "instance"
    ok(env, "callback", "clear", "--appid", tenant.appid)
    assert ok(env, "instances", "show", tenant.appid)["forward_source"] == "account"
    ok(env, "callback", "clear", "--account", tenant.account)
    assert ok(env, "instances", "show", tenant.appid)["forward_source"] == "none"


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("ftp://example.com/hook", -40011),
        ("http://user:pw@example.com/hook", -40011),
        ("http://127.0.0.1:8080/anything", -40012),
        ("http://10.1.2.3/hook", -40013),
    ],
)
def test_bad_callback_url_is_refused_with_its_code(
    env: dict[str, str], settings: Settings, url: str, code: int
) -> None:
    tenant = provision(settings)
    error = fails(env, "callback", "set", "--appid", tenant.appid, "--url", url)
    assert f"code {code}" in error and "callbackUrl" in error
    assert ok(env, "callback", "show", "--appid", tenant.appid)["url"] is None


def test_callback_scope_must_be_one_of_account_or_appid(env: dict[str, str], settings: Settings) -> None:
    tenant = provision(settings)
    assert "exactly one" in fails(env, "callback", "show", code=2)
    assert "exactly one" in fails(
        env, "callback", "show", "--account", tenant.account, "--appid", tenant.appid, code=2
    )
    assert "no instance 'we_nope'" in fails(env, "callback", "show", "--appid", "we_nope")
    assert "exclude" in fails(
        env, "callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/",
        "--bearer-token", "t", "--no-bearer", code=2,
    )  # fmt: skip


# --- environment errors ------------------------------------------------------------
def test_unreachable_redis_names_the_url_without_its_password(env: dict[str, str]) -> None:
    broken = dict(env, SVCGW_REDIS_URL="redis://admin:hunter2@127.0.0.1:1/0")
    result = svcgw(broken, "accounts", "list")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "cannot reach Redis at redis://admin@127.0.0.1:1/0" in result.stderr
    assert "hunter2" not in result.output


def test_redis_url_is_required(env: dict[str, str]) -> None:
    message = fails(dict(env, SVCGW_REDIS_URL=""), "dlq", "list")
    assert "SVCGW_REDIS_URL (or SVCGW_REDIS_SENTINELS) is required" in message


# --- instances -----------------------------------------------------------------------
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

    assert "no instance 'we_nope'" in fails(env, "instances", "show", "we_nope")
    assert "no account" in fails(env, "instances", "list", "--account", "acc_nope")


# --- dead letters through the real pipeline -----------------------------------------
@pytest.fixture
def fast_env(env: dict[str, str]) -> dict[str, str]:
    return dict(env, SVCGW_RETRY_SCHEDULE="0.05")


def deliver(settings: Settings) -> None:
    """Run the delivery engine in-process until nothing is queued or scheduled."""
    redis = Redis.from_url(settings.redis_url or "")
    try:
        engine = Engine(settings, redis, TokenVault.from_settings(settings))
        engine.run(threading.Event(), burst=True)
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


# --- the callback log ------------------------------------------------------------------
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


def test_secrets_reencrypt(env: dict[str, str], settings: Settings) -> None:
    provision(settings, url="http://127.0.0.1:9/hook", bearer="t0ken")
    # One Bearer token and one receiver token.
    assert ok(env, "secrets", "reencrypt") == {"resealed": 2}


# --- the demo data that `svcgw up --demo` creates ----------------------------------------
def test_demo_data_is_created_once_and_usable(env: dict[str, str], settings: Settings) -> None:
    from cli.demo import ensure_demo, render_demo

    first = ensure_demo(settings)
    again = ensure_demo(settings)
    assert (again.account, again.key_id, again.key, again.appid) == (
        first.account,
        first.key_id,
        first.key,
        first.appid,
    )
    assert len(first.appid) == 18 and first.appid.startswith("we_")
    assert ok(env, "instances", "show", first.appid)["account"] == first.account

    ok(env, "keys", "revoke", first.key_id)
    renewed = ensure_demo(settings)
    assert renewed.key != first.key and renewed.appid == first.appid

    text = render_demo(renewed, settings)
    receiver = f"{settings.public_url}/svc/receiver/{renewed.appid}/{renewed.receiver_token}"
    assert receiver in text and renewed.key in text
    assert f"svcgw callback set --appid {renewed.appid} --url" in text and "curl" in text
