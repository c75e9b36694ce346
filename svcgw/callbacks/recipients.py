"""A delivery's recipient: which address, secret and token a delivery for an instance goes to.

An instance with its own address uses its own secret and token; one without
inherits all three from the account default. This rule is pure so that the
gateway, the console and the forwarder apply it identically.

Signing secrets are stored sealed by the ``TokenVault``, like Bearer tokens.
One written before secrets were sealed is stored in clear; it starts with
:data:`SECRET_PREFIX`, which no sealed value does (a sealed value is a
Fernet token, ``gAAAA...``), so :func:`open_secret` tells the two apart and
both keep working until ``svcgw secrets reencrypt`` seals the old ones.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from svcgw.vault import TokenVault

__all__ = [
    "SECRET_PREFIX",
    "Recipient",
    "choose_recipient",
    "new_signing_secret",
    "open_secret",
    "seal_secret",
    "stored_in_clear",
]

SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)

Source = Literal["instance", "account"]


@dataclass(frozen=True)
class Recipient:
    """Where to deliver: the recipient; ``secret`` and ``sealed_token`` as stored (see :func:`open_secret`)."""

    url: str
    secret: str = field(repr=False)
    sealed_token: str | None = field(default=None, repr=False)
    source: Source = "instance"


def choose_recipient(
    instance_config: Mapping[str, str],
    account_config: Mapping[str, str],
) -> Recipient | None:
    """The instance's own configuration wins; otherwise the account default; else None."""
    sources: tuple[tuple[Mapping[str, str], Source], ...] = (
        (instance_config, "instance"),
        (account_config, "account"),
    )
    for config, source in sources:
        url = config.get("url", "")
        if url:
            return Recipient(
                url=url,
                secret=config.get("secret", ""),
                sealed_token=config.get("token") or None,
                source=source,
            )
    return None


def new_signing_secret() -> str:
    """A new signing secret, in clear: seal it (:func:`seal_secret`) before storing it."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def stored_in_clear(stored: str) -> bool:
    """Whether a stored signing secret was written in clear, before secrets were sealed."""
    return stored.startswith(SECRET_PREFIX)


def open_secret(vault: TokenVault, stored: str) -> str:
    """The signing secret in clear; ``VaultError`` if it is sealed and no configured key opens it."""
    if not stored or stored_in_clear(stored):
        return stored
    return vault.open(stored)


def seal_secret(vault: TokenVault, stored: str) -> str:
    """A stored secret sealed under the vault's first key: one in clear is sealed, a sealed one resealed."""
    if stored_in_clear(stored):
        return vault.seal(stored)
    return vault.reseal(stored)
