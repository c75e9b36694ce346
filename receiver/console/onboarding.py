"""The console's routes for a new instance by QR login and for the instance actions.

Pages under ``/console`` and the JSON API under ``/console/api``, both over
:class:`receiver.console.qrflow.QrFlow`:

| page | JSON API | what it does |
|---|---|---|
| ``GET/POST /instances/new`` | ``POST /api/instances/new`` | ``device/create`` and the first QR code |
| ``GET /logins/{id}`` | ``GET /api/logins/{id}`` | one poll (``checkQr``); on 2, ``long/start`` |
| ``POST /logins/{id}/code`` | ``POST /api/logins/{id}/code`` | ``submitQrCode`` with the six digits |
| ``POST /logins/{id}/renew`` | ``POST /api/logins/{id}/renew`` | a new code (after a cancel) |
| ``POST /instances/{appid}/relogin`` | same under ``/api`` | ``reconnect`` + a read, else a QR login |
| ``POST /instances/{appid}/qr-login`` | same under ``/api`` | a QR login of the instance (``long/stop`` first) |
| ``POST /instances/{appid}/stop`` / ``start`` | same under ``/api`` | ``long/stop`` / ``long/start`` |
| ``GET/POST /instances/{appid}/logout`` | ``POST /api/instances/{appid}/logout`` | ``login/logout``, confirmed |

Every change needs the session's CSRF token like every other console form
and API change. None is counted against the rate limit here: each gateway
call it makes counts there, as the same call made with a key would.

The login page works without script: it reloads itself (``<meta refresh>``)
every :data:`POLL_SECONDS` while there is something to wait for, and has a
"Check now" link. Polling is a GET because it reads; the one write it can
lead to, ``long/start`` once the phone confirmed, is what the developer
asked for when starting the login, and a cross-site GET carries no session
(the cookie is ``SameSite=Strict``).

A refused step (``FlowError``) keeps its code and message on the page and
in the API's answer: refused by the gateway (quota -40402, -40404, -42900,
...), the gateway's HTTP status, code and message (and ``Retry-After``);
refused by the capability layer, HTTP 200 with its code and a message
naming the operation (a page: 502). The handlers raise it, and an attempt
that is gone (``AttemptGone``), like anything else refused;
``receiver.console.answers`` answers them. The forms that begin a login,
and the login page, show a refusal in the page itself instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .answers import flow_page
from .qrflow import FlowError, Outcome, QrFlow, QrLogin, action_needed
from .requests import parsed_body
from .schemas import MAX_FIELD, CodeRequest, LoginOptions, ReloginRequest, StartRequest
from .session import PATH, Session
from .web import json_ok

if TYPE_CHECKING:
    from .api import Api
    from .pages import Pages

__all__ = ["POLL_SECONDS", "OnboardingApi", "OnboardingPages"]

POLL_SECONDS = 2
CLOSING_POLL_SECONDS = 1

Handler = Callable[[Request, Session], Awaitable[Response]]


def _path(*parts: str) -> str:
    return PATH + "".join("/" + quote(part, safe="") for part in parts)


def _redirect(location: str) -> Response:
    return RedirectResponse(location, status_code=303)


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip()[:MAX_FIELD] if isinstance(value, str) else ""


def refresh_seconds(attempt: QrLogin) -> int | None:
    """How soon the login page reloads itself; None when it waits for the developer."""
    if attempt.stage == "closing":
        return CLOSING_POLL_SECONDS
    if attempt.stage != "qr" or attempt.status in (4, 10):
        return None
    return POLL_SECONDS


# --- JSON API ---------------------------------------------------------------------------------
def _stripped(value: str | None) -> str:
    return (value or "").strip()


class OnboardingApi:
    def __init__(self, api: Api, flow: QrFlow) -> None:
        self.api = api
        self.flow = flow

    async def begin(self, request: Request, session: Session) -> Response:
        body = await parsed_body(request, LoginOptions)
        attempt = await self.flow.begin(
            session.account, proxy=_stripped(body.proxy), callback_url=_stripped(body.callback_url)
        )
        return json_ok(attempt.view(), status=201)

    async def poll(self, request: Request, session: Session) -> Response:
        return json_ok((await self.flow.advance(session.account, request.path_params["attempt"])).view())

    async def code(self, request: Request, session: Session) -> Response:
        code = _stripped((await parsed_body(request, CodeRequest)).code)
        attempt = await self.flow.submit_code(session.account, request.path_params["attempt"], code)
        return json_ok(attempt.view())

    async def renew(self, request: Request, session: Session) -> Response:
        return json_ok((await self.flow.renew(session.account, request.path_params["attempt"])).view())

    async def relogin(self, request: Request, session: Session) -> Response:
        body = await parsed_body(request, ReloginRequest)
        proxy = body.proxy.strip() if body.proxy is not None else None
        attempt = await self.flow.relogin(session.account, request.path_params["appid"], proxy)
        return json_ok({"recovered": attempt is None, "login": attempt.view() if attempt else None})

    async def qr_login(self, request: Request, session: Session) -> Response:
        body = await parsed_body(request, LoginOptions)
        attempt = await self.flow.begin_existing(
            session.account,
            request.path_params["appid"],
            proxy=_stripped(body.proxy),
            callback_url=_stripped(body.callback_url),
        )
        return json_ok(attempt.view(), status=201)

    async def stop(self, request: Request, session: Session) -> Response:
        await self.flow.stop(session.account, request.path_params["appid"])
        return json_ok({"appid": request.path_params["appid"], "stopped": True})

    async def start(self, request: Request, session: Session) -> Response:
        body = await parsed_body(request, StartRequest)
        appid = request.path_params["appid"]
        await self.flow.start(session.account, appid, _stripped(body.callback_url))
        return json_ok({"appid": appid, "started": True})

    async def logout(self, request: Request, session: Session) -> Response:
        await self.flow.logout(session.account, request.path_params["appid"])
        return json_ok({"appid": request.path_params["appid"], "logged_out": True})


# --- pages ---------------------------------------------------------------------------------------
class OnboardingPages:
    def __init__(self, pages: Pages, flow: QrFlow) -> None:
        self.pages = pages
        self.flow = flow
        self.sessions = pages.sessions
        pages.templates.env.globals["action_needed"] = action_needed

    def routes(self) -> list[BaseRoute]:
        page = self.pages._page

        def form(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
            return self.pages._form(handler, counted=False)

        # Before the console's "/instances/{appid}", which would take "new" for an appid.
        return [
            Route("/instances/new", page(self.new_page), methods=["GET"], name="new-instance"),
            Route("/instances/new", form(self.begin), methods=["POST"]),
            Route("/logins/{attempt}", page(self.login_page), methods=["GET"], name="qr-login"),
            Route("/logins/{attempt}/code", form(self.code), methods=["POST"]),
            Route("/logins/{attempt}/renew", form(self.renew), methods=["POST"]),
            Route("/instances/{appid}/relogin", form(self.relogin), methods=["POST"]),
            Route("/instances/{appid}/qr-login", form(self.qr_login), methods=["POST"]),
            Route("/instances/{appid}/stop", form(self.stop), methods=["POST"]),
            Route("/instances/{appid}/start", form(self.start), methods=["POST"]),
            Route("/instances/{appid}/logout", page(self.logout_page), methods=["GET"], name="logout-instance"),
            Route("/instances/{appid}/logout", form(self.logout), methods=["POST"]),
        ]

    async def _refused(
        self, request: Request, session: Session, outcome: Outcome, template: str, **context: Any
    ) -> Response:
        """A refused step shown in the page it was asked from (the error page's words, the form kept)."""
        page = flow_page(outcome)
        response = await self.pages.render(
            request,
            template,
            session,
            status=page.status,
            title=page.title,
            message=page.message,
            **page.context,
            **context,
        )
        response.headers.update(page.headers)
        return response

    # --- a new instance -----------------------------------------------------------------------------
    async def new_page(self, request: Request, session: Session) -> Response:
        default = await self.pages.service.callback(session.account, None)
        return await self.pages.render(
            request, "new_instance.html", session, nav="instances", default_url=default.get("url"), typed={}
        )

    async def begin(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        typed = {"callback_url": _field(form, "callback_url"), "proxy": _field(form, "proxy")}
        try:
            attempt = await self.flow.begin(session.account, proxy=typed["proxy"], callback_url=typed["callback_url"])
        except FlowError as exc:  # the form again, with what was typed and the refusal
            default = await self.pages.service.callback(session.account, None)
            return await self._refused(
                request, session, exc.outcome, "new_instance.html", default_url=default.get("url"), typed=typed
            )
        return _redirect(_path("logins", attempt.id))

    # --- the login -------------------------------------------------------------------------------------
    async def login_page(self, request: Request, session: Session) -> Response:
        attempt_id = request.path_params["attempt"]
        try:
            attempt = await self.flow.advance(session.account, attempt_id)
        except FlowError as exc:  # the login page still, with the refusal in it
            attempt = await self.flow.get(session.account, attempt_id)
            return await self._refused(request, session, exc.outcome, "qr_login.html", attempt=attempt, refresh=None)
        if attempt.stage == "done":
            await self.sessions.flash(
                session,
                {"kind": "ok", "text": "Logged in, and the long connection is started: events of this instance flow."},
            )
            return _redirect(_path("instances", attempt.appid))
        return await self.pages.render(
            request, "qr_login.html", session, nav="instances", attempt=attempt, refresh=refresh_seconds(attempt)
        )

    async def code(self, request: Request, session: Session) -> Response:
        code = _field(request.state.form, "code")
        return await self._login_step(
            request, session, lambda attempt: self.flow.submit_code(session.account, attempt, code)
        )

    async def renew(self, request: Request, session: Session) -> Response:
        return await self._login_step(request, session, lambda attempt: self.flow.renew(session.account, attempt))

    async def _login_step(
        self, request: Request, session: Session, step: Callable[[str], Awaitable[QrLogin]]
    ) -> Response:
        """A form of the login page: the step, then back to the page, which shows how it went."""
        attempt_id = request.path_params["attempt"]
        try:
            await step(attempt_id)
        except FlowError:
            pass  # not answered here: kept on the attempt, and the login page shows it
        return _redirect(_path("logins", attempt_id))

    # --- instance actions -------------------------------------------------------------------------------
    async def relogin(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        proxy = _field(request.state.form, "proxy") or None
        attempt = await self.flow.relogin(session.account, appid, proxy)
        if attempt is None:
            await self.sessions.flash(
                session, {"kind": "ok", "text": "Re-logged in without a scan: the connection answers again."}
            )
            return _redirect(_path("instances", appid))
        await self.sessions.flash(
            session,
            {"kind": "warn", "text": "Reconnecting did not bring the connection back: scan a new code to log in."},
        )
        return _redirect(_path("logins", attempt.id))

    async def qr_login(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        form: FormData = request.state.form
        attempt = await self.flow.begin_existing(
            session.account, appid, proxy=_field(form, "proxy"), callback_url=_field(form, "callback_url")
        )
        return _redirect(_path("logins", attempt.id))

    async def stop(self, request: Request, session: Session) -> Response:
        return await self._action(request, session, "Long connection stopped; the service no longer probes it.")

    async def start(self, request: Request, session: Session) -> Response:
        return await self._action(request, session, "Long connection started; the service keeps it up.")

    async def logout(self, request: Request, session: Session) -> Response:
        return await self._action(request, session, "Logged out: the session key is destroyed; log in with a QR scan.")

    async def _action(self, request: Request, session: Session, done: str) -> Response:
        appid = request.path_params["appid"]
        name = request.url.path.rsplit("/", 1)[1]
        if name == "stop":
            await self.flow.stop(session.account, appid)
        elif name == "start":
            await self.flow.start(session.account, appid, _field(request.state.form, "callback_url"))
        else:
            await self.flow.logout(session.account, appid)
        await self.sessions.flash(session, {"kind": "ok", "text": done})
        return _redirect(_path("instances", appid))

    async def logout_page(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        instance = await self.pages.service.instance(session.account, appid)
        return await self.pages.render(
            request, "logout_instance.html", session, nav="instances", instance=instance, appid=appid
        )
