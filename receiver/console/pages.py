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
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from redis.exceptions import RedisError
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from svcgw.addresses import AddressError
from svcgw.calllog import parse_since
from svcgw.deliverylist import STATES

from .service import DeniedByOperator, Invalid, NotFound, NotRetrying, when
from .session import CSRF_FIELD, PATH, Session
from .web import Context, RateLimited

__all__ = ["Pages"]

log = logging.getLogger("svcgw.console")

HERE = Path(__file__).parent
PAGE_SIZE = 20

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
}

Handler = Callable[[Request, Session], Awaitable[Response]]


class PageError(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


def _path(*parts: str) -> str:
    return PATH + "".join("/" + quote(part, safe="") for part in parts)


def _redirect(location: str) -> Response:
    return RedirectResponse(location, status_code=303)


class Pages:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.service = context.service
        self.sessions = context.sessions
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["when"] = when
        self.templates.env.globals["path"] = _path

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

    # --- rendering ---------------------------------------------------------------------
    async def render(
        self, request: Request, template: str, session: Session | None, status: int = 200, **context: Any
    ) -> Response:
        flash = await self.sessions.take_flash(session) if session is not None else None
        failing: list[dict[str, Any]] = []
        if session is not None:
            try:
                failing = await self.service.failing(session.account)
            except RedisError:
                pass  # the banner is the one thing a page can do without
        response = self.templates.TemplateResponse(
            request,
            template,
            {
                "session": session,
                "csrf_token": session.csrf if session else "",
                "flash": flash,
                "failing": failing,
                **context,
            },
            status_code=status,
        )
        response.headers.update(PAGE_HEADERS)
        return response

    def _page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = await self._session(request)
            if session is None:
                return _redirect(_path("login") + "?" + urlencode({"next": request.url.path}))
            return await self._guarded(request, session, handler)

        return endpoint

    def _form(self, handler: Handler, *, counted: bool = True) -> Callable[[Request], Awaitable[Response]]:
        """A change made with a form; ``counted``: it counts against the account's rate limit."""

        async def endpoint(request: Request) -> Response:
            session = await self._session(request)
            if session is None:
                return _redirect(_path("login"))
            form = await request.form(max_files=0, max_fields=1100)
            request.state.form = form
            if not session.csrf_ok(_field(form, CSRF_FIELD)):
                return await self.render(
                    request,
                    "error.html",
                    session,
                    status=403,
                    title="Request refused",
                    message="The form's security token is missing or out of date. Reload the page and try again.",
                )
            if counted:
                try:
                    await self.context.count_change(session)
                except RateLimited as exc:
                    return await self._rate_limited(request, session, exc.retry_after)
                except RedisError as exc:
                    return await self._storage_error(request, session, exc)
            return await self._guarded(request, session, handler)

        return endpoint

    async def _rate_limited(self, request: Request, session: Session, retry_after: int) -> Response:
        seconds = f"{retry_after} second{'s' if retry_after != 1 else ''}"
        response = await self.render(
            request,
            "error.html",
            session,
            status=429,
            title="Too many changes",
            message=(
                "This account has used up its rate limit (console changes and gateway calls count together). "
                f"Nothing was changed. Try again in {seconds}."
            ),
        )
        response.headers["Retry-After"] = str(retry_after)
        return response

    async def _session(self, request: Request) -> Session | None:
        try:
            return await self.sessions.from_cookie(request)
        except RedisError:
            return None

    async def _guarded(self, request: Request, session: Session, handler: Handler) -> Response:
        try:
            return await handler(request, session)
        except (NotFound, PageError) as exc:
            status, title = (exc.status, exc.title) if isinstance(exc, PageError) else (404, "Not found")
            message = exc.message if isinstance(exc, PageError) else "There is nothing here for your account."
            return await self.render(request, "error.html", session, status=status, title=title, message=message)
        except RedisError as exc:
            return await self._storage_error(request, session, exc)

    async def _storage_error(self, request: Request, session: Session, exc: RedisError) -> Response:
        log.warning("console storage error: %s", type(exc).__name__)
        return await self.render(
            request,
            "error.html",
            session,
            status=503,
            title="Storage unavailable",
            message="The service's storage cannot be reached right now. Try again in a moment.",
        )

    # --- signing in (the form's handler: receiver.console.account) and out ----------------------
    async def index(self, request: Request) -> Response:
        session = await self._session(request)
        return _redirect(_path("instances") if session else _path("login"))

    async def login_page(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        return self.public_page(
            request, "login.html", status, error=error, next=_safe_next(request.query_params.get("next"))
        )

    def public_page(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        """A page for someone not signed in; its forms carry the sign-in form's CSRF token."""
        token, fresh = self.sessions.login_token(request)
        response = self.templates.TemplateResponse(
            request, template, {"session": None, "csrf_token": token, **context}, status_code=status
        )
        response.headers.update(PAGE_HEADERS)
        if fresh:
            self.sessions.set_login_cookie(request, response, token)
        return response

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
        except AddressError as exc:
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

    # --- callback log ---------------------------------------------------------------------------
    async def log(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        before = request.query_params.get("before") or None
        try:
            entries, following = await self.service.log(session.account, appid, limit=PAGE_SIZE, before=before)
        except Invalid as exc:
            raise PageError(400, "Bad page", str(exc)) from None
        rows = []
        for entry in entries:
            try:
                body, binary = entry.body.decode("utf-8"), False
            except UnicodeDecodeError:
                body, binary = entry.body.decode("utf-8", "replace"), True
            rows.append({"entry": entry, "body": body, "binary": binary})
        return await self.render(
            request,
            "log.html",
            session,
            nav="instances",
            appid=appid,
            rows=rows,
            next_before=following,
            first_page=before is None,
        )

    # --- dead letters ---------------------------------------------------------------------------
    async def dead_letters(self, request: Request, session: Session) -> Response:
        appid = request.query_params.get("appid") or None
        try:
            page = max(int(request.query_params.get("page", "1")), 1)
        except ValueError:
            page = 1
        rows, total = await self.service.dead_letters(
            session.account, appid, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE, detailed=True
        )
        appids = await self.service.store.instances_of(session.account)
        return await self.render(
            request,
            "dead_letters.html",
            session,
            nav="dead-letters",
            appid=appid,
            appids=appids,
            rows=rows,
            total=total,
            page=page,
            pages=max((total + PAGE_SIZE - 1) // PAGE_SIZE, 1),
        )

    async def dead_letter(self, request: Request, session: Session) -> Response:
        letter = await self.service.dead_letter(session.account, request.path_params["delivery_id"])
        return await self.render(request, "dead_letter.html", session, nav="dead-letters", letter=letter)

    async def replay(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        one = _field(form, "one")
        ids = [one] if one else [value for value in form.getlist("ids") if isinstance(value, str) and value]
        appid = _field(form, "appid") or None
        every = not one and _field(form, "scope") == "all"
        back = _path("dead-letters") + (f"?{urlencode({'appid': appid})}" if appid else "")
        if _field(form, "scope") == "since":
            return await self._replay_since(session, appid, _field(form, "since"), back)
        if every and appid is None:
            raise PageError(400, "Choose an instance", "Replaying all dead letters works one instance at a time.")
        if not every and not ids:
            await self.sessions.flash(session, {"kind": "warn", "text": "Select at least one dead letter to replay."})
            return _redirect(back)
        try:
            results = await self.service.replay(
                session.account, ids=None if every else ids, appid=appid if every else None
            )
        except Invalid as exc:
            raise PageError(400, "Cannot replay", str(exc)) from None
        replayed = sum(1 for result in results if result["status"] == "replayed")
        missed = len(results) - replayed
        text = f"{replayed} dead letter{'s' if replayed != 1 else ''} queued for one fresh attempt."
        if missed:
            text += f" {missed} could not be replayed (already replayed, expired or not found)."
        await self.sessions.flash(session, {"kind": "ok" if replayed and not missed else "warn", "text": text})
        return _redirect(back)

    async def _replay_since(self, session: Session, appid: str | None, since: str, back: str) -> Response:
        try:
            seconds = parse_since(since)
        except ValueError as exc:
            raise PageError(400, "Cannot replay", f"Since when? {exc}.") from None
        results = await self.service.replay(session.account, appid=appid, since_seconds=seconds)
        replayed = sum(1 for result in results if result["status"] == "replayed")
        where = "of this instance" if appid else "of your instances"
        text = (
            f"{replayed} dead letter{'s' if replayed != 1 else ''} {where} that died in the last {since.strip()} "
            "queued for one fresh attempt."
        )
        missed = len(results) - replayed
        if missed:
            text += f" {missed} could not be replayed (already replayed or expired)."
        await self.sessions.flash(session, {"kind": "ok" if not missed else "warn", "text": text})
        return _redirect(back)

    # --- deliveries ---------------------------------------------------------------------------------
    async def deliveries(self, request: Request, session: Session) -> Response:
        appid = request.path_params["appid"]
        params = request.query_params
        state = params.get("state") or None
        event_type = (params.get("event_type") or "").strip() or None
        event_id = (params.get("event_id") or "").strip() or None
        before = params.get("before") or None
        try:
            page = await self.service.deliveries(
                session.account,
                appid,
                state=state,
                event_type=event_type,
                event_id=event_id,
                limit=PAGE_SIZE,
                before=before,
            )
        except Invalid as exc:
            raise PageError(400, "Bad filter", str(exc)) from None
        filters = {"state": state or "", "event_type": event_type or "", "event_id": event_id or ""}
        return await self.render(
            request,
            "deliveries.html",
            session,
            nav="instances",
            appid=appid,
            page=page,
            states=STATES,
            retention=_duration(self.context.settings.log_retention),
            filters=filters,
            first_page=before is None,
            older=urlencode({**filters, "before": page.next_before}) if page.next_before else None,
            newest=urlencode({k: v for k, v in filters.items() if v}),
        )

    async def delivery(self, request: Request, session: Session) -> Response:
        found = await self.service.delivery(session.account, request.path_params["delivery_id"])
        return await self.render(request, "delivery.html", session, nav="instances", delivery=found)

    async def retry_now(self, request: Request, session: Session) -> Response:
        delivery_id = request.path_params["delivery_id"]
        form: FormData = request.state.form
        try:
            await self.service.retry_now(session.account, delivery_id)
        except NotRetrying as exc:
            await self.sessions.flash(session, {"kind": "warn", "text": f"Not retried: {exc}."})
        else:
            await self.sessions.flash(
                session,
                {
                    "kind": "ok",
                    "text": (
                        "Queued for its next attempt now. If it fails, the retry schedule goes on from it; "
                        "reload to see the outcome."
                    ),
                },
            )
        return _redirect(_safe_next(_field(form, "next")) or _path("deliveries", delivery_id))

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
        except Invalid as exc:
            return await self.operations(request, session, str(exc))
        await self.sessions.flash(session, {"kind": "ok", "text": f"Denied: {', '.join(operations)}."})
        return _redirect(_path("operations"))

    async def allow(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        operation = _field(form, "operation")
        try:
            await self.service.allow(session.account, [operation])
        except Invalid as exc:
            return await self.operations(request, session, str(exc))
        except DeniedByOperator as exc:
            return await self.operations(request, session, str(exc), status=403)
        await self.sessions.flash(session, {"kind": "ok", "text": f"Allowed again: {operation}."})
        return _redirect(_path("operations"))


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _duration(seconds: int) -> str:
    """``24 hours``, ``2 days``, ``90 minutes``: the log's retention in words."""
    for unit, size in (("day", 86400 * 2), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // (86400 if unit == "day" else size)
            return f"{count} {unit}s" if count != 1 else f"1 {unit}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def _safe_next(value: str | None) -> str | None:
    """Only a path inside the console: never another site, never a protocol-relative URL."""
    if not value or not value.startswith(PATH + "/") or value.startswith("//") or "\\" in value:
        return None
    if any(ord(ch) < 32 for ch in value) or value.startswith(PATH + "/login"):
        return None
    return value
