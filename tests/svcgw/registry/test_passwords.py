"""Password rules and argon2id hashing (svcgw.registry.passwords); login rules (svcgw.registry.credentials)."""

from __future__ import annotations

import pytest
from argon2 import PasswordHasher

from svcgw.config.settings import Settings, SettingsError
from svcgw.registry import passwords
from svcgw.registry.credentials import LoginRejected, normalise_login


def test_a_new_password_follows_the_rules() -> None:
    passwords.check_new("x" * passwords.MIN_LENGTH)
    passwords.check_new("x" * passwords.MAX_LENGTH)
    for bad, reason in (
        ("x" * (passwords.MIN_LENGTH - 1), "at least 10"),
        ("x" * (passwords.MAX_LENGTH + 1), "at most 256"),
        (" leading space here", "space"),
        ("a tab\tinside it", "control"),
    ):
        with pytest.raises(passwords.PasswordRejected, match=reason) as caught:
            passwords.check_new(bad)
        assert bad not in str(caught.value)
    with pytest.raises(passwords.PasswordRejected, match="login"):
        passwords.check_new("Dev@Example.com", login="dev@example.com")


def test_hash_and_verify() -> None:
    stored = passwords.hash_password("correct horse battery")
    assert stored.startswith("$argon2id$") and "correct" not in stored
    assert passwords.hash_password("correct horse battery") != stored  # salted
    assert passwords.verify(stored, "correct horse battery")
    assert not passwords.verify(stored, "correct horse batterY")
    assert not passwords.verify(stored, "x" * 10_000)  # over the bound: refused, not hashed at length
    assert not passwords.verify("not a hash", "correct horse battery")
    assert not passwords.needs_rehash(stored)
    weaker = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1).hash("correct horse battery")
    assert passwords.verify(weaker, "correct horse battery") and passwords.needs_rehash(weaker)
    passwords.verify_nothing()  # the work for a login nobody has; raises nothing


def test_logins_are_e_mail_addresses_or_names_without_regard_to_case() -> None:
    assert normalise_login("  Dev@Example.COM ") == "dev@example.com"
    assert normalise_login("Team.Lead_01") == "team.lead_01"
    # Full-width letters are the same login.
    assert normalise_login("\uff24\uff25\uff36@example.com") == "dev@example.com"
    for bad in ("", "ab", "a@b", "two words", "-dash", "x@y@z.com", "a" * 65, "tab\there"):
        with pytest.raises(LoginRejected):
            normalise_login(bad)


def test_the_sign_in_limits_are_settings_checked_at_start_up() -> None:
    assert Settings.from_env({}).signin_failures_per_login == "10/15minutes"
    assert (
        Settings.from_env({"SVCGW_SIGNIN_FAILURES_PER_ADDRESS": "5/minute"}).signin_failures_per_address == "5/minute"
    )
    for name in ("SVCGW_SIGNIN_FAILURES_PER_LOGIN", "SVCGW_SIGNIN_FAILURES_PER_ADDRESS"):
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: "often"})
