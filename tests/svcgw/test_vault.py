"""The vault's memo of opened values (svcgw.vault.RememberingVault)."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet, MultiFernet

from svcgw.vault import RememberingVault, TokenVault, VaultError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def remembering(vault: TokenVault, clock: Clock, limit: int = 4) -> RememberingVault:
    return RememberingVault(vault, limit, 300.0, clock=clock)


def forget_keys(memo: RememberingVault) -> None:
    """Swap the memo's keys for one that opens nothing: only what it remembers still opens."""
    memo._fernet = MultiFernet([Fernet(Fernet.generate_key())])


def test_opens_what_the_vault_opens() -> None:
    vault = TokenVault([Fernet.generate_key().decode()])
    memo = vault.remembering()
    sealed = vault.seal("whsec_one")
    assert memo.open(sealed) == "whsec_one"
    assert memo.open(sealed.encode()) == "whsec_one"
    assert memo.remembering() is memo


def test_an_opened_value_is_remembered_until_it_expires() -> None:
    vault = TokenVault([Fernet.generate_key().decode()])
    clock = Clock()
    memo = remembering(vault, clock)
    sealed = vault.seal("whsec_one")
    assert memo.open(sealed) == "whsec_one"
    forget_keys(memo)
    assert memo.open(sealed) == "whsec_one"
    clock.now += 301
    with pytest.raises(VaultError):
        memo.open(sealed)


def test_at_most_limit_values_are_kept_the_oldest_going_first() -> None:
    vault = TokenVault([Fernet.generate_key().decode()])
    memo = remembering(vault, Clock(), limit=2)
    first, second, third = (vault.seal(f"whsec_{n}") for n in range(3))
    for sealed in (first, second, third):
        memo.open(sealed)
    forget_keys(memo)
    assert [memo.open(second), memo.open(third)] == ["whsec_1", "whsec_2"]
    with pytest.raises(VaultError):
        memo.open(first)


def test_a_value_that_does_not_open_is_tried_again() -> None:
    vault = TokenVault([Fernet.generate_key().decode()])
    other = TokenVault([Fernet.generate_key().decode()])
    memo = remembering(vault, Clock())
    sealed = other.seal("whsec_other")
    with pytest.raises(VaultError):
        memo.open(sealed)
    memo._fernet = other._fernet  # the key is configured now
    assert memo.open(sealed) == "whsec_other"


def test_its_repr_names_no_key_and_no_value() -> None:
    key = Fernet.generate_key().decode()
    vault = TokenVault([key])
    memo = vault.remembering()
    memo.open(vault.seal("whsec_secret"))
    assert key not in repr(memo) and "whsec_secret" not in repr(memo)
