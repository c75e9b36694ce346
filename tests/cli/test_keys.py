"""``svcgw keys``: a key is shown once, listed by prefix, and revoked."""

from __future__ import annotations

import orjson

from tests.cli.commands import fails, ok, svcgw


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
