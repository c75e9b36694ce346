"""Signing in with a password, invitations, the account page: pages and JSON API.

The console's sign-in leads with a login and password; an API key still
signs in (scripts, operators): the form's ``api_key`` field, or
``{"api_key": ...}`` to the JSON API.

Pages (plain forms, the sign-in form's double-submit CSRF token before a
session exists, the session's own after):

* ``POST /console/login``: login and password, or an API key;
* ``GET|POST /console/invitation/{token}``: choose a password with a one-time
  invitation (``svcgw accounts invite``), which signs the developer in;
* ``GET /console/account``, ``POST /console/account/password`` (change it;
  every other session of the account ends), ``POST
  /console/account/sign-out-everywhere`` (every session ends, this one too).

JSON API: ``POST /console/api/session`` with ``{"login", "password"}`` or ``{"api_key"}``,
``POST /console/api/invitation`` with ``{"token", "password"}``, ``PUT
/console/api/password`` with ``{"current_password", "new_password"}``,
``DELETE /console/api/sessions`` (sign out everywhere).

Failed sign-ins are limited per login (or per device cookie) and per client
address, and wrong API keys per address too (``receiver.console.signin``);
all are answered with one message (``console_codes.SIGN_IN_MESSAGE``): 401, or 429
with ``Retry-After`` while a limit is reached or no room is left. Signing
in, accepting an invitation and signing out everywhere do not count against
the account's rate limit; changing the password does.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from receiver.console import codes as console_codes
from svcgw.digests import digest
from svcgw.errors import STORAGE_ERRORS
from svcgw.registry import passwords
from svcgw.registry.passwords import PasswordRejected

from ..http import client_address
from .api import Api
from .pages import Pages, _field, _path, _redirect, _safe_next
from .requests import parse, parsed_body
from .schemas import (
    MAX_KEY_FIELD,
    MAX_LOGIN_FIELD,
    InvitationRequest,
    PasswordRequest,
    SignInWithKey,
    SignInWithPassword,
)
from .session import CSRF_FIELD, LOGIN_COOKIE, PATH, Session
from .signin import SignInOutcome
from .web import ConsoleHTTPError, Context, json_body, json_ok

__all__ = ["AccountApi", "AccountPages", "invitation_path"]

_KEY_REFUSED = "That API key is not valid (or has been revoked)."


def invitation_path(token: str) -> str:
    """The console path of an invitation (``svcgw accounts invite`` puts SVCGW_PUBLIC_URL before it)."""
    return f"{PATH}/invitation/{token}"


def _sentence(message: str) -> str:
    """An error table's message as a sentence on a page."""
    return message[:1].upper() + message[1:] + "."


