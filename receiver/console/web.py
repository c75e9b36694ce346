"""Shared plumbing of the console's pages and JSON API: who is signed in, CSRF, the refusals.

A handler refuses by raising a :class:`ConsoleHTTPError` (a row: the console's
own, listed in ``receiver.console.codes.CONSOLE_KINDS``, or of the gateway's,
``receiver.gateway.codes``: the callback address rows -40011..-40013, and
its -42900 for a change over the account's rate limit),
or whatever else the console's table answers; ``receiver.console.answers``
turns it into the answer, JSON ``{code, message, data: null}`` or a page.

Rate limit: every change an account makes through the console (a POST, PUT
or DELETE of the JSON API or a form of the pages) counts against the same
per-account limit as its gateway calls (``SVCGW_RATE_LIMIT``, the same
moving window in Redis, ``receiver.ratelimit``), whatever its outcome, once
the caller is known and the CSRF check passed: a forged cross-site request
never spends its victim's quota. Reads do not count, and neither do signing
in and out, which touch only the caller's own session (a sign-out must
always work).

Errors (in the one tree of ``svcgw.errors``)::

    Refusal
    └── ConsoleHTTPError    an answer other than success: an ``ErrorKind``, a message, headers
        └── RateLimited     a change over the account's rate limit (429, ``Retry-After``)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from receiver.console import codes as console_codes
from receiver.gateway import codes as gateway_codes
from svcgw.callbacks.addresses import AddressError
from svcgw.digests import digest
from svcgw.errors import Refusal

from ..credentialguard import CredentialGuard
from ..http import answer_body, client_address, presented_key, read_body
from ..ratelimit import RateLimiter
from .session import CSRF_HEADER, Session, Sessions

if TYPE_CHECKING:
    from svcgw.registry.invitations import Invitations

    from .service import ConsoleService
    from .signin import PasswordSignIn

__all__ = [
    "ConsoleHTTPError",
    "Context",
    "RateLimited",
    "address_error",
    "json_ok",
]

MAX_JSON_BYTES = 64 * 1024


class ConsoleHTTPError(Refusal):
    """A refusal of the console; answered as JSON or as a page by ``receiver.console.answers``."""


class RateLimited(ConsoleHTTPError):
    """A change over the account's rate limit; ``retry_after`` whole seconds until one passes."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(gateway_codes.RATE_LIMITED, headers={"Retry-After": str(retry_after)})
        self.retry_after = retry_after


def address_error(exc: AddressError) -> ConsoleHTTPError:
    """A refused callback address as the error table's row for its code, with its own message."""
    return ConsoleHTTPError(gateway_codes.address_kind(exc), exc.message)


def json_ok(data: object, status: int = 200) -> Response:
    return Response(
        answer_body(0, "ok", data),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


class Context:
    """What every console handler needs: the service, the sessions, the settings, the rate limit.

    And for signing in with a password: the failure limits and argon2 (``signin``), and invitations;
    for requests signed with an API key, the guard of its look-up (``key_guard``, shared with the gateway).
    """

    def __init__(
        self,
        service: ConsoleService,
        sessions: Sessions,
        limiter: RateLimiter,
        signin: PasswordSignIn,
        invitations: Invitations,
        key_guard: CredentialGuard,
    ) -> None:
        self.service = service
        self.sessions = sessions
        self.settings = service.settings
        self.limiter = limiter
        self.signin = signin
        self.invitations = invitations
        self.key_guard = key_guard

    async def count_change(self, session: Session) -> None:
        """Count one change of the session's account; over the account's rate limit, :class:`RateLimited`."""
        verdict = await self.limiter.hit(session.account)
        if not verdict.allowed:
            raise RateLimited(verdict.retry_after)

    async def api_session(self, request: Request, *, change: bool) -> Session:
        """The caller of a JSON API request; a change also needs the CSRF header (cookie sessions only).

        Different keys in several headers (``ConflictingKeys``) are not signed in: 401.
        """
        key = presented_key(request)
        session = await self._from_key(request, key) if key else await self.sessions.from_cookie(request)
        if session is None:
            raise ConsoleHTTPError(console_codes.NOT_SIGNED_IN)
        if change and not session.csrf_ok(request.headers.get(CSRF_HEADER)):
            raise ConsoleHTTPError(console_codes.CSRF_FAILED)
        return session


    async def _from_key(self, request: Request, key: str) -> Session | None:
        """The session of a request signed with an API key, its look-up guarded per client address (``Throttled``)."""
        return await self.key_guard.check(client_address(request), digest(key), lambda: self.sessions.from_key(key))


async def json_body(request: Request) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ConsoleHTTPError(console_codes.UNSUPPORTED_MEDIA)
    raw = await read_body(request, MAX_JSON_BYTES, check_declared=False)  # too large: BodyTooLarge, 400
    try:
        document = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        raise ConsoleHTTPError(console_codes.BAD_REQUEST, "the body is not JSON") from None
    if not isinstance(document, dict):
        raise ConsoleHTTPError(console_codes.BAD_REQUEST, "the body must be a JSON object")
    return document


def int_param(request: Request, name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConsoleHTTPError(console_codes.BAD_REQUEST, f"{name} must be a whole number") from None
    if not minimum <= value <= maximum:
        raise ConsoleHTTPError(console_codes.BAD_REQUEST, f"{name} must be from {minimum} to {maximum}")
    return value
