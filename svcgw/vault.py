"""Encryption at rest for callback Bearer tokens, signing secrets and receiver tokens.

Tokens are sealed with ``cryptography``'s MultiFernet: the first key of
``SVCGW_ENCRYPTION_KEYS`` encrypts, every key decrypts, so keys can be rotated
by putting a new one first and re-encrypting (``svcgw secrets reencrypt``).
Without that variable, a key is generated once into the state directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from svcgw.config.settings import Settings, SettingsError
from svcgw.errors import Failure

__all__ = ["RememberingVault", "TokenVault", "VaultError"]

KEY_FILE = "encryption.key"


class VaultError(Failure):
    """A sealed value could not be opened with any configured key."""


class TokenVault:
    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise SettingsError("SVCGW_ENCRYPTION_KEYS: at least one Fernet key is required")
        fernets = []
        for index, key in enumerate(keys):
            try:
                fernets.append(Fernet(key.encode("ascii")))
            except (ValueError, UnicodeEncodeError):
                # Only the position is named: the value itself is key material.
                raise SettingsError(
                    f"SVCGW_ENCRYPTION_KEYS: key number {index + 1} is not a valid Fernet key"
                ) from None
        self._fernet = MultiFernet(fernets)

    def __repr__(self) -> str:
        return "TokenVault(keys='**********')"

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenVault:
        if settings.encryption_keys:
            return cls(settings.encryption_keys)
        return cls([load_or_create_key(settings.state_dir)])

    def seal(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode("utf-8")).decode("ascii")

    def open(self, sealed: str | bytes) -> str:
        try:
            data = sealed.encode("ascii") if isinstance(sealed, str) else sealed
            return self._fernet.decrypt(data).decode("utf-8")
        except (InvalidToken, UnicodeError):
            raise VaultError("a stored token cannot be decrypted with the configured keys") from None

    def reseal(self, sealed: str | bytes) -> str:
        """Re-encrypt under the first key (after a key rotation)."""
        try:
            data = sealed.encode("ascii") if isinstance(sealed, str) else sealed
            return self._fernet.rotate(data).decode("ascii")
        except (InvalidToken, UnicodeError):
            raise VaultError("a stored token cannot be decrypted with the configured keys") from None

    def remembering(self, limit: int = 4096, seconds: float = 300.0) -> RememberingVault:
        """This vault's keys, opening each sealed value once per ``seconds`` (at most ``limit`` kept)."""
        return RememberingVault(self, limit, seconds)


class RememberingVault(TokenVault):
    """A vault that remembers what it opened, for the delivery engine.

    Every attempt signs with its destination's secret and may send its
    token, and a worker opens the same few sealed values thousands of times
    a second: a Fernet decryption (an HMAC check and an AES pass) costs
    about as much as the rest of preparing an attempt. A sealed value opens
    to the same text for as long as the keys are the same, and the keys are
    fixed for a process's life, so the opened text is kept by its sealed
    form. Entries last ``seconds`` and at most ``limit`` are kept, so a
    secret replaced or removed does not stay in memory for long after.
    """

    def __init__(
        self, vault: TokenVault, limit: int, seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fernet = vault._fernet
        self._limit = max(1, limit)
        self._seconds = seconds
        self._clock = clock
        self._opened: dict[str | bytes, tuple[str, float]] = {}

    def __repr__(self) -> str:
        return "RememberingVault(keys='**********')"

    def open(self, sealed: str | bytes) -> str:
        now = self._clock()
        kept = self._opened.get(sealed)
        if kept is not None and kept[1] > now:
            return kept[0]
        opened = super().open(sealed)  # VaultError is not remembered: the next attempt tries again
        if kept is None and len(self._opened) >= self._limit:
            # The oldest entry goes: dicts keep insertion order.
            del self._opened[next(iter(self._opened))]
        self._opened[sealed] = (opened, now + self._seconds)
        return opened

    def remembering(self, limit: int = 4096, seconds: float = 300.0) -> RememberingVault:
        return self


def load_or_create_key(state_dir: Path) -> str:
    path = state_dir / KEY_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key().decode("ascii")
    # O_EXCL: when two processes start at once, one writes and both read its key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key
