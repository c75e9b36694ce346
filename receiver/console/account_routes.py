"""The console's sign-in, session and account (``receiver.console.account``, ``.api``): their routes, declared once."""

from __future__ import annotations

from ..apispec import Answer, Error
from . import schemas as s
from .account import AccountApi
from .api import Api
from .consoleroute import API, RETRY_AFTER, ConsoleRoute, err, ok, op

__all__ = ["ROUTES"]

LIMITED_SIGN_IN = Answer(
    "code -42900: too many failed sign-ins for the login or the address (the same message as a failure)",
    Error,
    headers={"Retry-After": RETRY_AFTER},
)
SIGN_IN = ConsoleRoute(
    "post",
    API + "/session",
    "consoleSignIn",
    "Sign in with a login and password, or an API key; sets the session cookie",
    {
        200: ok(s.SignedIn),
        400: err("code -40000: a field is missing or not a string"),
        401: err("code 401: login and password do not match (or API key invalid or revoked)"),
        415: err("code -41500: a JSON body was expected"),
        429: LIMITED_SIGN_IN,
    },
    description=(
        "Failed sign-ins are limited per login and per client address (SVCGW_SIGNIN_FAILURES_PER_LOGIN, "
        "SVCGW_SIGNIN_FAILURES_PER_ADDRESS); every failure has the same message, whether the login "
        "exists or not. Signing in does not count against the account's rate limit."
    ),
    body=(s.SignInWithPassword, s.SignInWithKey),
    tags=("console",),
    handler=AccountApi.sign_in,
    signed_in=False,
)
INVITATION = ConsoleRoute(
    "post",
    API + "/invitation",
    "consoleAcceptInvitation",
    "Choose the password with a one-time invitation (svcgw accounts invite); signs in",
    {
        200: ok(s.SignedIn),
        400: err("code -40000: the password breaks a rule (the message says which)"),
        410: err("code -41000: the invitation was used, has expired or does not exist"),
        415: err("code -41500: a JSON body was expected"),
        503: err("code -50002: storage temporarily unavailable"),
    },
    body=s.InvitationRequest,
    tags=("console",),
    handler=AccountApi.accept_invitation,
    signed_in=False,
)

ROUTES: tuple[ConsoleRoute, ...] = (
    SIGN_IN,
    op("get", "/session", "consoleSession", "Who is signed in, and the CSRF token", ok(s.SignedIn), handler=Api.whoami),
    op(
        "delete",
        "/session",
        "consoleSignOut",
        "Sign out (ends the session)",
        ok(s.SignedOut),
        change=True,
        counted=False,
        handler=Api.sign_out,
    ),
    INVITATION,
    op(
        "put",
        "/password",
        "consoleChangePassword",
        "Change the password; every other session of the account ends, this one stays",
        ok(s.PasswordChanged),
        change=True,
        bad=True,
        body=s.PasswordRequest,
        description="A wrong current password is -40330 (403) and counts as a failed sign-in.",
        extra={403: err("code -40310: CSRF token missing or wrong; code -40330: the current password is wrong")},
        handler=AccountApi.change_password,
    ),
    op(
        "delete",
        "/sessions",
        "consoleSignOutEverywhere",
        "Sign out everywhere: every session of the account ends, this one too (API keys keep working)",
        ok(s.SignedOut),
        change=True,
        counted=False,
        handler=AccountApi.sign_out_everywhere,
    ),
)
