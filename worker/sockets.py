"""Socket keys: which socket a callback URL reaches, for the per-socket cap.

The cap of :class:`worker.concurrencycaps.SocketSlots` must hold however a URL
spells its host: ``127.0.0.1:9100``, ``127.0.0.1:09100``, ``127.1:9100``,
``localhost:9100`` and any name of a wildcard DNS zone reach one socket, so
they must share one count. A URL's keys are therefore the addresses its host
resolves to, each with the port (``127.0.0.1:9100``, ``[::1]:9100``), and an
attempt takes a slot on every one of them.

Resolution goes through :func:`svcgw.callbacks.addresses.filter_addresses`, the rules
the connect-time check applies, so the keys are the addresses the sender may
dial (:func:`svcgw.callbacks.outbound.dialable`). IP literals in any spelling are read
without a lookup; names are looked up in a worker thread and the
answer is kept for :data:`TTL` seconds, as aiohttp keeps its own. A host
that does not resolve, or only to forbidden addresses, is keyed by its
normalised ``host:port``: the send will fail anyway, and it is still capped.

The cache also answers the reverse question for the claim script, which
can only compare URL text: which ``netloc`` spellings seen lately reach a
saturated key (:meth:`SocketKeys.netlocs_of`).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import time
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from svcgw.callbacks.addresses import AddressError, Network, Resolver
from svcgw.callbacks.origins import origin
from svcgw.callbacks.outbound import dialable
from svcgw.config.settings import DEFAULT_DESTINATION_PORTS, PortRanges

__all__ = ["TTL", "SocketKeys", "address_key", "netloc_of"]

TTL = 10.0  # seconds a resolution is kept


# Every attempt asks, and a worker sees few distinct addresses.
@functools.lru_cache(maxsize=4096)
def netloc_of(url: str) -> str:
    """The URL's ``netloc`` in lower case: the text the claim script compares."""
    return urlsplit(url).netloc.lower()


def address_key(address: str, port: int) -> str:
    """``address:port`` with the address in its canonical form (``[v6]:port``; v4-mapped v6 as v4)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{address}:{port}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"{ip.ipv4_mapped}:{port}"
        return f"[{ip}]:{port}"
    return f"{ip}:{port}"


class SocketKeys:
    """Resolves callback URLs to the keys of their sockets, with a short cache."""

    def __init__(
        self,
        allow: Sequence[Network] = (),
        ports: PortRanges = DEFAULT_DESTINATION_PORTS,
        resolve: Resolver | None = None,
        *,
        ttl: float = TTL,
    ) -> None:
        self._allow = tuple(allow)
        self._ports = ports
        self._resolve = resolve
        self._ttl = ttl
        self._cache: dict[str, tuple[float, tuple[str, ...]]] = {}  # netloc -> (expiry, keys)
        self._netlocs: dict[str, set[str]] = {}  # key -> netlocs cached with it
        self._lookups: dict[str, asyncio.Future[tuple[str, ...]]] = {}
        self._next_prune = 0.0

    def cached(self, url: str) -> tuple[str, ...] | None:
        """The keys of ``url`` while they are known, without a look-up; None when :meth:`keys` is to look."""
        cached = self._cache.get(netloc_of(url))
        return cached[1] if cached is not None and cached[0] > time.monotonic() else None

    async def keys(self, url: str) -> tuple[str, ...]:
        """The keys of the sockets ``url`` may reach (at least one)."""
        netloc = netloc_of(url)
        now = time.monotonic()
        cached = self._cache.get(netloc)
        if cached is not None and cached[0] > now:
            return cached[1]
        running = self._lookups.get(netloc)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[tuple[str, ...]] = asyncio.get_running_loop().create_future()
        self._lookups[netloc] = future
        try:
            found = await self._lookup(url, netloc)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # marked as retrieved: nobody else may be waiting
            raise
        finally:
            del self._lookups[netloc]
        future.set_result(found)
        self._remember(netloc, found, time.monotonic())
        return found

    async def _lookup(self, url: str, netloc: str) -> tuple[str, ...]:
        target = origin(url)
        if target is None:
            return (netloc,)
        _scheme, host, port = target
        try:
            kept = await dialable(host, port, self._allow, self._resolve, self._ports)
        except AddressError:
            return (f"{host.lower()}:{port}",)
        return tuple(sorted({address_key(address, port) for address in kept}))

    def _remember(self, netloc: str, found: tuple[str, ...], now: float) -> None:
        if now >= self._next_prune:
            self._prune(now)
        self._forget(netloc)
        self._cache[netloc] = (now + self._ttl, found)
        for key in found:
            self._netlocs.setdefault(key, set()).add(netloc)

    def _forget(self, netloc: str) -> None:
        old = self._cache.pop(netloc, None)
        if old is None:
            return
        for key in old[1]:
            spellings = self._netlocs.get(key)
            if spellings is not None:
                spellings.discard(netloc)
                if not spellings:
                    del self._netlocs[key]

    def _prune(self, now: float) -> None:
        """Drop expired answers, so a long-running worker does not keep every host it ever saw."""
        for netloc in [n for n, (expiry, _) in self._cache.items() if expiry <= now]:
            self._forget(netloc)
        self._next_prune = now + self._ttl

    def netlocs_of(self, keys: Iterable[str]) -> set[str]:
        """Every cached ``netloc`` spelling that reaches one of ``keys``."""
        found: set[str] = set()
        for key in keys:
            found |= self._netlocs.get(key, set())
        return found
