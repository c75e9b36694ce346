"""Encryption at rest for callback Bearer tokens, signing secrets and receiver tokens.

Tokens are sealed with ``cryptography``'s MultiFernet: the first key of
``SVCGW_ENCRYPTION_KEYS`` encrypts, every key decrypts, so keys can be rotated
by putting a new one first and re-encrypting (``svcgw secrets reencrypt``).
Without that variable, a key is generated once into the state directory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from .errors import Failure
from .settings import Settings, SettingsError

__all__ = ["TokenVault", "VaultError"]

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
