"""One-time invitations: a link with which a developer chooses the password of an account.

``svcgw accounts invite`` issues one for an account that has a login. The
token is random (256 bits); only its SHA-256 is stored,
``keys.invitation(<digest>)`` holding the account id, with the invitation's
lifetime as the key's TTL, so an expired one is simply gone. Redeeming it
is one ``GETDEL``: of two requests racing with one link, exactly one gets
the account. An invitation does not end another one: each is single-use and
expires by itself.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from svcgw.digests import digest
from svcgw.storage.keys import KeySpace

__all__ = ["MAX_SECONDS", "MIN_SECONDS", "TOKEN_PREFIX", "Invitation", "Invitations"]

TOKEN_PREFIX = "inv_"  # noqa: S105 - a prefix that tells tokens apart, no secret
MIN_SECONDS = 60
MAX_SECONDS = 30 * 86400
# A longer value is no token this service issued: refused without a look-up.
MAX_TOKEN_LENGTH = 128


@dataclass(frozen=True)
class Invitation:
    account: str
    token: str = field(repr=False)
    expires_at: float


class Invitations:
    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis: Any = redis
        self.keys = keys

    async def issue(self, account: str, seconds: int) -> Invitation:
        """A new invitation for ``account``, valid ``seconds`` (``MIN_SECONDS`` to ``MAX_SECONDS``)."""
        if not MIN_SECONDS <= seconds <= MAX_SECONDS:
            raise ValueError(f"an invitation lasts from {MIN_SECONDS} seconds to {MAX_SECONDS // 86400} days")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        await self.redis.set(self.keys.invitation(digest(token)), account, ex=seconds)
        return Invitation(account, token, time.time() + seconds)

    async def account_of(self, token: str) -> str | None:
        """The account a valid, unused invitation is for, without using it up."""
        if not _plausible(token):
            return None
        account = await self.redis.get(self.keys.invitation(digest(token)))
        return str(account) if account else None

    async def redeem(self, token: str) -> str | None:
        """Use the invitation up: its account, or None when it was used, expired or never issued."""
        if not _plausible(token):
            return None
        account = await self.redis.getdel(self.keys.invitation(digest(token)))
        return str(account) if account else None


def _plausible(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX) and len(token) <= MAX_TOKEN_LENGTH
