"""What every console page shares: rendering, and the session and CSRF guards.

:class:`PageKit` renders a template with :data:`PAGE_HEADERS` (a
Content-Security-Policy that allows only the console's own stylesheet, no
framing, no caching). A page handler runs guarded: a session is required
(else the sign-in page), a form also needs the session's CSRF token and
counts against the account's rate limit. A handler raises what it cannot
do (:class:`PageError`, a thing not found, Redis failing, the rate limit);
the pages' one handler of errors (``receiver.console.answers``) renders it
as the error page, with the session the guard found (:meth:`PageKit.session_of`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from svcgw.errors import STORAGE_ERRORS, SvcgwError

from .service import when
from .session import CSRF_FIELD, PATH, Session
from .web import Context

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_HEADERS", "Handler", "PageError", "PageKit"]

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
    """A page's refusal, shown as the error page with this status, title and message.

    ``headers`` go on the answer (``Retry-After``); ``context`` is what else the error page shows.
    """

    def __init__(
        self,
        status: int,
        title: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message
        self.headers = dict(headers or {})
        self.context = dict(context or {})


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
        probed: list[dict[str, Any]] = []
        if session is not None:
            try:
                failing = await self.service.failing(session.account)
                probed = await self.service.probing(session.account)
            except STORAGE_ERRORS:
                pass  # the banners are the one thing a page can do without
        response = self.templates.TemplateResponse(
            request,
            template,
            {
                "session": session,
                "csrf_token": session.csrf if session else "",
                "flash": flash,
                "failing": failing,
                "probing": probed,
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
            request.state.session = session  # for the error page, should the handler raise
            return await handler(request, session)

        return endpoint

    def _form(self, handler: Handler, *, counted: bool = True) -> Callable[[Request], Awaitable[Response]]:
        """A change made with a form; ``counted``: it counts against the account's rate limit."""

        async def endpoint(request: Request) -> Response:
            session = await self._session(request)
            if session is None:
                return _redirect(_path("login"))
            form = await request.form(max_files=0, max_fields=1100)
            request.state.form = form
            request.state.session = session  # for the error page, should the handler raise
            if not session.csrf_ok(_field(form, CSRF_FIELD)):
                raise PageError(
                    403,
                    "Request refused",
                    "The form's security token is missing or out of date. Reload the page and try again.",
                )
            if counted:
                await self.context.count_change(session)  # over the rate limit: RateLimited, a 429 page
            return await handler(request, session)

        return endpoint

    async def _session(self, request: Request) -> Session | None:
        try:
            return await self.sessions.from_cookie(request)
        except STORAGE_ERRORS:
            return None  # not an error page: no session to show one in; the sign-in page says the rest

    @staticmethod
    def session_of(request: Request) -> Session | None:
        """The session a guard found for this request (None before one did, or on a public page)."""
        session: Session | None = getattr(request.state, "session", None)
        return session

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
