"""Outbound HTTP that can only reach addresses the rules allow.

Callback hosts are checked when they are configured, but a name can resolve
differently by the time a delivery is made (DNS rebinding). So the check runs
again at connect time, inside the network backend: the host is resolved once,
:func:`svcgw.addresses.filter_addresses` drops internal addresses, and the
socket is opened to one of the addresses it kept. Nothing resolves the name a
second time, so what was checked is what gets dialled.

Only the TCP connect changes. httpcore hands the TLS layer the original host
name (``server_hostname``) and httpx builds the ``Host`` header from the URL,
so SNI, certificate checks and virtual hosting all see the configured name.

Errors::

    httpx.ConnectError
    └── DestinationBlocked    every address of the host is forbidden, or it does not resolve

Callers never follow redirects (``follow_redirects=False``); a redirect
would be a new destination that skipped the configuration-time check.

The delivery engine sends with aiohttp (:mod:`svcgw.outbound`), which applies
the same rules; :class:`HttpxSender` lets it use an httpx client instead
(tests that inject ``httpx.MockTransport``, or an in-process run).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio.to_thread
import httpcore
import httpx

from svcgw.addresses import UNUSABLE_ADDRESS, AddressError, Network, Resolver, filter_addresses

from .outbound import RESPONSE_SNIPPET_BYTES, Refused, Response, SendFailed, TimedOut

__all__ = [
    "AsyncGuardedTransport",
    "DestinationBlocked",
    "GuardedTransport",
    "HttpxSender",
    "make_async_client",
    "make_client",
]

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]

DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


class DestinationBlocked(httpx.ConnectError):
    """The destination host has no address the rules allow; nothing was sent.

    ``code`` is the gateway error code of the :class:`AddressError` (-40013).
    """

    def __init__(self, message: str, *, code: int = UNUSABLE_ADDRESS) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def from_error(cls, error: AddressError) -> DestinationBlocked:
        return cls(error.message, code=error.code)


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(deadline - time.monotonic(), 0.0)


class _GuardedBackend(httpcore.SyncBackend):
    """Resolves, filters, and connects to the first allowed address that answers."""

    def __init__(self, allow: Sequence[Network], resolve: Resolver | None) -> None:
        self._allow = tuple(allow)
        self._resolve = resolve

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = filter_addresses(host, port, self._allow, self._resolve)
        except AddressError as exc:
            raise DestinationBlocked.from_error(exc) from exc
        options = list(socket_options or ())
        # The connect timeout covers all the addresses together, not each one.
        deadline = None if timeout is None else time.monotonic() + timeout
        errors: list[Exception] = []
        for address in addresses:
            try:
                return super().connect_tcp(
                    address,
                    port,
                    timeout=_remaining(deadline),
                    local_address=local_address,
                    socket_options=options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                errors.append(exc)
                if deadline is not None and time.monotonic() >= deadline:
                    break
        # filter_addresses never returns an empty list, so there was an attempt.
        raise errors[-1]


class _AsyncGuardedBackend(httpcore.AnyIOBackend):
    """The async twin of :class:`_GuardedBackend`; the lookup runs in a worker thread."""

    def __init__(self, allow: Sequence[Network], resolve: Resolver | None) -> None:
        self._allow = tuple(allow)
        self._resolve = resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await anyio.to_thread.run_sync(
                filter_addresses, host, port, self._allow, self._resolve
            )
        except AddressError as exc:
            raise DestinationBlocked.from_error(exc) from exc
        options = list(socket_options or ())
        deadline = None if timeout is None else time.monotonic() + timeout
        errors: list[Exception] = []
        for address in addresses:
            try:
                return await super().connect_tcp(
                    address,
                    port,
                    timeout=_remaining(deadline),
                    local_address=local_address,
                    socket_options=options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                errors.append(exc)
                if deadline is not None and time.monotonic() >= deadline:
                    break
        # filter_addresses never returns an empty list, so there was an attempt.
        raise errors[-1]


class GuardedTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` that dials only addresses the rules allow.

    ``allow`` is ``Settings.allow_private_destinations``; ``resolve`` replaces
    ``getaddrinfo`` (tests). Proxies and Unix sockets are not offered: either
    would let a connection bypass the address check.
    """

    def __init__(
        self,
        *,
        allow: Sequence[Network] = (),
        resolve: Resolver | None = None,
        verify: ssl.SSLContext | str | bool = True,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = DEFAULT_LIMITS,
        local_address: str | None = None,
        retries: int = 0,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> None:
        ssl_context = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
        super().__init__(verify=ssl_context, http1=http1, http2=http2, limits=limits)
        self._pool = httpcore.ConnectionPool(
            **_pool_options(ssl_context, limits, http1, http2, local_address, retries, socket_options),
            network_backend=_GuardedBackend(allow, resolve),
        )


class AsyncGuardedTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` that dials only addresses the rules allow."""

    def __init__(
        self,
        *,
        allow: Sequence[Network] = (),
        resolve: Resolver | None = None,
        verify: ssl.SSLContext | str | bool = True,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = DEFAULT_LIMITS,
        local_address: str | None = None,
        retries: int = 0,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> None:
        ssl_context = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
        super().__init__(verify=ssl_context, http1=http1, http2=http2, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            **_pool_options(ssl_context, limits, http1, http2, local_address, retries, socket_options),
            network_backend=_AsyncGuardedBackend(allow, resolve),
        )


def _pool_options(
    ssl_context: ssl.SSLContext,
    limits: httpx.Limits,
    http1: bool,
    http2: bool,
    local_address: str | None,
    retries: int,
    socket_options: Iterable[SocketOption] | None,
) -> dict[str, Any]:
    """What httpx's own transports give their httpcore pool, for both guarded pools."""
    return {
        "ssl_context": ssl_context,
        "max_connections": limits.max_connections,
        "max_keepalive_connections": limits.max_keepalive_connections,
        "keepalive_expiry": limits.keepalive_expiry,
        "http1": http1,
        "http2": http2,
        "local_address": local_address,
        "retries": retries,
        "socket_options": socket_options,
    }


def _limits(max_connections: int) -> httpx.Limits:
    if max_connections < 1:
        raise ValueError("max_connections must be at least 1")
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)


def make_client(
    *,
    allow: Sequence[Network],
    timeout: float,
    max_connections: int = 100,
    resolve: Resolver | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.Client:
    """A client for callback deliveries: guarded connects, no redirects.

    ``trust_env`` is off so neither proxy variables nor ``.netrc`` can change
    where a request goes or what credentials it carries.
    """
    transport = GuardedTransport(allow=allow, resolve=resolve, verify=verify, limits=_limits(max_connections))
    return httpx.Client(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)


def make_async_client(
    *,
    allow: Sequence[Network],
    timeout: float,
    max_connections: int = 100,
    resolve: Resolver | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """The async twin of :func:`make_client`, e.g. for a one-off test POST."""
    transport = AsyncGuardedTransport(
        allow=allow, resolve=resolve, verify=verify, limits=_limits(max_connections)
    )
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)


class HttpxSender:
    """A :class:`svcgw.outbound.Sender` on an httpx client.

    A synchronous ``httpx.Client`` is called from a worker thread, so the
    engine's event loop never blocks on it. Errors are converted as the
    aiohttp sender converts its own.
    """

    def __init__(self, client: httpx.Client | httpx.AsyncClient) -> None:
        self.client = client

    @property
    def timeout(self) -> float:
        return self.client.timeout.read or 0.0

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        try:
            if isinstance(self.client, httpx.AsyncClient):
                return await self._post_async(self.client, url, body, headers)
            return await asyncio.to_thread(self._post_sync, self.client, url, body, headers)
        except DestinationBlocked as exc:
            raise Refused(str(exc), code=exc.code) from exc
        except httpx.TimeoutException as exc:
            raise TimedOut(f"timed out after {self.timeout}s") from exc
        except httpx.HTTPError as exc:
            raise SendFailed(type(exc).__name__, _first_line(exc)) from exc

    @staticmethod
    def _post_sync(client: httpx.Client, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        with client.stream("POST", url, content=body, headers=headers) as resp:
            collected = b""
            for chunk in resp.iter_raw():
                collected += chunk
                if len(collected) >= RESPONSE_SNIPPET_BYTES:
                    break
            return Response(resp.status_code, _snippet(collected))

    @staticmethod
    async def _post_async(client: httpx.AsyncClient, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        async with client.stream("POST", url, content=body, headers=headers) as resp:
            collected = b""
            async for chunk in resp.aiter_raw():
                collected += chunk
                if len(collected) >= RESPONSE_SNIPPET_BYTES:
                    break
            return Response(resp.status_code, _snippet(collected))

    async def aclose(self) -> None:
        """The client belongs to whoever passed it in; it is not closed here."""


def _snippet(collected: bytes) -> str:
    return collected[:RESPONSE_SNIPPET_BYTES].decode("utf-8", "replace")


def _first_line(exc: Exception) -> str:
    text = str(exc) or exc.__class__.__name__
    return text.splitlines()[0][:300]
