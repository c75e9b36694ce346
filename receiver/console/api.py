"""The console's JSON API under ``/console/api``: everything the pages show and do.

Every answer is ``{code, message, data}`` (``code`` 0 on success; a handler
raises, and ``receiver.console.answers`` answers every error of the mount).
Requests are made by the signed-in account: a session cookie (changes then
need the ``X-CSRF-Token`` header) or the API key itself in ``Svc-Key`` /
``X-Svc-Key`` / ``Authorization: Bearer``, with the gateway's meaning
(``receiver.http.presented_key``: different keys in several headers are
401). Every change but signing out counts against the account's rate limit,
shared with the gateway (``receiver.console.web``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from receiver.console import codes as console_codes
from svcgw.intake.calllog import parse_since

from .requests import parsed_body
from .schemas import CallbackRequest, OperationsRequest, ReplayRequest
from .session import Session
from .web import ConsoleHTTPError, Context, int_param, json_ok

if TYPE_CHECKING:
    from ..apispec import RouteEndpoint
    from .consoleroute import ConsoleRoute

__all__ = ["Api"]


Handler = Callable[[Request, Session], Awaitable[Response]]




class Api:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.service = context.service
        self.sessions = context.sessions

    # --- the endpoint of each declared route (receiver.console.routes) --------------------
    def endpoint(self, item: ConsoleRoute, handler: Callable[..., Awaitable[Response]]) -> RouteEndpoint:
        """``handler`` for a signed-in caller, checked and counted as ``item`` says; signing in, as it is."""
        if not item.signed_in:
            return handler
        signed_in: Handler = handler
        change, counted = item.change, item.counted

        async def endpoint(request: Request) -> Response:
            session = await self.context.api_session(request, change=change)
            if counted:
                await self.context.count_change(session)
            return await signed_in(request, session)

        return endpoint

    # --- session (signing in: receiver.console.account) ---------------------------------------
    async def whoami(self, request: Request, session: Session) -> Response:
        return json_ok({"account": session.account, "csrf_token": None if session.direct else session.csrf})

    async def sign_out(self, request: Request, session: Session) -> Response:
        await self.sessions.end(session)
        response = json_ok({"signed_out": True})
        self.sessions.clear_cookie(request, response)
        return response

    # --- instances ---------------------------------------------------------------------
    async def instances(self, request: Request, session: Session) -> Response:
        return json_ok(await self.service.instances(session.account))

    async def instance(self, request: Request, session: Session) -> Response:
        return json_ok(await self.service.instance(session.account, request.path_params["appid"]))

    # --- callback settings ---------------------------------------------------------------
    async def get_callback(self, request: Request, session: Session) -> Response:
        return json_ok(await self.service.callback(session.account, request.path_params.get("appid")))

    async def put_callback(self, request: Request, session: Session) -> Response:
        appid = request.path_params.get("appid")
        if appid is not None:
            # Ownership before the body: another account's appid answers 404 whatever is sent.
            await self.service.check_owner(session.account, appid)
        body = await parsed_body(request, CallbackRequest)
        result = await self.service.save_callback(
            session.account,
            appid,
            body.url,
            bearer_token=body.bearer_token or "",
            bearer=body.bearer,
            keep_token=body.keep_token is True,
        )
        return json_ok(result.as_dict())

    async def rotate(self, request: Request, session: Session) -> Response:
        return json_ok(await self.service.rotate_secret(session.account, request.path_params.get("appid")))

    # --- callback log ----------------------------------------------------------------------
    async def log(self, request: Request, session: Session) -> Response:
        limit = int_param(request, "limit", 20, minimum=1, maximum=200)
        before = request.query_params.get("before") or None
        entries, following = await self.service.log(
            session.account, request.path_params["appid"], limit=limit, before=before
        )
        return json_ok({"entries": [entry.as_dict() for entry in entries], "next_before": following})

    # --- dead letters ------------------------------------------------------------------------
    async def dead_letters(self, request: Request, session: Session) -> Response:
        limit = int_param(request, "limit", 20, minimum=1, maximum=200)
        offset = int_param(request, "offset", 0, minimum=0, maximum=1_000_000)
        appid = request.query_params.get("appid") or None
        destination = request.query_params.get("destination") or None
        rows, total = await self.service.dead_letters(
            session.account, appid, limit=limit, offset=offset, destination=destination
        )
        return json_ok({"dead_letters": rows, "total": total, "limit": limit, "offset": offset})

    async def dead_letter(self, request: Request, session: Session) -> Response:
        return json_ok(await self.service.dead_letter(session.account, request.path_params["delivery_id"]))

    async def replay(self, request: Request, session: Session) -> Response:
        body = await parsed_body(request, ReplayRequest)
        ids = body.ids if body.ids is not UNSET else None
        appid = body.appid or None
        since = body.since or None
        try:
            since_seconds = parse_since(since) if since is not None else None
        except ValueError as exc:
            raise ConsoleHTTPError(console_codes.BAD_REQUEST, f"since: {exc}") from None
        results = await self.service.replay(session.account, ids=ids, appid=appid, since_seconds=since_seconds)
        replayed = sum(1 for result in results if result["status"] == "replayed")
        return json_ok({"results": results, "replayed": replayed})

    # --- deliveries ------------------------------------------------------------------------------
    async def deliveries(self, request: Request, session: Session) -> Response:
        params = request.query_params
        page = await self.service.deliveries(
            session.account,
            request.path_params["appid"],
            state=params.get("state") or None,
            event_type=params.get("event_type") or None,
            event_id=params.get("event_id") or None,
            destination=params.get("destination") or None,
            limit=int_param(request, "limit", 20, minimum=1, maximum=200),
            before=params.get("before") or None,
        )
        return json_ok(page.as_dict())

    async def delivery(self, request: Request, session: Session) -> Response:
        found = await self.service.delivery(session.account, request.path_params["delivery_id"])
        return json_ok(found.as_dict())

    async def retry_now(self, request: Request, session: Session) -> Response:
        found = await self.service.retry_now(session.account, request.path_params["delivery_id"])
        return json_ok(found.as_dict())

    async def failing(self, request: Request, session: Session) -> Response:
        appid = request.query_params.get("appid") or None
        if appid is not None:
            await self.service.check_owner(session.account, appid)
        return json_ok({"failing": await self.service.failing(session.account, appid)})

    async def probing(self, request: Request, session: Session) -> Response:
        appid = request.query_params.get("appid") or None
        if appid is not None:
            await self.service.check_owner(session.account, appid)
        return json_ok({"probing": await self.service.probing(session.account, appid)})

    # --- controlled operations ------------------------------------------------------------------
    # ``denied`` is every operation the gateway refuses; ``own`` is the list
    # these calls change, ``by_operator`` the operator's, read-only here.
    async def operations(self, request: Request, session: Session) -> Response:
        return json_ok(await self.service.denied(session.account))

    async def deny(self, request: Request, session: Session) -> Response:
        body = await parsed_body(request, OperationsRequest)
        return json_ok(await self.service.deny(session.account, body.operations))

    async def allow(self, request: Request, session: Session) -> Response:
        body = await parsed_body(request, OperationsRequest)
        return json_ok(await self.service.allow(session.account, body.operations))
