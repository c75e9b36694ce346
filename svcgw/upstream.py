"""The capability layer, as the gateway calls it: ``POST {base}/svc/api/{module}/{action}``.

One :class:`Upstream` (one keep-alive ``httpx.AsyncClient``) is shared by
every request of the HTTP server; the app's lifespan opens and closes it.

A call sends the body bytes it is given, unchanged, and returns an
:class:`Answer` that keeps the answer's bytes exactly as received: the
parsed envelope is only for reading ``code``, ``message`` and ``data``,
never for writing the answer back out.

Errors, converted at this edge so that nothing above sees httpx::

    UpstreamError
    ├── UpstreamUnreachable   no answer: connection refused or reset, timeout
    └── UpstreamUnusable      an answer, but not HTTP 200 with a JSON object
                              whose ``code`` is an integer
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

__all__ = [
    "DEFAULT_TIMEOUT",
    "Answer",
    "Upstream",
    "UpstreamError",
    "UpstreamUnreachable",
    "UpstreamUnusable",
    "operation_path",
]

# Login and connection operations can take a while upstream; connecting should not.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
DEFAULT_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=30.0)


class UpstreamError(Exception):
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


def parse_envelope(raw: bytes) -> dict[str, Any]:
    """The answer as a dict, or :class:`UpstreamUnusable`."""
    # The stdlib parser keeps integers of any size exact (orjson turns those
    # beyond 64 bits into floats), so the parsed form never misstates a value.
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


class Upstream:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base = base_url.rstrip("/")
        # trust_env off: a proxy variable in the environment must not divert
        # calls meant for the capability layer.
        self.client = httpx.AsyncClient(
            timeout=timeout,
            limits=DEFAULT_LIMITS,
            transport=transport,
            trust_env=False,
            follow_redirects=False,
        )

    async def call(self, module: str, action: str, body: bytes) -> Answer:
        """POST ``body`` to the operation; the answer, or an :class:`UpstreamError`."""
        url = self.base + operation_path(module, action)
        try:
            response = await self.client.post(url, content=body, headers={"Content-Type": "application/json"})
        except httpx.TimeoutException as exc:
            raise UpstreamUnreachable(f"{module}/{action}: timed out") from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnreachable(f"{module}/{action}: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise UpstreamUnusable(f"{module}/{action}: HTTP {response.status_code}")
        raw = response.content
        return Answer(raw, parse_envelope(raw))

    async def aclose(self) -> None:
        await self.client.aclose()
