"""What the parts of the HTTP role share: settings, Redis clients, the store, the outbound clients.

One :class:`Services` per app, built by :func:`build_services` and kept on
``app.state.services``; the app's lifespan opens the capability layer's
client and closes everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from svcgw.connections import async_client
from svcgw.ingest import Ingest
from svcgw.outbound import Sender, sender_for
from svcgw.settings import Settings
from svcgw.store import Store
from svcgw.upstream import Upstream
from svcgw.vault import TokenVault

from .ratelimit import Clock, RateLimiter

__all__ = ["Services", "build_services"]

# Test POSTs are one per saved address; a few at once is plenty.
CALLBACK_TEST_CONNECTIONS = 8


@dataclass
class Services:
    settings: Settings
    redis: Redis  # bytes in, bytes out: raw bodies
    text_redis: Redis  # decode_responses=True: configuration
    store: Store
    ingest: Ingest
    vault: TokenVault
    # One budget per account, spent by gateway calls and console changes alike.
    limiter: RateLimiter
    upstream: Upstream | None = None  # the shared keep-alive client, open while the lifespan runs
    callback_sender: Sender | None = None  # opened by the first test POST, see callbacks()

    def callbacks(self) -> Sender:
        """The one guarded callback client of the app; call it inside the running loop.

        Created on first use because an aiohttp session belongs to the loop it
        was made on; the lifespan closes it.
        """
        if self.callback_sender is None:
            self.callback_sender = sender_for(self.settings, limit=CALLBACK_TEST_CONNECTIONS)
        return self.callback_sender



def build_services(settings: Settings, *, clock: Clock | None = None) -> Services:
    """The shared parts; ``clock`` replaces the Redis server's clock in the rate limit (tests)."""
    raw, text = async_client(settings), async_client(settings, decode=True)
    vault = TokenVault.from_settings(settings)
    return Services(
        settings=settings,
        redis=raw,
        text_redis=text,
        store=Store(text, vault),
        ingest=Ingest(raw, settings),
        vault=vault,
        limiter=RateLimiter(text, settings.rate_limit, clock=clock),
    )
