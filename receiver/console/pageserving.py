"""What every console page shares: rendering, the session and CSRF guards, and error pages.

:class:`PageKit` renders a template with :data:`PAGE_HEADERS` (a
Content-Security-Policy that allows only the console's own stylesheet, no
framing, no caching). A page handler runs guarded: a session is required
(else the sign-in page), a form also needs the session's CSRF token and
counts against the account's rate limit. The one place a failure of a page
handler becomes an HTML page is :meth:`PageKit._guarded` (with
:meth:`PageKit._rate_limited` and :meth:`PageKit._storage_error`): a
:class:`PageError` or a missing thing as its page, Redis as 503.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from svcgw.errors import STORAGE_ERRORS, SvcgwError

from .service import NotFound, when
from .session import CSRF_FIELD, PATH, Session
from .web import Context, RateLimited

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_HEADERS", "Handler", "PageError", "PageKit"]

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


class PageError(SvcgwError):
    """A page handler's refusal, shown as an error page with this status, title and message."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


def _path(*parts: str) -> str:
    return PATH + "".join("/" + quote(part, safe="") for part in parts)


def _redirect(location: str) -> Response:
    return RedirectResponse(location, status_code=303)


class PageKit:
    """Rendering and guards; the console's pages (:class:`.pages.Pages`) build on it."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.service = context.service
        self.sessions = context.sessions
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["when"] = when
        self.templates.env.globals["path"] = _path

    # --- rendering ---------------------------------------------------------------------
    async def render(
        self, request: Request, template: str, session: Session | None, status: int = 200, **context: Any
    ) -> Response:
        flash = await self.sessions.take_flash(session) if session is not None else None
        failing: list[dict[str, Any]] = []
        if session is not None:
            try:
                failing = await self.service.failing(session.account)
            except STORAGE_ERRORS:
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
                except STORAGE_ERRORS as exc:
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
        except STORAGE_ERRORS:
            return None

    async def _guarded(self, request: Request, session: Session, handler: Handler) -> Response:
        try:
            return await handler(request, session)
        except (NotFound, PageError) as exc:
            status, title = (exc.status, exc.title) if isinstance(exc, PageError) else (404, "Not found")
            message = exc.message if isinstance(exc, PageError) else "There is nothing here for your account."
            return await self.render(request, "error.html", session, status=status, title=title, message=message)
        except STORAGE_ERRORS as exc:
            return await self._storage_error(request, session, exc)

    async def _storage_error(self, request: Request, session: Session, exc: Exception) -> Response:
        log.warning("console storage error: %s", type(exc).__name__)
        return await self.render(
            request,
            "error.html",
            session,
            status=503,
            title="Storage unavailable",
            message="The service's storage cannot be reached right now. Try again in a moment.",
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


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _safe_next(value: str | None) -> str | None:
    """Only a path inside the console: never another site, never a protocol-relative URL."""
    if not value or not value.startswith(PATH + "/") or value.startswith("//") or "\\" in value:
        return None
    if any(ord(ch) < 32 for ch in value) or value.startswith(PATH + "/login"):
        return None
    return value
