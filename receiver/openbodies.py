"""Bodies of the routes anyone may post to before signing in, held to a few KB.

Signing in (``POST /console/login``, ``POST /console/api/session``) and
accepting an invitation (``POST /console/invitation/{token}``,
``POST /console/api/invitation``) take a login, a password or two, an API key
and a form token: a few hundred bytes, at most about 6 KB with two passwords
of 256 four-byte characters, percent-encoded. Nothing else is needed before
anyone is known, so a body there past :data:`OPEN_BODY_BYTES` is refused
(413, ``{code: -41300, message}``, and the connection closed) before any of
it is read when its ``Content-Length`` says so, or as soon as that many bytes
have arrived otherwise: no one can make the server hold, parse or wait for a
large body without a credential. The body is read here in full (it is small)
and handed on to the route as it came.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from svcgw.errors import BODY_TOO_LARGE, error_body

__all__ = ["OPEN_BODY_BYTES", "OpenBodyLimit", "is_open"]

OPEN_BODY_BYTES = 8 * 1024

_OPEN_PATHS = frozenset({"/console/login", "/console/api/session", "/console/api/invitation"})
_OPEN_PREFIXES = ("/console/invitation/",)
_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_MESSAGE = f"a body sent before signing in has at most {OPEN_BODY_BYTES} bytes"


def is_open(method: str, path: str) -> bool:
    """Whether a request of ``method`` on ``path`` is one anyone may send before signing in, with a body."""
    return method in _WITH_BODY and (path in _OPEN_PATHS or path.startswith(_OPEN_PREFIXES))


class OpenBodyLimit:
    """Pure ASGI: the routes of :func:`is_open` get at most :data:`OPEN_BODY_BYTES` of body, read before they run."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_open(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > OPEN_BODY_BYTES):
                await _refuse(send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()  # as the route reading it would: the app logs one info line
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > OPEN_BODY_BYTES:
                await _refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # the disconnect, when the route waits for it
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


async def _refuse(send: Send) -> None:
    body = error_body(BODY_TOO_LARGE.code, _MESSAGE)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"cache-control", b"no-store"),
        # The rest of the body is never read: the connection cannot carry another request.
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": BODY_TOO_LARGE.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
