"""The per-instance receiver: where the capability layer posts events.

``POST /svc/receiver/{appid}/{token}``: the token is the instance's secret
part of the URL; a wrong token or an unknown appid answers 404 and stores
nothing; the token is checked before the body is read. The post is stored
by :class:`svcgw.ingest.Ingest` in one script call, and only then answered
200, so every acknowledged event is in Redis.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import Response

from svcgw.envelope import EnvelopeError
from svcgw.ingest import Ingest, UnknownReceiver

__all__ = ["make_endpoint"]


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing (413) before reading more than ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise EnvelopeError("invalid Content-Length") from None
        if size > limit:
            raise EnvelopeError(f"the body is larger than {limit} bytes", status=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise EnvelopeError(f"the body is larger than {limit} bytes", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


def json_response(status: int, code: int, message: str, data: object = None) -> Response:
    return Response(
        orjson.dumps({"code": code, "message": message, "data": data}),
        status_code=status,
        media_type="application/json",
    )


def make_endpoint(ingest: Ingest) -> Callable[[Request], Awaitable[Response]]:
    async def receive(request: Request) -> Response:
        appid = request.path_params["appid"]
        token = request.path_params["token"]
        try:
            # The token first: a stranger's post is neither read nor parsed.
            await ingest.check_receiver(appid, token)
            body = await read_body(request, ingest.settings.max_body_bytes)
            result = await ingest.accept(appid, token, body)
        except EnvelopeError as exc:
            return json_response(exc.status, -exc.status, str(exc))
        except UnknownReceiver:
            return json_response(404, -404, "no such receiver")
        except RedisError:
            # Not stored, so not acknowledged: the sender must try again.
            response = json_response(503, -50002, "storage temporarily unavailable, retry later")
            response.headers["Retry-After"] = "1"
            return response
        return json_response(
            200, 0, "ok", {"accepted": result.accepted, "duplicates": result.duplicates}
        )

    return receive
