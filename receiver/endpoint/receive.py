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

from redis.exceptions import RedisClusterException, RedisError
from starlette.requests import Request
from starlette.responses import Response

from svcgw import errors
from svcgw.digests import digest
from svcgw.errors import GatewayError
from svcgw.intake.envelope import EnvelopeError
from svcgw.intake.ingest import Ingest, UnknownReceiver
from svcgw.intake.receivers import receiver_shard
from svcgw.storage.layoutversion import LayoutError

from ..credentialguard import CredentialGuard, Throttled
from ..http import BadContentLength, BodyTooLarge, client_address, json_answer, read_body, refusal_response

__all__ = ["make_endpoint"]

log = logging.getLogger("svcgw.receiver")


def make_endpoint(ingests: Sequence[Ingest], guard: CredentialGuard) -> Callable[[Request], Awaitable[Response]]:
    """The route; ``ingests`` by shard index, ``guard`` the look-ups of tokens."""
    shards = tuple(ingests)

    async def receive(request: Request) -> Response:
        appid = request.path_params["appid"]
        token = request.path_params["token"]
        shard = receiver_shard(token)
        if shard is None or shard >= len(shards):
            return _refused(UnknownReceiver(appid))  # known without a look-up: nothing to guard
        ingest = shards[shard]
        try:
            # The token first: a stranger's post is neither read nor parsed.
            if not await guard.check(client_address(request), digest(token), lambda: _receiver(ingest, appid, token)):
                raise UnknownReceiver(appid)
            body = await read_body(request, ingest.settings.max_body_bytes, strict=True)
            result = await ingest.accept(appid, token, body)
        except (
            BadContentLength, BodyTooLarge, EnvelopeError, UnknownReceiver, Throttled, RedisError, RedisClusterException
        ) as exc:  # fmt: skip
            return _refused(exc)
        except LayoutError as exc:
            # Not stored, as when Redis fails: the sender posts again once the operator has fixed it.
            log.error("post not stored: %s", exc)
            return _refused(exc)
        return json_answer(0, "ok", {"accepted": result.accepted, "duplicates": result.duplicates})

    return receive


async def _receiver(ingest: Ingest, appid: str, token: str) -> bool | None:
    """True if ``token`` is ``appid``'s receiver token; None if not (the guard's "not valid")."""
    try:
        await ingest.check_receiver(appid, token)
    except UnknownReceiver:
        return None
    return True


def _refused(exc: Exception) -> Response:
    """The answer to a post that was not stored: the receiver's rows of the table."""
    if isinstance(exc, BadContentLength):
        return refusal_response(GatewayError(errors.RECEIVER_BAD_BODY, str(exc)))
    if isinstance(exc, BodyTooLarge):
        return refusal_response(GatewayError(errors.RECEIVER_TOO_LARGE, str(exc)))
    if isinstance(exc, EnvelopeError):
        return refusal_response(GatewayError(errors.receiver_kind(exc.status), str(exc)))
    if isinstance(exc, UnknownReceiver):
        return refusal_response(GatewayError(errors.RECEIVER_NOT_FOUND))
    if isinstance(exc, Throttled):
        return refusal_response(GatewayError(errors.RECEIVER_LIMITED, headers={"Retry-After": str(exc.retry_after)}))
    # Redis (or a layout it cannot keep): not stored, so not acknowledged, and the sender must try again.
    response = refusal_response(GatewayError(errors.RECEIVER_UNAVAILABLE))
    response.headers["Retry-After"] = "1"
    return response
