"""Shared plumbing of the console's pages and JSON API: who is signed in, CSRF, answers.

JSON errors have the gateway's shape ``{code, message, data: null}``; the
console's own codes:

===========  ======  ================================================
code         HTTP    when
===========  ======  ================================================
401          401     not signed in (no valid session or API key)
-40310       403     CSRF token missing or wrong
-40404       404     no such appid or dead letter, or another account's
-40000       400     a value the console cannot use (the message says which)
-40011..13   400     the callback address breaks the address rules
-41500       415     a JSON body was expected
-50002       503     storage temporarily unavailable
===========  ======  ================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..http import BodyTooLarge, ConflictingKeys, presented_key, read_body
from .session import CSRF_HEADER, Session, Sessions

if TYPE_CHECKING:
    from .service import ConsoleService

__all__ = [
    "BAD_REQUEST",
    "CSRF_FAILED",
    "NOT_FOUND",
    "NOT_SIGNED_IN",
    "UNAVAILABLE",
    "UNSUPPORTED_MEDIA",
    "ConsoleHTTPError",
    "Context",
    "json_error",
    "json_ok",
]

NOT_SIGNED_IN = (401, 401, "sign in first: a console session or an API key is required")
CSRF_FAILED = (403, -40310, "CSRF token missing or wrong")
NOT_FOUND = (404, -40404, "appid does not exist or is not the caller's")
BAD_REQUEST = (400, -40000, "bad request")
UNSUPPORTED_MEDIA = (415, -41500, "send a JSON object with Content-Type: application/json")
UNAVAILABLE = (503, -50002, "storage temporarily unavailable; retry later")

MAX_JSON_BYTES = 64 * 1024


class ConsoleHTTPError(Exception):
    """An answer other than success; turned into JSON (API) or a page (console)."""

    def __init__(self, kind: tuple[int, int, str], message: str | None = None) -> None:
        status, code, default = kind
        super().__init__(message or default)
        self.status = status
        self.code = code
        self.message = message or default


def json_ok(data: object, status: int = 200) -> Response:
    return Response(
        orjson.dumps({"code": 0, "message": "ok", "data": data}),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def json_error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps({"code": code, "message": message, "data": None}),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store", **(headers or {})},
    )


class Context:
    """What every console handler needs: the service, the sessions, the settings."""

    def __init__(self, service: ConsoleService, sessions: Sessions) -> None:
        self.service = service
        self.sessions = sessions
        self.settings = service.settings

    async def api_session(self, request: Request, *, change: bool) -> Session:
        """The caller of a JSON API request; a change also needs the CSRF header (cookie sessions only)."""
        try:
            key = presented_key(request)
        except ConflictingKeys:
            raise ConsoleHTTPError(NOT_SIGNED_IN) from None
        session = await self.sessions.from_key(key) if key else await self.sessions.from_cookie(request)
        if session is None:
            raise ConsoleHTTPError(NOT_SIGNED_IN)
        if change and not session.csrf_ok(request.headers.get(CSRF_HEADER)):
            raise ConsoleHTTPError(CSRF_FAILED)
        return session


async def json_body(request: Request) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ConsoleHTTPError(UNSUPPORTED_MEDIA)
    try:
        raw = await read_body(request, MAX_JSON_BYTES, check_declared=False)
    except BodyTooLarge as exc:
        raise ConsoleHTTPError(BAD_REQUEST, str(exc)) from None
    try:
        document = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        raise ConsoleHTTPError(BAD_REQUEST, "the body is not JSON") from None
    if not isinstance(document, dict):
        raise ConsoleHTTPError(BAD_REQUEST, "the body must be a JSON object")
    return document


def int_param(request: Request, name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConsoleHTTPError(BAD_REQUEST, f"{name} must be a whole number") from None
    if not minimum <= value <= maximum:
        raise ConsoleHTTPError(BAD_REQUEST, f"{name} must be from {minimum} to {maximum}")
    return value