class _Shared:
    """What the pages and the API both do: the checks and writes behind each form or call."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.sessions = context.sessions
        self.signin = context.signin
        self.credentials = context.signin.credentials
        self.invitations = context.invitations

    async def sign_in(self, request: Request, login: str, password: str) -> SignInOutcome:
        if len(login) > MAX_LOGIN_FIELD:
            login = login[:MAX_LOGIN_FIELD]  # counted all the same, under what was sent
        sessions = self.sessions

        async def lane_session(redis: Any, account: str, epoch: str) -> tuple[str, Session]:
            return await sessions.create(account, "", epoch, redis)

        return await self.signin.attempt(
            login, password, client_address(request), sessions.device_of(request), sessions.lane_of(request),
            lane_session,
        )  # fmt: skip

    async def new_session(
        self, account: str, key_id: str = "", attempt: SignInOutcome | None = None
    ) -> tuple[str, Session]:
        """A new session (``Sessions.create``), or the one the known-browser lane wrote on its own loop for
        ``attempt`` (``PasswordSignIn.attempt``'s ``after_lane``): no await of it waited for a flood's turn."""
        if attempt is not None and attempt.made is not None:
            made: tuple[str, Session] = attempt.made
            return made
        return await self.sessions.create(account, key_id)

    async def key_sign_in(self, request: Request, presented: str) -> tuple[tuple[str, str] | None, int]:
        """(account, key id) of a valid API key, or None; and the wait when the address's window is full."""
        if len(presented) > MAX_KEY_FIELD:
            presented = ""  # no key this service issued: refused, and counted all the same
        name, guard = digest(presented.strip()), self.context.key_guard
        found, wait = await self.signin.key_attempt(
            client_address(request), lambda: self.sessions.key_account(presented), known=guard.known(name)
        )
        if found is not None:
            guard.remember(name)
        return found, wait

    async def accept_invitation(self, token: str, password: str) -> str:
        """Set the invited account's password; its account id. ``PasswordRejected``, or ``ConsoleHTTPError`` 410."""
        account = await self.invitations.account_of(token)
        if account is None:
            raise ConsoleHTTPError(console_codes.INVITATION_GONE)
        passwords.check_new(password, login=await self.credentials.login_of(account))
        hashed = await self.signin.hash_password(password)
        # The token is used up only now, with a password that passed: a mistyped one costs nothing.
        if await self.invitations.redeem(token) != account:
            raise ConsoleHTTPError(console_codes.INVITATION_GONE)
        await self.credentials.set_password(account, hashed)
        return account

    async def change_password(self, request: Request, session: Session, current: str, new: str) -> str:
        """The new password's version; ``ConsoleHTTPError`` (-40330, or 429 over the failure limits) or
        ``PasswordRejected``."""
        attempt = await self.signin.check_current(
            session.account,
            current,
            client_address(request),
            self.sessions.device_of(request),
            self.sessions.lane_of(request),
        )
        if attempt.retry_after:
            raise ConsoleHTTPError(console_codes.SIGN_IN_LIMITED, headers={"Retry-After": str(attempt.retry_after)})
        if attempt.account is None:
            raise ConsoleHTTPError(console_codes.WRONG_PASSWORD)
        passwords.check_new(new, login=await self.credentials.login_of(session.account))
        if new == current:
            raise PasswordRejected("the new password is the current one")
        hashed = await self.signin.hash_password(new)
        epoch = await self.credentials.set_password(session.account, hashed, keep_session=session.redis_key or None)
        return str(epoch)


class AccountPages:
    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.shared = _Shared(pages.context)
        self.sessions = pages.sessions

    def routes(self) -> list[BaseRoute]:
        page, form = self.pages._page, self.pages._form
        return [
            Route("/login", self.login, methods=["POST"]),
            Route("/invitation/{token}", self.invitation_page, methods=["GET"], name="invitation"),
            Route("/invitation/{token}", self.accept_invitation, methods=["POST"]),
            Route("/account", page(self.account), methods=["GET"], name="account"),
            Route("/account/password", form(self.change_password), methods=["POST"]),
            Route("/account/sign-out-everywhere", form(self.sign_out_everywhere, counted=False), methods=["POST"]),
        ]

    # --- signing in ------------------------------------------------------------------
    async def login(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=10)
        if not self.sessions.login_csrf_ok(request, _field(form, CSRF_FIELD)):
            return await self.pages.login_page(request, "The sign-in form expired. Please try again.", 403)
        then = _safe_next(_field(form, "next"))
        login, key = _field(form, "login").strip(), _field(form, "api_key").strip()
        try:
            if key and not login:
                found, wait = await self.shared.key_sign_in(request, key)
                if found is None:
                    status, text = (429, _sentence(console_codes.SIGN_IN_MESSAGE)) if wait else (401, _KEY_REFUSED)
                    response = await self.pages.login_page(request, text, status)
                    if wait:
                        response.headers["Retry-After"] = str(wait)
                    return response
                return await self._signed_in(request, *found, then=then)
            attempt = await self.shared.sign_in(request, login, _field(form, "password"))
        except STORAGE_ERRORS:
            # The sign-in form again, saying why: a visitor not signed in is not sent to an error page.
            return await self.pages.login_page(
                request, "The service's storage cannot be reached. Try again shortly.", 503
            )
        if attempt.account is None:
            response = self.pages.public_page(
                request,
                "login.html",
                429 if attempt.retry_after else 401,
                error=_sentence(console_codes.SIGN_IN_MESSAGE),
                login=login[:MAX_LOGIN_FIELD],
                next=then,
            )
            if attempt.retry_after:
                response.headers["Retry-After"] = str(attempt.retry_after)
            return response
        response = await self._signed_in(request, attempt.account, then=then, attempt=attempt)
        self.sessions.set_device_cookie(request, response, attempt.account, attempt.password_version)
        return response

    async def _signed_in(
        self, request: Request, account: str, key_id: str = "", *, then: str | None = None, flash: str | None = None,
        attempt: SignInOutcome | None = None,
    ) -> Response:  # fmt: skip
        cookie, session = await self.shared.new_session(account, key_id, attempt)
        if flash:
            await self.sessions.flash(session, {"kind": "ok", "text": flash})
        response = _redirect(then or _path("instances"))
        self.sessions.set_cookie(request, response, cookie)
        response.delete_cookie(LOGIN_COOKIE, path=PATH)
        return response

    # --- invitations -------------------------------------------------------------------
    async def invitation_page(self, request: Request, error: str | None = None, status: int = 200) -> Response:
        token = request.path_params["token"]
        try:
            account = await self.shared.invitations.account_of(token)
            login = await self.shared.credentials.login_of(account) if account else None
        except STORAGE_ERRORS:
            # The invitation's own page, saying why (and keeping its token from any Referer).
            return self._gone(request, "The service's storage cannot be reached. Try again shortly.", 503)
        if account is None:
            return self._gone(request, _sentence(console_codes.INVITATION_GONE.message))
        response = self.pages.public_page(
            request, "invitation.html", status, error=error, login=login, token=token, minimum=passwords.MIN_LENGTH
        )
        # The token is in this page's address: no other site may learn it from a Referer.
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    def _gone(self, request: Request, message: str, status: int = 410) -> Response:
        response = self.pages.public_page(request, "invitation_gone.html", status, message=message)
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    async def accept_invitation(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=10)
        if not self.sessions.login_csrf_ok(request, _field(form, CSRF_FIELD)):
            return await self.invitation_page(request, "The form expired. Please try again.", 403)
        password = _field(form, "password")
        if password != _field(form, "password_confirm"):
            return await self.invitation_page(request, "The two passwords are not the same.", 400)
        # What is refused is shown on the invitation's own pages, the form again when a password can be chosen.
        try:
            account = await self.shared.accept_invitation(request.path_params["token"], password)
        except PasswordRejected as exc:
            return await self.invitation_page(request, f"Choose another password: {exc}.", 400)
        except ConsoleHTTPError as exc:
            return self._gone(request, _sentence(exc.message), exc.status)
        except STORAGE_ERRORS:
            return self._gone(request, "The service's storage cannot be reached. Try again shortly.", 503)
        return await self._signed_in(request, account, flash="Your password is set and you are signed in.")

    # --- the account page -----------------------------------------------------------------
    async def account(
        self, request: Request, session: Session, error: str | None = None, status: int = 200
    ) -> Response:
        account = await self.pages.service.store.get_account(session.account)
        has_password = await self.shared.credentials.has_password(session.account)
        return await self.pages.render(
            request,
            "account.html",
            session,
            status=status,
            nav="account",
            account=account,
            has_password=has_password,
            minimum=passwords.MIN_LENGTH,
            error=error,
        )

    async def change_password(self, request: Request, session: Session) -> Response:
        form: FormData = request.state.form
        new = _field(form, "new_password")
        if new != _field(form, "new_password_confirm"):
            return await self.account(request, session, "The two new passwords are not the same.", 400)
        # A refusal is the account page's form again, with the reason in it; anything else is an error page.
        try:
            version = await self.shared.change_password(request, session, _field(form, "current_password"), new)
        except PasswordRejected as exc:
            return await self.account(request, session, f"Choose another password: {exc}.", 400)
        except ConsoleHTTPError as exc:
            response = await self.account(request, session, _sentence(exc.message), exc.status)
            response.headers.update(exc.headers)
            return response
        await self.sessions.flash(
            session, {"kind": "ok", "text": "Password changed. Every other session of this account is signed out."}
        )
        response = _redirect(_path("account"))
        # The new password retired every device cookie; this browser has just proved it.
        self.sessions.set_device_cookie(request, response, session.account, version)
        return response

    async def sign_out_everywhere(self, request: Request, session: Session) -> Response:
        await self.shared.credentials.end_sessions(session.account)
        response = _redirect(_path("login"))
        self.sessions.clear_cookie(request, response)
        return response


class AccountApi:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.shared = _Shared(api.context)
        self.sessions = api.sessions

    # Each raises what it refuses (a ConsoleHTTPError, PasswordRejected, Redis): receiver.console.answers.
    async def sign_in(self, request: Request) -> Response:
        document = await json_body(request)
        if "api_key" in document:
            presented = parse(document, SignInWithKey).api_key
            found, wait = await self.shared.key_sign_in(request, presented)
            if wait:
                raise ConsoleHTTPError(console_codes.SIGN_IN_LIMITED, headers={"Retry-After": str(wait)})
            if found is None:
                raise ConsoleHTTPError(console_codes.KEY_REFUSED)
            return await self._session(request, *found)
        form = parse(document, SignInWithPassword)
        attempt = await self.shared.sign_in(request, form.login, form.password)
        if attempt.retry_after:
            raise ConsoleHTTPError(console_codes.SIGN_IN_LIMITED, headers={"Retry-After": str(attempt.retry_after)})
        if attempt.account is None:
            raise ConsoleHTTPError(console_codes.SIGN_IN_REFUSED)
        response = await self._session(request, attempt.account, attempt=attempt)
        self.sessions.set_device_cookie(request, response, attempt.account, attempt.password_version)
        return response

    async def accept_invitation(self, request: Request) -> Response:
        invitation = await parsed_body(request, InvitationRequest)
        account = await self.shared.accept_invitation(invitation.token, invitation.password)
        return await self._session(request, account)

    async def _session(
        self, request: Request, account: str, key_id: str = "", attempt: SignInOutcome | None = None
    ) -> Response:
        cookie, session = await self.shared.new_session(account, key_id, attempt)
        response = json_ok({"account": session.account, "csrf_token": session.csrf})
        self.sessions.set_cookie(request, response, cookie)
        return response

    async def change_password(self, request: Request, session: Session) -> Response:
        asked = await parsed_body(request, PasswordRequest)
        version = await self.shared.change_password(request, session, asked.current_password, asked.new_password)
        response = json_ok({"changed": True, "other_sessions_ended": True})
        # The new password retired every device cookie; this browser has just proved it.
        self.sessions.set_device_cookie(request, response, session.account, version)
        return response

    async def sign_out_everywhere(self, request: Request, session: Session) -> Response:
        await self.shared.credentials.end_sessions(session.account)
        response = json_ok({"signed_out": True, "every_session": True})
        self.sessions.clear_cookie(request, response)
        return response
