"""What ``svcgw up --demo`` made: its account, API key and instance, which the demo's text names."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Demo"]


@dataclass(frozen=True)
class Demo:
    account: str
    key_id: str
    key: str = field(repr=False)
    appid: str
    receiver_token: str = field(repr=False)
    login: str | None = None
    # A one-time link to choose the console password, while the account has none.
    invitation: str | None = field(default=None, repr=False)
