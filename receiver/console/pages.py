"""The console's server-rendered pages under ``/console``.

Plain HTML forms, no script: every change is a POST carrying the session's
CSRF token, answered with a redirect (post/redirect/get) and a one-time
message on the next page. A page that finds no session sends the browser to
the sign-in page.

Every form but signing out counts against the account's rate limit, shared
with the gateway (``receiver.console.web``); over it, the answer is an error
page with status 429, ``Retry-After`` and the wait in words.

Every page, the sign-in page included, is sent with :data:`PAGE_HEADERS`: a
Content-Security-Policy that allows only the console's own stylesheet (the
console has no script), no framing, and no caching.

Modules: :mod:`.pageserving` (rendering, guards), :mod:`.history` (the
callback log, dead letters and deliveries) and this one (the routes, signing
out, instances, callback settings and controlled operations). A handler
raises what it cannot do; the error pages are ``receiver.console.answers``'s.
A form refused for what was typed in it is shown again, with the reason.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from svcgw.callbacks.addresses import AddressError
from svcgw.errors import Invalid

from .history import HistoryPages
from .pageserving import CONTENT_SECURITY_POLICY as CONTENT_SECURITY_POLICY
from .pageserving import HERE
from .pageserving import PAGE_HEADERS as PAGE_HEADERS
from .pageserving import PageError as PageError
from .pageserving import _field as _field
from .pageserving import _path as _path
from .pageserving import _redirect as _redirect
from .pageserving import _safe_next as _safe_next
from .service import DeniedByOperator
from .session import Session

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_HEADERS", "PageError", "Pages"]


class Pages(HistoryPages):
    def routes(self) -> list[BaseRoute]:
        page, form = self._page, self._form
        return [
            Route("/", self.index, methods=["GET"], name="index"),
            Route("/login", self.login_page, methods=["GET"], name="login"),
            Route("/logout", form(self.logout, counted=False), methods=["POST"], name="logout"),
            Route("/instances", page(self.instances), methods=["GET"], name="instances"),
            Route("/instances/{appid}", page(self.instance), methods=["GET"], name="instance"),
            Route("/instances/{appid}/callback", form(self.save_callback), methods=["POST"]),
            Route("/instances/{appid}/rotate-secret", form(self.rotate), methods=["POST"]),
            Route("/instances/{appid}/log", page(self.log), methods=["GET"], name="log"),
            Route("/settings", page(self.settings), methods=["GET"], name="settings"),
            Route("/settings/callback", form(self.save_callback), methods=["POST"]),
            Route("/settings/rotate-secret", form(self.rotate), methods=["POST"]),
            Route("/dead-letters", page(self.dead_letters), methods=["GET"], name="dead-letters"),
            Route("/dead-letters/replay", form(self.replay), methods=["POST"]),
            Route("/dead-letters/{delivery_id}", page(self.dead_letter), methods=["GET"], name="dead-letter"),
            Route("/instances/{appid}/deliveries", page(self.deliveries), methods=["GET"], name="deliveries"),
            Route("/deliveries/{delivery_id}", page(self.delivery), methods=["GET"], name="delivery"),
            Route("/deliveries/{delivery_id}/retry", form(self.retry_now), methods=["POST"]),
            Route("/operations", page(self.operations), methods=["GET"], name="operations"),
            Route("/operations/deny", form(self.deny), methods=["POST"]),
            Route("/operations/allow", form(self.allow), methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]

    # --- signing in (the form's handler: receiver.console.account) and out ----------------------
    async def index(self, request: Request) -> Response:
        session = await self._session(request)
        return _redirect(_path("instances") if session else _path("login"))

    async def login_page(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        return self.public_page(
            request, "login.html", status, error=error, next=_safe_next(request.query_params.get("next"))
        )

    async def logout(self, request: Request, session: Session) -> Response:
        await self.sessions.end(session)
        response = _redirect(_path("login"))
        self.sessions.clear_cookie(request, response)
        return response

    # --- instances -------------------------------------------------------------------------
    async def instances(self, request: Request, session: Session) -> Response:
        rows = await self.service.instances(session.account)
        return await self.render(request, "instances.html", session, nav="instances", instances=rows)

    async def instance(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        data = await self.service.instance(session.account, appid)
        callback = await self.service.callback(session.account, appid)
        return await self.render(
            request, "instance.html", session, nav="instances", instance=data, callback=callback, appid=appid
        )

    async def settings(self, request: Request, session: Session) -> Response:
        callback = await self.service.callback(session.account, None)
        return await self.render(request, "settings.html", session, nav="settings", callback=callback, appid=None)

    # --- callback settings ---------------------------------------------------------------------
    def _back(self, appid: str | None) -> str:
        return _path("instances", appid) if appid else _path("settings")

    async def save_callback(self, request: Request, session: Session) -> Response:
        appid = request.path_params.get("appid")
        form: FormData = request.state.form
        url = _field(form, "url")
        token = _field(form, "bearer_token")
        bearer = _field(form, "bearer") == "on"
        keep_token = _field(form, "keep_token") == "on"
        try:
            result = await self.service.save_callback(
                session.account, appid, url, bearer_token=token, bearer=bearer, keep_token=keep_token
            )
        except AddressError as exc:  # the form again, with the address typed and why it is refused
            callback = await self.service.callback(session.account, appid)
            context: dict[str, Any] = {"callback": callback, "appid": appid, "typed_url": url}
            context["address_error"] = {"code": exc.code, "message": exc.message}
            if appid:
                context["instance"] = await self.service.instance(session.account, appid)
                return await self.render(request, "instance.html", session, status=400, nav="instances", **context)
            return await self.render(request, "settings.html", session, status=400, nav="settings", **context)
        message: dict[str, object]
        if result.test is None:
            message = {"kind": "info", "text": "Callback address removed (and its Bearer token with it)."}
        else:
            message = {
                "kind": "ok" if result.test.ok else "warn",
                "text": "Callback settings saved.",
                "test": result.test.as_dict(),
            }
        await self.sessions.flash(session, message)
        return _redirect(self._back(appid))

    async def rotate(self, request: Request, session: Session) -> Response:
        appid = request.path_params.get("appid")
        await self.service.rotate_secret(session.account, appid)
        await self.sessions.flash(
            session,
            {
                "kind": "ok",
                "text": "New signing secret in use. Pending retries are signed with it; the old one is gone.",
            },
        )
        return _redirect(self._back(appid))

    # --- controlled operations --------------------------------------------------------------------
    async def operations(
        self, request: Request, session: Session, error: str | None = None, *, status: int = 400
    ) -> Response:
        denied = await self.service.denied(session.account)
        return await self.render(
            request,
            "operations.html",
            session,
            status=status if error else 200,
            nav="operations",
            own=denied["own"],
            by_operator=denied["by_operator"],
            operator_lower={op.lower() for op in denied["by_operator"]},
            error=error,
        )

    async def deny(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        operations = [op.strip() for op in _field(form, "operations").replace(",", "\n").splitlines() if op.strip()]
        try:
            await self.service.deny(session.account, operations)
        except Invalid as exc:  # the form again, with the reason
            return await self.operations(request, session, str(exc))
        await self.sessions.flash(session, {"kind": "ok", "text": f"Denied: {', '.join(operations)}."})
        return _redirect(_path("operations"))

    async def allow(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        operation = _field(form, "operation")
        try:
            await self.service.allow(session.account, [operation])
        except Invalid as exc:  # the form again, with the reason
            return await self.operations(request, session, str(exc))
        except DeniedByOperator as exc:
            return await self.operations(request, session, str(exc), status=403)
        await self.sessions.flash(session, {"kind": "ok", "text": f"Allowed again: {operation}."})
        return _redirect(_path("operations"))
