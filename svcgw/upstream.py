"""The capability layer, as the gateway calls it: ``POST {base}/svc/api/{module}/{action}``.

One :class:`Upstream` (one keep-alive ``aiohttp.ClientSession``) is shared by
every request of the HTTP server; the app's lifespan opens and closes it, and
each worker's prober has its own. The session is made on the first call,
inside the running event loop, and belongs to that loop from then on.

A call sends the body bytes it is given, unchanged, with ``Content-Type:
application/json`` and no other header of its own (only those HTTP/1.1
needs: ``Host``, ``Content-Length``). It asks for no compressed answer and
decompresses none, follows no redirect, keeps no cookie and reads no proxy,
netrc or other setting from the environment. It returns an :class:`Answer`
that keeps the answer's bytes exactly as received: the parsed envelope is
only for reading ``code``, ``message`` and ``data``, never for writing the
answer back out.

Connections are pooled and kept alive. A call is sent a second time only
when the first try cannot have been read by the capability layer:

* connecting failed (refused, reset, no route; not a connect timeout);
* the connection came from the pool, and it ended (closed or reset) before
  the head of an answer arrived: the capability layer closed it while idle,
  or restarted, as the request went out.

Nothing else is retried: a request that may have been read (a fresh
connection that ends without an answer, any timeout, an answer cut short)
fails, since operations such as ``device/create`` are not idempotent. One
deadline (``timeout``) covers the whole call, both tries included.

Errors, converted at this edge so that nothing above sees aiohttp::

    UpstreamError
    ├── UpstreamUnreachable   no answer: connection refused or reset, timeout
    └── UpstreamUnusable      an answer, but not HTTP 200 with a JSON object
                              whose ``code`` is an integer
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from svcgw.errors import Failure
from svcgw.plainrequest import PlainRequest

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "Answer",
    "Upstream",
    "UpstreamError",
    "UpstreamUnreachable",
    "UpstreamUnusable",
    "operation_path",
]

# Login and connection operations can take a while upstream; connecting should not.
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 5.0
MAX_CONNECTIONS = 256
KEEPALIVE_SECONDS = 30.0

JSON_HEADERS = {"Content-Type": "application/json"}
# Operation paths as URLs, made once each: parsing one costs more than the rest of a call's set-up.
URLS_KEPT = 1024


class UpstreamError(Failure):
    """The capability layer could not be used for this call."""


class UpstreamUnreachable(UpstreamError):
    """No answer came: connection failure or timeout."""


class UpstreamUnusable(UpstreamError):
    """An answer came, but not an envelope the gateway can pass on."""


@dataclass(frozen=True)
class Answer:
    """An envelope as the capability layer sent it."""

    raw: bytes
    envelope: dict[str, Any]

    @property
    def code(self) -> int:
        code = self.envelope["code"]
        assert isinstance(code, int)
        return code

    @property
    def message(self) -> str:
        message = self.envelope.get("message")
        return message if isinstance(message, str) else ""

    @property
    def data(self) -> Any:
        return self.envelope.get("data")

    @property
    def ok(self) -> bool:
        return self.code == 0


def operation_path(module: str, action: str) -> str:
    """The path of an operation, each name percent-encoded as one segment."""
    return f"/svc/api/{quote(module, safe='')}/{quote(action, safe='')}"


_WIDE_NUMBER = re.compile(rb"\d{20}|-\d{19}")


def parse_envelope(raw: bytes) -> dict[str, Any]:
    """The answer as a dict, or :class:`UpstreamUnusable`."""
    # orjson (several times faster) reads integers within 64 bits exactly, 19-digit ids included,
    # but turns larger ones into floats; an answer that may hold one (20 digits in a row, or 19
    # after a minus sign), and one orjson refuses, is read by the stdlib parser, which keeps
    # integers of any size exact. So the parsed form never misstates a value, and what it accepts
    # is what the stdlib accepts. The bytes passed on are ``raw`` in any case.
    try:
        if _WIDE_NUMBER.search(raw) is not None:
            raise ValueError("a number orjson may not keep exact")
        document = orjson.loads(raw)
    except ValueError:
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            raise UpstreamUnusable("the answer is not JSON") from None
    if not isinstance(document, dict):
        raise UpstreamUnusable("the answer is not a JSON object")
    code = document.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        raise UpstreamUnusable("the answer has no integer code")
    return document


class _Try:
    """What one try learnt about its connection (set by :class:`_Connector`)."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


# The try of the running task; a context variable because the connector is shared by all tasks.
_try: contextvars.ContextVar[_Try | None] = contextvars.ContextVar("upstream_try", default=None)


class _Connector(aiohttp.TCPConnector):
    """A connector that tells the current try whether its connection came from the pool.

    A connection is reused when its protocol was handed out before. This is
    what a trace's ``on_connection_reuseconn`` says, without the cost of
    tracing every step of every request.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handed_out: weakref.WeakSet[ResponseHandler] = weakref.WeakSet()

    async def connect(self, req: Any, traces: Any, timeout: aiohttp.ClientTimeout) -> Any:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        if protocol is not None:
            attempt = _try.get()
            if protocol in self._handed_out:
                if attempt is not None:
                    attempt.reused = True
            else:
                self._handed_out.add(protocol)
        return connection


def _unread(exc: BaseException, attempt: _Try) -> bool:
    """The request of a failed try cannot have been read upstream: worth one more try."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return True  # never connected (a connect timeout is not this class)
    # Raised while waiting for the head of the answer: the connection ended first.
    return attempt.reused and isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))


class Upstream:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[tuple[str, str], URL] = {}

    def _client(self) -> aiohttp.ClientSession:
        # Made on first use: a session binds to the running loop when it is created.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=_Connector(limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_SECONDS),
                # The whole call's deadline is the caller's (asyncio.timeout in call).
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
                cookie_jar=aiohttp.DummyCookieJar(),
                request_class=PlainRequest,  # no Accept, Accept-Encoding or User-Agent of aiohttp's
                auto_decompress=False,
                # trust_env off: a proxy variable in the environment must not divert
                # calls meant for the capability layer.
                trust_env=False,
            )
        return self._session

    async def call(self, module: str, action: str, body: bytes) -> Answer:
        """POST ``body`` to the operation; the answer, or an :class:`UpstreamError`."""
        # encoded: the path goes out exactly as operation_path wrote it.
        url = self._urls.get((module, action))
        if url is None:
            if len(self._urls) >= URLS_KEPT:
                self._urls.clear()  # any path may be called: keep the set bounded
            url = self._urls[module, action] = URL(self.base + operation_path(module, action), encoded=True)
        try:
            async with asyncio.timeout(self.timeout):
                status, raw = await self._post(url, body)
        except TimeoutError as exc:
            raise UpstreamUnreachable(f"{module}/{action}: timed out") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(f"{module}/{action}: {type(exc).__name__}") from exc
        if status != 200:
            raise UpstreamUnusable(f"{module}/{action}: HTTP {status}")
        return Answer(raw, parse_envelope(raw))

    async def _post(self, url: URL, body: bytes) -> tuple[int, bytes]:
        client = self._client()
        attempt = _Try()
        token = _try.set(attempt)
        try:
            response = await client.post(url, data=body, headers=JSON_HEADERS, allow_redirects=False)
        except aiohttp.ClientError as exc:
            if not _unread(exc, attempt):
                raise
            _try.set(None)
            response = await client.post(url, data=body, headers=JSON_HEADERS, allow_redirects=False)
        finally:
            _try.reset(token)
        async with response:
            # Read whatever the status: a connection whose answer was read goes back to the pool.
            return response.status, await response.read()

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
