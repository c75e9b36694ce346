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
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request
from starlette.responses import Response

from svcgw import errors
from svcgw.digests import digest
from svcgw.errors import STORAGE_ERRORS, GatewayError, Refusal, Rows
from svcgw.intake.envelope import EnvelopeError
from svcgw.intake.ingest import Ingest, UnknownReceiver
from svcgw.intake.receivers import receiver_shard
from svcgw.storage.layoutversion import LayoutError

from ..credentialguard import CredentialGuard, Throttled
from ..http import BadContentLength, BodyTooLarge, client_address, json_answer, read_body, refusal_response

__all__ = ["ROWS", "make_endpoint", "refused"]

log = logging.getLogger("svcgw.receiver")

_AGAIN = {"Retry-After": "1"}

# The receiver's table: each error a post can meet, and the row it is answered with.
ROWS: Rows[Refusal] = Rows(
    {
        BadContentLength: lambda exc: GatewayError(errors.RECEIVER_BAD_BODY, str(exc)),
        BodyTooLarge: lambda exc: GatewayError(errors.RECEIVER_TOO_LARGE, str(exc)),
        EnvelopeError: lambda exc: GatewayError(errors.receiver_kind(exc.status), str(exc)),
        UnknownReceiver: lambda exc: GatewayError(errors.RECEIVER_NOT_FOUND),
        Throttled: lambda exc: GatewayError(errors.RECEIVER_LIMITED, headers={"Retry-After": str(exc.retry_after)}),
        # Not stored, so not acknowledged: the sender must post again.
        (*STORAGE_ERRORS, LayoutError): lambda exc: GatewayError(errors.RECEIVER_UNAVAILABLE, headers=_AGAIN),
    }
)


def make_endpoint(ingests: Sequence[Ingest], guard: CredentialGuard) -> Callable[[Request], Awaitable[Response]]:
    """The route; ``ingests`` by shard index, ``guard`` the look-ups of tokens."""
    shards = tuple(ingests)

    async def receive(request: Request) -> Response:
        appid = request.path_params["appid"]
        token = request.path_params["token"]
        shard = receiver_shard(token)
        # The receiver's one handler, on the route itself: a post pays for no exception middleware.
        try:
            if shard is None or shard >= len(shards):
                raise UnknownReceiver(appid)  # known without a look-up: nothing to guard
            ingest = shards[shard]
            # The token first: a stranger's post is neither read nor parsed.
            if not await guard.check(client_address(request), digest(token), lambda: _receiver(ingest, appid, token)):
                raise UnknownReceiver(appid)
            body = await read_body(request, ingest.settings.max_body_bytes, strict=True)
            result = await ingest.accept(appid, token, body)
        except ROWS.classes as exc:
            return refused(exc)
        return json_answer(0, "ok", {"accepted": result.accepted, "duplicates": result.duplicates})

    return receive


async def _receiver(ingest: Ingest, appid: str, token: str) -> bool | None:
    """True if ``token`` is ``appid``'s receiver token; None if not (the guard's "not valid")."""
    try:
        await ingest.check_receiver(appid, token)
    except UnknownReceiver:
        return None  # the guard's answer, not the post's: it counts the failure, then refuses
    return True


def refused(exc: Exception) -> Response:
    """The answer to a post that was not stored: its row of :data:`ROWS`."""
    if isinstance(exc, LayoutError):
        # Not stored, as when Redis fails: the sender posts again once the operator has fixed it.
        log.error("post not stored: %s", exc)
    return refusal_response(ROWS.answer(exc))
