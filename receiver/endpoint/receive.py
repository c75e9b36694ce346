"""The per-instance receiver: where the capability layer posts events.

``POST /svc/receiver/{appid}/{token}``: the token is the instance's secret
part of the URL; a wrong token or an unknown appid answers 404 and stores
nothing; the token is checked before the body is read. The post is stored
by :class:`svcgw.intake.ingest.Ingest` in one script call, and only then answered
200, so every acknowledged event is in Redis.

With several shards, the token names the instance's shard
(:func:`svcgw.intake.receivers.receiver_shard`): the post goes to that shard's
``Ingest``, one script on one shard, with no look-up elsewhere. A token
naming a shard this deployment does not have is no receiver (404).

The token's look-up is guarded per client address
(``receiver.credentialguard``): a token this process has found valid
lately goes straight to it; others are looked up a few at a time, and not
at all while the address's window of failures is full (429 and
``Retry-After``), so a flood of made-up tokens cannot keep real posts from
Redis.

A post refused because Redis did not store it (503, ``-50002``) is counted in ``/metrics`` and
its cause logged (:mod:`receiver.endpoint.notstored`).

The app hands a post on a plain receiver path (:func:`direct_post`) to
:meth:`Endpoint.direct`, without its router and middleware; any other path
under the prefix takes the route, to the same handler.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from receiver.endpoint import codes as receiver_codes
from svcgw.digests import digest
from svcgw.errors import STORAGE_ERRORS, GatewayError, Refusal, Rows
from svcgw.intake.envelope import EnvelopeError
from svcgw.intake.ingest import Ingest, UnknownReceiver
from svcgw.intake.receivers import receiver_shard
from svcgw.shards.placement import MAX_SHARD_DIGITS
from svcgw.storage.layoutversion import LayoutError

from ..credentialguard import CredentialGuard, Throttled
from ..headers import send_direct, send_server_error
from ..http import BadContentLength, BodyTooLarge, client_address, json_answer, read_body, refusal_response
from .notstored import NotStored

__all__ = ["ROWS", "Endpoint", "direct_post", "make_endpoint", "refused"]

_AGAIN = {"Retry-After": "1"}

# The receiver's table: each error a post can meet, and the row it is answered with.
ROWS: Rows[Refusal] = Rows(
    {
        BadContentLength: lambda exc: GatewayError(receiver_codes.RECEIVER_BAD_BODY, str(exc)),
        BodyTooLarge: lambda exc: GatewayError(receiver_codes.RECEIVER_TOO_LARGE, str(exc)),
        EnvelopeError: lambda exc: GatewayError(receiver_codes.receiver_kind(exc.status), str(exc)),
        UnknownReceiver: lambda exc: GatewayError(receiver_codes.RECEIVER_NOT_FOUND),
        Throttled: lambda exc: GatewayError(
            receiver_codes.RECEIVER_LIMITED, headers={"Retry-After": str(exc.retry_after)}
        ),
        # Not stored, so not acknowledged: the sender must post again.
        (*STORAGE_ERRORS, LayoutError): lambda exc: GatewayError(receiver_codes.RECEIVER_UNAVAILABLE, headers=_AGAIN),
    }
)


# A path the route would take, read one way only: no encoded byte, no empty segment, and no dot but
# the one after a token's shard (``s<i>.``, svcgw.shards.placement), so every shard's posts take it.
_PLAIN_RECEIVER_PATH = re.compile(
    rb"/svc/receiver/([^/%%.?]+)/((?:s[1-9][0-9]{0,%d}\.)?[^/%%.?]+)" % (MAX_SHARD_DIGITS - 1)
)


def direct_post(scope: Scope) -> tuple[str, str] | None:
    """``(appid, token)`` of a post on a plain receiver path, which needs no routing; else None."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    match = _PLAIN_RECEIVER_PATH.fullmatch(scope.get("raw_path") or scope["path"].encode("utf-8"))
    if match is None:
        return None
    return match.group(1).decode("latin-1"), match.group(2).decode("latin-1")


class Endpoint:
    """The route's handler (:meth:`handle`), and :meth:`direct` for the app to run without routing."""

    def __init__(self, ingests: Sequence[Ingest], guard: CredentialGuard) -> None:
        self.shards = tuple(ingests)  # by shard index
        self.guard = guard  # the look-ups of tokens
        self._not_stored: NotStored | None = None  # made at the first post Redis did not store

    async def handle(self, request: Request) -> Response:
        return await self._answer(request, request.path_params["appid"], request.path_params["token"])

    async def direct(self, scope: Scope, receive: Receive, send: Send, appid: str, token: str) -> None:
        """The route as a plain ASGI call: the hot path of ingest, which pays for no router and no middleware.

        What the middleware would add, this does itself: ``nosniff`` on the answer, and for an error
        no row answers the 500 that Starlette's ``ServerErrorMiddleware`` would send, the error raised
        on to the server. A client gone while its body was read is left to the app (nobody to answer).
        """
        scope["path_params"] = {"appid": appid, "token": token}  # as the router sets them
        try:
            response = await self._answer(Request(scope, receive), appid, token)
        except ClientDisconnect:
            raise
        except Exception:
            await send_server_error(send)
            raise
        await send_direct(send, response)

    async def _answer(self, request: Request, appid: str, token: str) -> Response:
        shard = receiver_shard(token)
        # The receiver's one handler: a post pays for no exception middleware.
        try:
            if shard is None or shard >= len(self.shards):
                raise UnknownReceiver(appid)  # known without a look-up: nothing to guard
            ingest = self.shards[shard]
            # The token first: a stranger's post is neither read nor parsed.
            found = await self.guard.check(
                client_address(request), digest(token), lambda: _receiver(ingest, appid, token)
            )
            if not found:
                raise UnknownReceiver(appid)
            body = await read_body(request, ingest.settings.max_body_bytes, strict=True)
            result = await ingest.accept(appid, token, body)
        except ROWS.classes as exc:
            if shard is not None and isinstance(exc, (*STORAGE_ERRORS, LayoutError)):
                self._record_not_stored(shard, appid, exc)
            return refused(exc)
        return json_answer(0, "ok", {"accepted": result.accepted, "duplicates": result.duplicates})

    def _record_not_stored(self, shard: int, appid: str, exc: Exception) -> None:
        if self._not_stored is None:
            # Counted in shard 0's counters: a shard that is down cannot hold the count of its refusals.
            self._not_stored = NotStored(self.shards[0].counts, self.shards[0].keys)
        self._not_stored(shard, appid, exc)


def make_endpoint(ingests: Sequence[Ingest], guard: CredentialGuard) -> Endpoint:
    """The route; ``ingests`` by shard index, ``guard`` the look-ups of tokens."""
    return Endpoint(ingests, guard)


async def _receiver(ingest: Ingest, appid: str, token: str) -> bool | None:
    """True if ``token`` is ``appid``'s receiver token; None if not (the guard's "not valid")."""
    try:
        await ingest.check_receiver(appid, token)
    except UnknownReceiver:
        return None  # the guard's answer, not the post's: it counts the failure, then refuses
    return True


def refused(exc: Exception) -> Response:
    """The answer to a post that was not stored: its row of :data:`ROWS` (the endpoint logs a storage error)."""
    return refusal_response(ROWS.answer(exc))
