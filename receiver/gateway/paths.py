"""The path guard: check 1 of the gateway, on the raw path, before routing.

A path under ``/svc/api/`` or ``/svc/instances/`` that could be read two
ways (a trailing slash, an empty or dot segment, an encoded ``/`` or ``.``,
or an API path other than ``/svc/api/{module}/{action}``) is answered
-40004 (400) before the router sees it, so nothing is redirected or guessed.
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from receiver.gateway import codes as gateway_codes
from svcgw.errors import GatewayError

from ..http import refusal_response

__all__ = ["PathGuard", "path_problem"]

_GUARDED_TREES = (("svc", "api"), ("svc", "instances"))


def path_problem(raw_path: bytes) -> str | None:
    """Why a raw request path under the gateway's trees is ambiguous, or None.

    Paths outside ``/svc/api/`` and ``/svc/instances/`` (after decoding and
    resolving dots, so ``//svc/./api/x/y`` is inside) are not judged here.
    """
    text = raw_path.split(b"?", 1)[0].decode("latin-1")
    loose = [part for part in posixpath.normpath("/" + unquote(text)).split("/") if part]
    tree = tuple(loose[:2])
    if tree not in _GUARDED_TREES:
        return None
    lowered = text.lower()
    if "%2f" in lowered or "%2e" in lowered:
        return "ambiguous request path: encoded '/' or '.'; use /svc/api/{module}/{action}"
    segments = text.split("/")
    if segments[0] != "" or "" in segments[1:]:
        return "ambiguous request path: empty segment or trailing slash; use /svc/api/{module}/{action}"
    if any(unquote(segment) in (".", "..") for segment in segments[1:]):
        return "ambiguous request path: dot segment; use /svc/api/{module}/{action}"
    if tree == ("svc", "api") and len(segments) != 5:
        return "ambiguous request path; use /svc/api/{module}/{action}"
    return None


class PathGuard:
    """ASGI middleware answering -40004 before routing, so nothing is redirected or guessed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode("utf-8")
            problem = path_problem(raw)
            if problem is not None:
                response = refusal_response(GatewayError(gateway_codes.AMBIGUOUS_PATH, problem))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
