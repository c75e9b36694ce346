"""Sending callbacks: an aiohttp client that can only reach addresses the rules allow.

The one client for every callback POST: the delivery engine's attempts and
the console's ``SvcCallbackTest`` (:mod:`svcgw.callbacks.testpost`). The engine
runs on one asyncio event loop per process, and aiohttp is the client that
keeps up with it: its connection pool does not slow down as the number of
requests in flight grows, which httpx's async pool does (see
``docs/performance.md``).

Connect-time rules:

* :class:`GuardedResolver` resolves the host once,
  :func:`svcgw.callbacks.addresses.filter_addresses` drops internal addresses and
  the service's own (its public origin and receiver URLs, -40012), and only
  the kept ones are handed to the connector, so nothing resolves the name a
  second time (DNS rebinding);
* every socket the connector opens is made by :func:`guarded_socket`, which
  checks the address it is about to dial once more. That covers hosts written
  as IP literals, which aiohttp never hands to a resolver;
* TLS SNI, certificate checks and the ``Host`` header keep the name from
  the URL: only the TCP connect uses the resolved address.

Redirects are never followed, no proxy or ``.netrc`` is read
(``trust_env=False``), cookies are not kept, and bodies are not decompressed.

Errors raised by :meth:`Sender.post`::

    SendError
    ├── Refused      the address rules forbid every address of the host; nothing was sent
    ├── TimedOut     no complete answer within the delivery timeout
    └── SendFailed   connection refused or reset, protocol error, a header HTTP cannot carry, ...

Nothing above the sender sees an aiohttp or socket exception.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from svcgw.callbacks.addresses import (
    UNUSABLE_ADDRESS,
    AddressError,
    Network,
    OwnTarget,
    Resolver,
    filter_addresses,
    forbidden_reason,
    is_ip_literal,
    own_targets,
    port_allowed,
)
from svcgw.config.settings import DEFAULT_DESTINATION_PORTS, PortRanges, Settings
from svcgw.errors import Failure
from svcgw.plainrequest import PlainRequest
from svcgw.threads import in_thread

__all__ = [
    "BAD_HEADER",
    "RESPONSE_SNIPPET_BYTES",
    "CallbackSender",
    "GuardedResolver",
    "Refused",
    "Response",
    "SendError",
    "SendFailed",
    "Sender",
    "TimedOut",
    "dialable",
    "guarded_connector",
    "sender_for",
]

RESPONSE_SNIPPET_BYTES = 2048


# --- errors -------------------------------------------------------------------
class SendError(Failure):
    """A callback request that got no HTTP answer."""


class Refused(SendError):
    """The destination has no address the rules allow (``code`` is the gateway's -40013)."""

    def __init__(self, message: str, *, code: int = UNUSABLE_ADDRESS) -> None:
        super().__init__(message)
        self.code = code


class TimedOut(SendError):
    """No complete answer within the timeout."""


class SendFailed(SendError):
    """The connection failed or broke; ``kind`` names the failure (``ConnectError``, ...)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Response:
    status: int
    snippet: str  # at most RESPONSE_SNIPPET_BYTES of the body, as sent (not decompressed)


class Sender(Protocol):
    """What a callback POST needs from an HTTP client (the engine, the console's test POST, test fakes)."""

    @property
    def timeout(self) -> float: ...

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST ``body`` to ``url``; raises only :class:`SendError`."""
        ...

    async def aclose(self) -> None: ...


# --- connect-time rules -----------------------------------------------------------
class _ForbiddenAddress(OSError):
    """Raised by :func:`guarded_socket`; the connector reports it as a failed connect."""


class DestinationRefused(aiohttp.ClientConnectionError):
    """Raised by :class:`GuardedResolver` when no address of the host may be dialled."""

    def __init__(self, error: AddressError) -> None:
        super().__init__(error.message)
        self.code = error.code


async def dialable(
    host: str,
    port: int,
    allow: Sequence[Network],
    resolve: Resolver | None,
    ports: PortRanges,
    own: Sequence[OwnTarget] = (),
) -> list[str]:
    """The addresses of ``host`` the connect-time rules let us dial
    (:func:`svcgw.callbacks.addresses.filter_addresses`).

    An IP literal is read at once; a name is looked up in a worker thread,
    since ``getaddrinfo`` blocks. Raises :class:`AddressError` as the rules do.
    """
    if is_ip_literal(host) and not own:
        return filter_addresses(host, port, allow, resolve, ports)
    # The service's own names are looked up too, which may block.
    return await in_thread(filter_addresses, host, port, allow, resolve, ports, own)


class GuardedResolver(AbstractResolver):
    """Resolves with :func:`filter_addresses` and returns only the addresses it kept.

    ``resolve`` replaces ``getaddrinfo`` (tests). A lookup that may block runs
    in a worker thread (:func:`dialable`).
    """

    def __init__(
        self,
        allow: Sequence[Network] = (),
        resolve: Resolver | None = None,
        ports: PortRanges = DEFAULT_DESTINATION_PORTS,
        own: Sequence[OwnTarget] = (),
    ) -> None:
        self._allow = tuple(allow)
        self._resolve = resolve
        self._ports = ports
        self._own = tuple(own)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            kept = await dialable(host, port, self._allow, self._resolve, self._ports, self._own)
        except AddressError as exc:
            raise DestinationRefused(exc) from exc
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in kept
        ]

    async def close(self) -> None:
        return None


def guarded_socket(
    allow: Sequence[Network], ports: PortRanges = DEFAULT_DESTINATION_PORTS
) -> aiohttp.connector.SocketFactoryType:
    """A socket factory that refuses to make a socket for a forbidden address or port."""
    allowed = tuple(allow)

    def factory(addr_info: tuple[int, int, int, str, tuple[object, ...]]) -> socket.socket:
        family, type_, proto, _canonname, sockaddr = addr_info
        text = str(sockaddr[0])
        port = sockaddr[1]
        if not isinstance(port, int) or not port_allowed(port, ports):
            raise _ForbiddenAddress(f"port {port} is not an allowed destination port")
        try:
            reason = forbidden_reason(ipaddress.ip_address(text), allowed)
        except ValueError:
            reason = "not a plain IP address"
        if reason is not None:
            raise _ForbiddenAddress(f"address {text} is internal ({reason})")
        return socket.socket(family=family, type=type_, proto=proto)

    return factory


def guarded_connector(
    *,
    allow: Sequence[Network] = (),
    resolve: Resolver | None = None,
    verify: ssl.SSLContext | bool = True,
    limit: int = 0,
    ports: PortRanges = DEFAULT_DESTINATION_PORTS,
    own: Sequence[OwnTarget] = (),
) -> aiohttp.TCPConnector:
    """A connector that dials only addresses and ports the rules allow (``limit`` 0: no pool limit)."""
    return aiohttp.TCPConnector(
        resolver=GuardedResolver(allow, resolve, ports, own),
        socket_factory=guarded_socket(allow, ports),
        ssl=verify,
        limit=limit,
        limit_per_host=0,
        # Cached answers are the filtered ones; they age out like aiohttp's own.
        ttl_dns_cache=10,
    )


# --- the client -------------------------------------------------------------------
# A failed attempt's reason when a header could not be written; it names no header value.
BAD_HEADER = "a request header holds a control character (CR, LF or NUL); check the Bearer token"


def sender_for(settings: Settings, *, limit: int = 0) -> CallbackSender:
    """The service's callback client: its allow-list, ports, own address and delivery timeout."""
    return CallbackSender(
        allow=settings.allow_private_destinations,
        timeout=settings.delivery_timeout,
        limit=limit,
        ports=settings.destination_ports,
        own=own_targets(settings),
    )


class CallbackSender:
    """POSTs callbacks through a :func:`guarded_connector`. Create it inside the running loop."""

    def __init__(
        self,
        *,
        allow: Sequence[Network] = (),
        timeout: float,
        resolve: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        limit: int = 0,
        ports: PortRanges = DEFAULT_DESTINATION_PORTS,
        own: Sequence[OwnTarget] = (),
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._timeout = timeout
        self._session = aiohttp.ClientSession(
            connector=guarded_connector(allow=allow, resolve=resolve, verify=verify, limit=limit, ports=ports, own=own),
            timeout=aiohttp.ClientTimeout(total=timeout),
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            raise_for_status=False,
            # It decompresses nothing, so it asks for no compressed answer (svcgw.plainrequest).
            request_class=PlainRequest,
        )

    @property
    def timeout(self) -> float:
        return self._timeout

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST and read at most :data:`RESPONSE_SNIPPET_BYTES` of the answer; never follows a redirect."""
        try:
            async with self._session.post(url, data=body, headers=dict(headers), allow_redirects=False) as resp:
                snippet = await _read_snippet(resp.content)
                return Response(resp.status, snippet)
        except DestinationRefused as exc:
            raise Refused(str(exc), code=exc.code) from exc
        except TimeoutError as exc:
            # aiohttp's own timeouts are TimeoutError subclasses too.
            raise TimedOut(f"timed out after {self._timeout}s") from exc
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, _ForbiddenAddress):
                raise Refused(str(exc.os_error)) from exc
            raise SendFailed("ConnectError", _connect_error(exc)) from exc
        except aiohttp.InvalidURL as exc:
            raise SendFailed("InvalidURL", _first_line(exc)) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
            raise SendFailed("RemoteProtocolError", _first_line(exc)) from exc
        except aiohttp.ClientResponseError as exc:
            raise SendFailed("RemoteProtocolError", _first_line(exc)) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise SendFailed(type(exc).__name__, _first_line(exc)) from exc
        except ValueError as exc:
            # aiohttp refuses to write a header with CR, LF or NUL in it (a token saved before such
            # tokens were refused): a failed attempt with its reason. The value is never repeated.
            raise SendFailed("InvalidHeader", BAD_HEADER) from exc

    async def aclose(self) -> None:
        await self._session.close()


async def _read_snippet(content: aiohttp.StreamReader) -> str:
    collected = b""
    while len(collected) < RESPONSE_SNIPPET_BYTES:
        chunk = await content.read(RESPONSE_SNIPPET_BYTES - len(collected))
        if not chunk:
            break
        collected += chunk
    return collected.decode("utf-8", "replace")


def _connect_error(exc: aiohttp.ClientConnectorError) -> str:
    """The host and port that did not answer, and why.

    aiohttp's own text says ``ssl:default`` even for a plain-http address (it
    names the connector's TLS setting, not the request's scheme); a TLS
    failure keeps aiohttp's text, which is about TLS.
    """
    if isinstance(exc, aiohttp.ClientSSLError):
        return _first_line(exc)
    host = f"[{exc.host}]" if ":" in exc.host else exc.host
    error = exc.os_error
    # asyncio's strerror repeats the address ("Connect call failed (...)"); the errno's name is the reason.
    reason = os.strerror(error.errno) if error.errno else str(error) or type(error).__name__
    return f"cannot connect to {host}:{exc.port}: {reason}"[:300]


def _first_line(exc: BaseException) -> str:
    text = str(exc) or exc.__class__.__name__
    return text.splitlines()[0][:300]
