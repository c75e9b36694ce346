"""``svcgw accounts`` for console sign-in: logins, passwords kept off the command line, invitations."""

from __future__ import annotations

import time

import orjson
from click.testing import CliRunner, Result

from cli.main import cli
from svcgw.config.settings import Settings
from svcgw.digests import digest
from svcgw.registry.credentials import Credentials, Login
from svcgw.registry.invitations import Invitations
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import fails, ok
from tests.conftest import with_store

PASSWORD = "operator chosen password"


def run(env: dict[str, str], *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, input=stdin)


def lookup(settings: Settings, login: str) -> Login | None:
    async def action(store: Store) -> Login | None:
        return await Credentials(store.redis, keys).lookup(login)

    return with_store(settings, action)


def test_create_with_a_login_and_a_password_from_stdin(env: dict[str, str], settings: Settings) -> None:
    result = run(env, "accounts", "create", "--name", "Acme", "--login", "Dev@Example.com", "--password", "-", "--json",
                 stdin=PASSWORD + "\n")  # fmt: skip
    assert result.exit_code == 0, result.output
    created = orjson.loads(result.stdout)
    assert created["login"] == "Dev@Example.com" and created["password"] is True
    assert PASSWORD not in result.output
    found = lookup(settings, "dev@example.com")
    assert found is not None and found[0] == created["id"] and found[1].startswith("$argon2id$")

    # Logins are unique without regard to case; the refused account is not created.
    assert "another account" in fails(env, "accounts", "create", "--name", "Copy", "--login", "DEV@example.COM")
    assert [a["id"] for a in ok(env, "accounts", "list")] == [created["id"]]
    listed = ok(env, "accounts", "list")[0]
    assert listed["login"] == "Dev@Example.com" and "password" not in listed
    table = run(env, "accounts", "list").stdout
    assert "Dev@Example.com" in table and "$argon2" not in table


def test_a_password_never_comes_from_the_command_line(env: dict[str, str]) -> None:
    literal = run(env, "accounts", "create", "--name", "x", "--login", "dev", "--password", PASSWORD)
    assert literal.exit_code == 2 and "shows in ps" in literal.output
    short = run(env, "accounts", "create", "--name", "x", "--login", "devx", "--password", "-", stdin="short\n")
    assert short.exit_code == 2 and "at least 10" in short.output
    no_login = run(env, "accounts", "create", "--name", "x", "--password", "-", stdin=PASSWORD + "\n")
    assert no_login.exit_code == 2 and "--login" in no_login.output
    assert "is not an e-mail address" in fails(env, "accounts", "create", "--name", "x", "--login", "a@b")
    assert ok(env, "accounts", "list") == []


def test_set_password_from_a_hidden_prompt_ends_the_sessions(env: dict[str, str], settings: Settings) -> None:
    account = ok(env, "accounts", "create", "--name", "x", "--login", "dev-two")["id"]
    prompted = run(env, "accounts", "set-password", "--account", account, "--password-prompt", "--json",
                   stdin=f"{PASSWORD}\n{PASSWORD}\n")  # fmt: skip
    assert prompted.exit_code == 0, prompted.output
    assert orjson.loads(prompted.stdout) == {
        "account": account, "login": "dev-two", "password": True, "sessions_ended": True,
    }  # fmt: skip
    found = lookup(settings, "DEV-TWO")
    assert found is not None and found[1].startswith("$argon2id$")

    async def epoch(store: Store) -> str | None:
        return await store.redis.hget(keys.account(account), "session_epoch")  # type: ignore[no-any-return]

    assert with_store(settings, epoch) == "1"
    bare = ok(env, "accounts", "create", "--name", "no login")["id"]
    assert "no login" in fails(env, "accounts", "set-password", "--account", bare, "--password", "-")


def test_invite_prints_a_link_that_expires(env: dict[str, str], settings: Settings) -> None:
    account = ok(env, "accounts", "create", "--name", "x", "--login", "invitee@example.com")["id"]
    invited = ok(env, "accounts", "invite", "--account", account, "--expires", "2h")
    public = settings.public_url.rstrip("/")
    assert invited["url"].startswith(public + "/console/invitation/inv_")
    assert abs(invited["expires_at"] - (time.time() + 7200)) < 60
    token = invited["url"].rsplit("/", 1)[1]

    async def check(store: Store) -> tuple[str | None, int]:
        ttl = await store.redis.ttl(keys.invitation(digest(token)))
        return await Invitations(store.redis, keys).account_of(token), int(ttl)

    found, ttl = with_store(settings, check)
    assert found == account and 7100 < ttl <= 7200

    table = run(env, "accounts", "invite", "--account", account)
    assert table.exit_code == 0 and "/console/invitation/inv_" in table.stdout and "works once" in table.stdout
    assert "30 days" in fails(env, "accounts", "invite", "--account", account, "--expires", "90d")
    assert "45s" in fails(env, "accounts", "invite", "--account", account, "--expires", "soon", code=2)
    bare = ok(env, "accounts", "create", "--name", "no login")["id"]
    assert "has no login" in fails(env, "accounts", "invite", "--account", bare)
    assert "no account" in fails(env, "accounts", "invite", "--account", "acc_nope")


def test_keys_create_takes_a_label(env: dict[str, str]) -> None:
    account = ok(env, "accounts", "create", "--name", "x")["id"]
    created = ok(env, "keys", "create", "--account", account, "--label", "deploy bot")
    assert created["label"] == "deploy bot" and created["key"].startswith("sk_")
    listed = ok(env, "keys", "list", "--account", account)
    assert listed[0]["label"] == "deploy bot" and listed[0]["last_used"] is None and "key" not in listed[0]
    assert "at most 100" in fails(env, "keys", "create", "--account", account, "--label", "x" * 101)


def test_set_login_gives_an_account_a_login_and_frees_the_old_one(env: dict[str, str], settings: Settings) -> None:
    bare = ok(env, "accounts", "create", "--name", "no login yet")["id"]
    other = ok(env, "accounts", "create", "--name", "other", "--login", "taken@example.com")["id"]

    given = ok(env, "accounts", "set-login", "--account", bare, "First@Example.com")
    assert given["login"] == "First@Example.com" and given["password"] is False
    assert ok(env, "accounts", "invite", "--account", bare)["login"] == "First@Example.com"
    found = lookup(settings, "first@example.com")
    assert found is not None and found[0] == bare

    # Another account's login is refused and changes nothing; a new one frees the old.
    assert "another account" in fails(env, "accounts", "set-login", "--account", bare, "TAKEN@example.com")
    assert lookup(settings, "taken@example.com") is not None and lookup(settings, "taken@example.com")[0] == other
    ok(env, "accounts", "set-login", "--account", bare, "second")
    assert lookup(settings, "first@example.com") is None
    assert [a["login"] for a in ok(env, "accounts", "list") if a["id"] == bare] == ["second"]
    assert "is not an e-mail address" in fails(env, "accounts", "set-login", "--account", bare, "a@b")
    assert "no account" in fails(env, "accounts", "set-login", "--account", "acc_nope", "someone")
