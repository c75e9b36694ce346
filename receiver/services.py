"""What the parts of the HTTP role share: settings, Redis clients, the store, the outbound clients.

One :class:`Services` per app, built by :func:`build_services` and kept on
``app.state.services``; the app's lifespan opens the capability layer's
client and closes everything.

With several shards (``SVCGW_REDIS_SHARDS``) there is a client pair, the
shard's key names and an :class:`svcgw.intake.ingest.Ingest` per shard: a post goes
to its token's shard. ``redis``, ``text_redis``, ``keys`` and ``store`` are
shard 0's, which holds what belongs to the whole service; the store writes
the copies instances' shards read (:mod:`svcgw.registry.copies`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis

from svcgw.callbacks.outbound import Sender, sender_for
from svcgw.callbacks.routecache import RoutesCache
from svcgw.config.settings import Settings
from svcgw.intake.ingest import Ingest
from svcgw.registry.copies import ShardCopies
from svcgw.registry.store import Store
from svcgw.shards.clients import ShardRedis, aclose_all, role_clients
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import batched
from svcgw.upstream import Upstream
from svcgw.vault import TokenVault

from .credentialguard import CredentialGuard, guards
from .ratelimit import Clock, RateLimiter

__all__ = ["Services", "build_services"]

# Test POSTs are one per saved address; a few at once is plenty.
CALLBACK_TEST_CONNECTIONS = 8


@dataclass
class Services:
    settings: Settings
    redis: Redis  # bytes in, bytes out: raw bodies
    text_redis: Redis  # decode_responses=True: configuration
    keys: KeySpace  # shard 0's names
    store: Store
    ingest: Ingest
    vault: TokenVault
    # One budget per account, spent by gateway calls and console changes alike.
    limiter: RateLimiter
    # The checks of receiver tokens and of API keys (gateway and console): per client address.
    receiver_guard: CredentialGuard
    key_guard: CredentialGuard
    # By shard index; shard 0's are ``redis``, ``text_redis`` and ``ingest`` themselves.
    shard_redis: tuple[ShardRedis, ...] = ()
    shard_text: tuple[ShardRedis, ...] = ()
    ingests: tuple[Ingest, ...] = ()
    upstream: Upstream | None = None  # the shared keep-alive client, open while the lifespan runs
    callback_sender: Sender | None = None  # opened by the first test POST, see callbacks()
    # What parts built on these services close when the lifespan ends, before the clients (the console's
    # known-browser lane: receiver.console.laneloop).
    closing: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def callbacks(self) -> Sender:
        """The one guarded callback client of the app; call it inside the running loop.

        Created on first use because an aiohttp session belongs to the loop it
        was made on; the lifespan closes it.
        """
        if self.callback_sender is None:
            self.callback_sender = sender_for(self.settings, limit=CALLBACK_TEST_CONNECTIONS)
        return self.callback_sender

    @property
    def shards(self) -> tuple[ShardRedis, ...]:
        """Every shard's bytes client and names, by shard index."""
        return self.shard_redis or (ShardRedis(self.redis, self.keys),)

    @property
    def text_shards(self) -> tuple[ShardRedis, ...]:
        """Every shard's text client and names, by shard index."""
        return self.shard_text or (ShardRedis(self.text_redis, self.keys),)

    def shard_text_of(self, shard: int | None) -> ShardRedis:
        """The text client and names of ``shard`` (shard 0's for None or a shard this deployment does not have)."""
        if shard is None or not 0 <= shard < len(self.shard_text):
            return ShardRedis(self.text_redis, self.keys)
        return self.shard_text[shard]

    async def aclose_clients(self) -> None:
        """The posts' counters still held, then every client."""
        for ingest in self.ingests or (self.ingest,):
            await ingest.aclose()
        await aclose_all(self.shards)
        await aclose_all(self.text_shards)


def build_services(settings: Settings, *, clock: Clock | None = None) -> Services:
    """The shared parts; ``clock`` replaces the Redis server's clock in the rate limit (tests)."""
    raws, texts = role_clients(settings), role_clients(settings, decode=True)
    vault = TokenVault.from_settings(settings)
    text, keys = texts[0]
    store = Store(text, vault, keys)
    if len(texts) > 1:
        store.copies = ShardCopies([client for client, _ in texts], [names for _, names in texts])
    # Each shard's receiver reads the routing records of its instances there (the copies). The shards
    # of one client (a Cluster's virtual shards) share one batch of ingest scripts: a turn's posts to
    # any of them go together, one pipeline per master, not one batch per virtual shard, mostly of one.
    batches = {id(raw): batched(raw, "ingest") for raw, _ in raws}
    ingests = tuple(
        Ingest(raw, names, settings, targets=RoutesCache(raw, names, settings.routes_cache_seconds),
               batch=batches[id(raw)])
        for raw, names in raws
    )  # fmt: skip
    # Checks of credentials not known may hold half the connections of a pool, no more.
    receiver_guard, key_guard = guards(
        settings.receiver_failures_per_address,
        settings.key_failures_per_address,
        total=max(1, settings.redis_max_connections // 2),
        wait=settings.redis_pool_timeout,
    )
    return Services(
        settings=settings,
        redis=raws[0].redis,
        text_redis=text,
        keys=keys,
        store=store,
        ingest=ingests[0],
        vault=vault,
        limiter=RateLimiter(text, keys, settings.rate_limit, clock=clock),
        receiver_guard=receiver_guard,
        key_guard=key_guard,
        shard_redis=raws,
        shard_text=texts,
        ingests=ingests,
    )
