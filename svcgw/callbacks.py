"""Which address, secret and token a delivery for an instance goes to.

An instance with its own address uses its own secret and token; one without
inherits all three from the account default. This rule is pure so that the
gateway, the console and the forwarder apply it identically.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Destination", "choose_destination", "new_signing_secret"]

Source = Literal["instance", "account"]


@dataclass(frozen=True)
class Destination:
    url: str
    secret: str = field(repr=False)
    sealed_token: str | None = field(default=None, repr=False)
    source: Source = "instance"


def choose_destination(
    instance_config: Mapping[str, str],
    account_config: Mapping[str, str],
) -> Destination | None:
    """The instance's own configuration wins; otherwise the account default; else None."""
    sources: tuple[tuple[Mapping[str, str], Source], ...] = (
        (instance_config, "instance"),
        (account_config, "account"),
    )
    for config, source in sources:
        url = config.get("url", "")
        if url:
            return Destination(
                url=url,
                secret=config.get("secret", ""),
                sealed_token=config.get("token") or None,
                source=source,
            )
    return None


def new_signing_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)
