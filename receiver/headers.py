"""Headers every answer of the HTTP application carries.

:class:`NoSniff` adds ``X-Content-Type-Options: nosniff`` to every answer
(receiver, gateway, console, health checks, metrics, the OpenAPI document),
so a browser never guesses a type other than the one declared, for instance
running a JSON body as a script. It is pure ASGI: it rewrites only the
``http.response.start`` message and passes bodies through as they stream,
never buffering one. An answer that already names the header (the
rq-dashboard mount sets its own) is left as it is, so the header is never
sent twice.
"""

from __future__ import annotations

from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["NOSNIFF", "NoSniff", "send_direct", "send_server_error"]

NOSNIFF = (b"x-content-type-options", b"nosniff")


async def send_direct(send: Send, response: Response) -> None:
    """What ``await response(scope, receive, send)`` sends behind :class:`NoSniff`, for an answer without a
    background task, built by a hot path that runs without the middleware (the gateway's calls, the posts)."""
    headers = [*response.raw_headers, NOSNIFF]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})


async def send_server_error(send: Send) -> None:
    """The 500 that Starlette's ``ServerErrorMiddleware`` sends for an error no handler answered, on such a path;
    the caller raises the error on to the server, as that middleware does."""
    await send_direct(send, PlainTextResponse("Internal Server Error", status_code=500))


class NoSniff:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == NOSNIFF[0] for name, _ in headers):
                    headers.append(NOSNIFF)
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_header)
