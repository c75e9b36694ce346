"""``svcgw callback``: address, secret and Bearer token of an account or instance."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner
from redis import Redis

from cli.main import cli
from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import provision


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

    # Without --bearer-token the token is kept (same origin); the secret stays with the address.
    again = ok(env, "callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/other")
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


def test_a_new_origin_drops_the_token_unless_the_command_sets_one(env: dict[str, str], settings: Settings) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/hook", bearer="bearer-token-for-port-9")
    for scope in (("--appid", tenant.appid), ("--account", tenant.account)):
        ok(env, "callback", "set", *scope, "--url", "http://127.0.0.1:9/hook", "--bearer-token", "tok-9-" + "x" * 16)
        moved = ok(env, "callback", "set", *scope, "--url", "http://127.0.0.1:10/hook")
        assert moved["bearer"] is False
        ok(env, "callback", "set", *scope, "--url", "http://127.0.0.1:9/hook", "--bearer-token", "tok-9-" + "x" * 16)
        replaced = ok(
            env, "callback", "set", *scope, "--url", "http://localhost:9/x", "--bearer-token", "tok-new-" + "y" * 16
        )
        assert replaced["bearer"] is True


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


def test_bearer_token_from_stdin_or_a_hidden_prompt(env: dict[str, str], settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    vault = TokenVault.from_settings(settings)
    base = ["callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/hook", "--json"]

    def stored() -> str:
        sealed = redis.hget(keys.callback_instance(tenant.appid), "token")
        assert sealed is not None
        return vault.open(sealed)

    piped = CliRunner().invoke(cli, [*base, "--bearer-token", "-"], env=env, input="from-stdin-token\n")
    assert piped.exit_code == 0, piped.output
    assert stored() == "from-stdin-token" and "from-stdin-token" not in piped.stdout

    typed = CliRunner().invoke(cli, [*base, "--bearer-token-prompt"], env=env, input="typed-token\n")
    assert typed.exit_code == 0, typed.output
    assert stored() == "typed-token" and "typed-token" not in typed.output
    assert orjson.loads(typed.stdout)["bearer"] is True

    # On the command line it still works.
    assert ok(env, *base[:-1], "--bearer-token", "argv-token")["bearer"] is True
    assert stored() == "argv-token"

    empty = CliRunner().invoke(cli, [*base, "--bearer-token", "-"], env=env, input="\n")
    assert empty.exit_code == 2 and "empty" in empty.output
    both = CliRunner().invoke(cli, [*base, "--bearer-token", "x", "--bearer-token-prompt"], env=env)
    assert both.exit_code == 2 and "exclude" in both.output
    assert stored() == "argv-token"


def test_the_signing_secret_is_sealed_and_shown_in_clear(
    env: dict[str, str], settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    shown = ok(env, "callback", "set", "--appid", tenant.appid, "--url", "http://127.0.0.1:9/hook")["secret"]
    sealed = redis.hget(keys.callback_instance(tenant.appid), "secret")
    assert sealed is not None and shown.encode() not in sealed
    assert TokenVault.from_settings(settings).open(sealed) == shown
    assert ok(env, "callback", "show", "--appid", tenant.appid)["secret"] == shown
