"""The per-instance receiver: where the capability layer posts events.

``POST /svc/receiver/{appid}/{token}``: the token is the instance's secret
part of the URL; a wrong token or an unknown appid answers 404 and stores
nothing; the token is checked before the body is read. The post is stored
by :class:`svcgw.ingest.Ingest` in one script call, and only then answered
200, so every acknowledged event is in Redis.

With several shards, the token names the instance's shard
(:func:`svcgw.receivers.receiver_shard`): the post goes to that shard's
``Ingest``, one script on one shard, with no look-up elsewhere. A token
naming a shard this deployment does not have is no receiver (404).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from redis.exceptions import RedisClusterException, RedisError
from starlette.requests import Request
from starlette.responses import Response

from svcgw import errors
from svcgw.envelope import EnvelopeError
from svcgw.errors import GatewayError
from svcgw.ingest import Ingest, UnknownReceiver
from svcgw.layout import LayoutError
from svcgw.receivers import receiver_shard

from ..http import BadContentLength, BodyTooLarge, json_answer, read_body, refusal_response

__all__ = ["make_endpoint"]

log = logging.getLogger("svcgw.receiver")


def make_endpoint(ingests: Sequence[Ingest]) -> Callable[[Request], Awaitable[Response]]:
    """The route; ``ingests`` by shard index."""
    shards = tuple(ingests)

    async def receive(request: Request) -> Response:
        appid = request.path_params["appid"]
        token = request.path_params["token"]
        shard = receiver_shard(token)
        if shard is None or shard >= len(shards):
            return _refused(UnknownReceiver(appid))
        ingest = shards[shard]
        try:
            # The token first: a stranger's post is neither read nor parsed.
            await ingest.check_receiver(appid, token)
            body = await read_body(request, ingest.settings.max_body_bytes, strict=True)
            result = await ingest.accept(appid, token, body)
        except (BadContentLength, BodyTooLarge, EnvelopeError, UnknownReceiver, RedisError, RedisClusterException) as exc:  # noqa: E501
            return _refused(exc)
        except LayoutError as exc:
            # Not stored, as when Redis fails: the sender posts again once the operator has fixed it.
            log.error("post not stored: %s", exc)
            return _refused(exc)
        return json_answer(0, "ok", {"accepted": result.accepted, "duplicates": result.duplicates})

    return receive


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
    # Redis (or a layout it cannot keep): not stored, so not acknowledged, and the sender must try again.
    response = refusal_response(GatewayError(errors.RECEIVER_UNAVAILABLE))
    response.headers["Retry-After"] = "1"
    return response
