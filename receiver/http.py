"""HTTP helpers shared by the receiver's endpoints: the body, the API key, JSON answers.

* :func:`read_body` reads a request body with a size limit, refusing before
  it holds more than the limit in memory, and tells a ``hold`` callback how
  many bytes it is about to hold (so a budget can refuse it sooner).
* :func:`presented_key` is the one meaning of "the API key of a request",
  for the gateway API and the console's JSON API alike.
* :func:`client_address` is the one meaning of "the client of a request",
  whose failed credentials and sign-ins are counted against it.
* :func:`answer_body` is the one serializer of the ``{code, message, data}``
  body every JSON answer has, a success or a refusal, on every surface (the
  gateway API, the receiver, the console's JSON API).
* :func:`json_answer` is that shape of a success.
* :func:`refusal_response` is the one place a refusal (``svcgw.errors.Refusal``,
  a row of ``receiver.gateway.codes`` or ``receiver.endpoint.codes``) becomes
  the JSON answer of the gateway API and of the receiver: ``{code, message,
  data: null}``, the row's status and the refusal's headers. Each of the two
  has its own table of which error gets which row (``receiver.gateway.refusals``,
  ``receiver.endpoint.receive``).
* :func:`plain_answer` is the one place a refusal of the operators'
  endpoints (/metrics, /docs, /rq: ``svcgw.errors.PlainRefusal``) becomes
  their answer, one line of text; :func:`plain_refused` is the app's
  handler of it.

Errors (in the one tree of ``svcgw.errors``, under ``Rejected``; each endpoint
maps them to its own row)::

    BodyError
    ├── BodyTooLarge      the declared or the received size is over the limit
    └── BadContentLength  ``Content-Length`` is not a number (strict readers only)
    ConflictingKeys       the key headers carry different keys
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from svcgw.clientkeys import IPV6_PREFIX, limit_key
from svcgw.errors import PlainRefusal, Refusal, Rejected

__all__ = [
    "KEY_HEADERS",
    "BadContentLength",
    "BodyError",
    "BodyTooLarge",
    "ConflictingKeys",
    "answer_body",
    "client_address",
    "json_answer",
    "plain_answer",
    "plain_refused",
    "presented_key",
    "read_body",
    "refusal_response",
]

KEY_HEADERS = ("svc-key", "x-svc-key")


class BodyError(Rejected):
    """A request body that is refused before it is read in full."""


class BodyTooLarge(BodyError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the body is larger than {limit} bytes")
        self.limit = limit


class BadContentLength(BodyError):
    def __init__(self) -> None:
        super().__init__("invalid Content-Length")


async def read_body(
    request: Request,
    limit: int,
    *,
    check_declared: bool = True,
    strict: bool = False,
    hold: Callable[[int], None] | None = None,
) -> bytes:
    """The body, refusing (:class:`BodyTooLarge`) before reading more than ``limit`` bytes.

    With ``check_declared``, a ``Content-Length`` over the limit is refused
    before anything is read. A ``Content-Length`` that is not a number is
    :class:`BadContentLength` when ``strict``; otherwise it is ignored (the
    HTTP server has its own opinion of it) and the received size decides.

    ``hold(n)``, if given, is called with the number of bytes the body will
    take before they are read: with the declared ``Content-Length`` before
    the first byte, then with the size received so far after each chunk
    that goes beyond it. Whatever it raises stops the reading.
    """
    declared = request.headers.get("content-length") if check_declared else None
    expected = 0
    if declared is not None:
        if strict:
            try:
                expected = int(declared)
            except ValueError:
                raise BadContentLength() from None
        elif declared.isdigit():
            expected = int(declared)
        if expected > limit:
            raise BodyTooLarge(limit)
    if hold is not None and expected > 0:
        hold(expected)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        if hold is not None and size > expected:
            hold(size)
        chunks.append(chunk)
    return b"".join(chunks)


class ConflictingKeys(Rejected):
    """The request carries several different API keys (a blank one counts as one of them)."""


def presented_key(request: Request) -> str | None:
    """The one API key the request carries; None when there is none, or only a blank one.

    A key may come in ``Svc-Key``, ``X-Svc-Key`` or ``Authorization: Bearer``,
    each possibly repeated. Headers carrying different keys raise
    :class:`ConflictingKeys`: a request must not be judged by whichever
    header a proxy happened to put first.
    """
    found: set[str] = set()
    for header in KEY_HEADERS:
        for value in request.headers.getlist(header):
            found.add(value.strip())
    for value in request.headers.getlist("authorization"):
        scheme, _, credentials = value.strip().partition(" ")
        if scheme.lower() == "bearer":
            found.add(credentials.strip())
    if len(found) > 1:
        raise ConflictingKeys()
    if not found:
        return None
    key = found.pop()
    return key or None


def client_address(request: Request) -> str:
    """The address failed credentials and sign-ins are counted against: the connection's peer, an IPv6 one by
    the network a subscriber holds (``SVCGW_IPV6_PREFIX``, a /56 by default).

    Behind a proxy named in ``SVCGW_TRUSTED_PROXIES``, uvicorn has already put
    the client that proxy reports (``X-Forwarded-For``) in its place; from any
    other peer that header is ignored. ``svcgw.clientkeys.limit_key`` makes it
    the key every per-address limit counts under.
    """
    scope = request.scope
    client = scope.get("client")
    if not client:
        return "unknown"
    # The app's setting (receiver.app's ServiceApp holds it as a plain attribute, read on every post
    # without Starlette's State lookup); an app built otherwise, or a scope called without one, counts
    # by the default.
    return limit_key(str(client[0]), getattr(scope.get("app"), "ipv6_prefix", IPV6_PREFIX))


def answer_body(code: int, message: str, data: object = None) -> bytes:
    """The ``{"code": ..., "message": ..., "data": ...}`` body of a JSON answer (``data`` null for a refusal)."""
    return orjson.dumps({"code": code, "message": message, "data": data})


def json_answer(code: int, message: str, data: object = None, *, status: int = 200) -> Response:
    """``{code, message, data}`` as ``application/json``."""
    return Response(
        answer_body(code, message, data),
        status_code=status,
        media_type="application/json",
    )


def refusal_response(refusal: Refusal) -> Response:
    """A refusal as the gateway's and the receiver's JSON answer (the console's is in ``receiver.console.answers``)."""
    return Response(
        answer_body(refusal.kind.code, refusal.message),
        status_code=refusal.kind.status,
        headers=refusal.headers,
        media_type="application/json",
    )


def plain_answer(refusal: Refusal) -> Response:
    """A refusal as the operators' endpoints answer it: its message as one line of text, its status and headers."""
    return PlainTextResponse(refusal.message + "\n", status_code=refusal.status, headers=refusal.headers or None)


async def plain_refused(request: Request, exc: Exception) -> Response:
    """The app's handler of :class:`svcgw.errors.PlainRefusal`, which /metrics and /docs raise."""
    assert isinstance(exc, PlainRefusal)
    return plain_answer(exc)
