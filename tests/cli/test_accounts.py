"""``svcgw accounts``: create, list, deny and allow, and their user errors."""

from __future__ import annotations

from svcgw.config.settings import Settings
from tests.cli.commands import fails, ok, svcgw
from tests.conftest import with_store
from tests.receiver.gateway.stack import Stack, error
from tests.receiver.gateway.stack import sim as sim
from tests.receiver.gateway.stack import stack as stack


def test_accounts_create_list_deny_allow(env: dict[str, str]) -> None:
    created = ok(env, "accounts", "create", "--name", "Acme", "--devices", "5", "--valid-until", "2031-12-31")
    assert created["id"].startswith("acc_")
    assert (created["name"], created["devices"], created["valid_until"]) == ("Acme", 5, "2031-12-31")

    listed = ok(env, "accounts", "list")
    assert [a["id"] for a in listed] == [created["id"]]
    assert listed[0]["instances"] == 0 and listed[0]["denied"] == []

    denied = ok(env, "accounts", "deny", "--account", created["id"], "message/sendText", "/svc/api/login/logout")
    assert denied == {"account": created["id"], "denied": ["login/logout", "message/sendText"]}
    allowed = ok(env, "accounts", "allow", "--account", created["id"], "login/logout")
    assert allowed["denied"] == ["message/sendText"]

    table = svcgw(env, "accounts", "list")
    assert table.exit_code == 0 and created["id"] in table.stdout and "Acme" in table.stdout


def test_accounts_list_shows_the_accounts_own_denials(env: dict[str, str], settings: Settings) -> None:
    created = ok(env, "accounts", "create", "--name", "Acme")
    ok(env, "accounts", "deny", "--account", created["id"], "message/sendText")
    with_store(settings, lambda store: store.deny_own(created["id"], ["login/getQr"]))
    listed = ok(env, "accounts", "list")
    assert listed[0]["denied"] == ["message/sendText"]
    assert listed[0]["denied_by_account"] == ["login/getQr"]
    # allow lifts the operator's denials only; the account's own stay its own.
    assert ok(env, "accounts", "allow", "--account", created["id"], "login/getQr")["denied"] == ["message/sendText"]
    table = svcgw(env, "accounts", "list")
    assert "denied by account" in table.stdout and "login/getQr" in table.stdout


def test_account_user_errors(env: dict[str, str]) -> None:
    assert "2031-02-30" in fails(env, "accounts", "create", "--name", "x", "--valid-until", "2031-02-30", code=2)
    assert "no account 'acc_nope' (code -40404)" in fails(
        env, "accounts", "deny", "--account", "acc_nope", "message/sendText"
    )
    account = ok(env, "accounts", "create", "--name", "x")["id"]
    assert "module/action" in fails(env, "accounts", "deny", "--account", account, "sendText")


def test_accounts_update_raises_the_device_quota_the_gateway_counts_against(env: dict[str, str], stack: Stack) -> None:
    account, key = stack.account(devices=1)
    stack.create_device(key)
    body = {"appid": "", "type": "iPad", "version": 0}
    assert error(stack.api(key, "device/create", body)) == (402, -40402)

    raised = ok(env, "accounts", "update", "--account", account, "--devices", "3")
    assert (raised["id"], raised["devices"]) == (account, 3)
    stack.create_device(key)
    stack.create_device(key)
    assert error(stack.api(key, "device/create", body)) == (402, -40402)  # 3 of 3
    # A lower quota removes nothing; it refuses new ones.
    assert ok(env, "accounts", "update", "--account", account, "--devices", "1")["devices"] == 1
    assert len(ok(env, "instances", "list", "--account", account)) == 3
    # Validity alone, the quota kept.
    later = ok(env, "accounts", "update", "--account", account, "--valid-until", "2031-12-31")
    assert (later["devices"], later["valid_until"]) == (1, "2031-12-31")


def test_accounts_update_user_errors(env: dict[str, str]) -> None:
    assert "no account 'acc_nope' (code -40404)" in fails(
        env, "accounts", "update", "--account", "acc_nope", "--devices", "2"
    )
    account = ok(env, "accounts", "create", "--name", "x")["id"]
    assert "--devices" in fails(env, "accounts", "update", "--account", account, code=2)
    assert "-1" in fails(env, "accounts", "update", "--account", account, "--devices", "-1", code=2)
    assert "2031-02-30" in fails(env, "accounts", "update", "--account", account, "--valid-until", "2031-02-30", code=2)
