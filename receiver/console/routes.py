"""The console JSON API's routes: each declared once, with its handler and the types of ``receiver.console.schemas``.

``receiver.console`` makes the JSON API's router from them, and
``receiver.openapi`` the document (``receiver.apispec``). The shape every
console route shares is here: who may call it (a session or an API
key), whether it is a change (CSRF) that counts against the rate limit, and
the errors each kind of call can answer. The further destinations' routes
are in ``.destination_routes``, the QR login's in ``.onboarding_routes``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta
from starlette.responses import Response

from ..apispec import Answer, ApiRoute, Error, Header, Ok, Param, path_param
from . import schemas as s
from .account import AccountApi
from .api import Api
from .apikeys import KeyApi

__all__ = ["LIMITED", "ROUTES", "SECURITY_SCHEMES", "ConsoleRoute", "err", "ok", "op"]

API = "/console/api"
SECURITY = ("ConsoleSession", "ConsoleApiKey")
SECURITY_SCHEMES: dict[str, Any] = {
    "ConsoleSession": {"type": "apiKey", "in": "cookie", "name": "svcgw_console"},
    "ConsoleApiKey": {"type": "apiKey", "in": "header", "name": "Svc-Key"},
    "DashboardBasic": {"type": "http", "scheme": "basic"},
}
CHANGE_NOTE = " A change made with the session cookie needs the X-CSRF-Token header (the token from GET /session)."
COUNTED_NOTE = " It counts against the account's rate limit (SVCGW_RATE_LIMIT), shared with the gateway API."

APPID = path_param("appid")
DELIVERY_ID = path_param("delivery_id")
KEY_ID = path_param("key_id")
Limit = Annotated[int, Meta(ge=1, le=200)]
RETRY_AFTER = Header(Annotated[int, Meta(ge=1)])


@dataclass(frozen=True)
class ConsoleRoute(ApiRoute):
    """A console route: called by a signed-in caller (all but signing in), a change or a read, counted or not.

    A change needs the CSRF header with a session cookie; a counted one counts against the account's rate
    limit. ``Api.endpoint`` wraps the handler so.
    """

    signed_in: bool = True
    change: bool = False
    counted: bool = False


def err(description: str) -> Answer:
    return Answer(description, Error)


LIMITED = Answer(
    "code -42900: over the account's rate limit (a change), or, with an API key, from an address that sent too "
    "many keys that are not valid; retry after the seconds in Retry-After",
    Error,
    headers={"Retry-After": RETRY_AFTER},
)
CSRF = err("code -40310: CSRF token missing or wrong")


def op(
    method: str,
    path: str,
    operation_id: str,
    summary: str,
    ok: Answer,
    *,
    handler: Callable[..., Awaitable[Response]],
    change: bool = False,
    found: bool = False,
    bad: bool = False,
    counted: bool | None = None,
    description: str = "",
    note: str = "",
    body: Any = None,
    body_required: bool = True,
    params: tuple[Param, ...] = (),
    status: int = 200,
    extra: dict[int, Answer] | None = None,
) -> ConsoleRoute:
    """A console route of a signed-in caller, answered by ``handler``.

    ``counted`` (a change by default): it counts against the rate limit. ``status`` is the success's;
    ``note`` ends the description; ``extra`` adds or replaces answers.
    """
    counted = change if counted is None else counted
    answers: dict[int, Answer] = {status: ok, 401: err("code 401: not signed in")}
    if change:
        answers[403] = CSRF
        description += CHANGE_NOTE + (COUNTED_NOTE if counted else "")
    answers[429] = LIMITED
    if found:
        answers[404] = err(
            "code -40404: no such appid, dead letter or delivery, or another account's (the same answer)"
        )
    if bad:
        answers[400] = err(
            "code -40000 bad value; -40011/-40012/-40013 callback address refused; "
            "-40022 a Bearer token with control characters"
        )
    if change or bad:
        answers[415] = err("code -41500: a JSON body was expected")
    answers[503] = err("code -50002: storage temporarily unavailable")
    answers.update(extra or {})
    return ConsoleRoute(
        method,
        API + path,
        operation_id,
        summary,
        answers,
        description=(description + note).strip(),
        security=SECURITY,
        params=params,
        body=body,
        body_required=body_required,
        tags=("console",),
        handler=handler,
        change=change,
        counted=counted,
    )


def ok(data: Any, description: str = "success") -> Answer:
    return Answer(description, Ok[data])


def _callback(scope: str, params: tuple[Param, ...]) -> list[ConsoleRoute]:
    path = "/instances/{appid}/callback" if params else "/callback"
    found = bool(params)
    return [
        op(
            "get",
            path,
            f"consoleGet{scope}Callback",
            f"The {scope.lower()} callback settings",
            ok(s.ConsoleCallback),
            handler=Api.get_callback,
            params=params,
            found=found,
        ),
        op(
            "put",
            path,
            f"consoleSet{scope}Callback",
            f"Save the {scope.lower()} callback address; a non-empty one gets one SvcCallbackTest POST",
            ok(s.SavedCallback),
            handler=Api.put_callback,
            change=True,
            found=found,
            bad=True,
            params=params,
            body=s.CallbackRequest,
            description=(
                "An empty url removes the address and its Bearer token. A blank bearer_token keeps the stored "
                "token while the address keeps its origin (scheme, host, port); on a new origin the token is "
                "deleted unless keep_token is true. bearer false deletes it. The address is saved even when "
                "the test fails; test is null when no test was sent."
            ),
        ),
    ]


DENIED = ok(s.Denied)
OPERATOR_DENIAL = {
    403: err(
        "code -40310: CSRF token missing or wrong; code -40320: denied by the operator, only the operator "
        "can allow it again (nothing was changed)"
    )
}
APPID_QUERY = Param("appid", str)
BEFORE = Param("before", str)
# Deliveries and dead letters of one further destination (dst_...), or of the primary address ("primary").
DESTINATION_QUERY = Param("destination", str)
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
    # Signing in, the session, the account (receiver.console.account, .api).
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
    # Instances and their callbacks (receiver.console.api).
    op(
        "get",
        "/instances",
        "consoleInstances",
        "The account's instances",
        ok(list[s.ConsoleInstance]),
        handler=Api.instances,
    ),
    op(
        "get",
        "/instances/{appid}",
        "consoleInstance",
        "One instance",
        ok(s.ConsoleInstance),
        params=(APPID,),
        found=True,
        handler=Api.instance,
    ),
    *_callback("Account", ()),
    op(
        "post",
        "/callback/rotate-secret",
        "consoleRotateAccountSecret",
        "New signing secret for the account default",
        ok(s.ConsoleCallback),
        change=True,
        handler=Api.rotate,
    ),
    *_callback("Instance", (APPID,)),
    op(
        "post",
        "/instances/{appid}/callback/rotate-secret",
        "consoleRotateInstanceSecret",
        "New signing secret for the instance's own address",
        ok(s.ConsoleCallback),
        change=True,
        params=(APPID,),
        found=True,
        handler=Api.rotate,
    ),
    # The callback log, dead letters and deliveries.
    op(
        "get",
        "/instances/{appid}/log",
        "consoleCallbackLog",
        "The callback log: last 24 h, raw bodies as received, newest first",
        ok(s.LogPage),
        found=True,
        bad=True,
        params=(APPID, Param("limit", Limit), BEFORE),
        handler=Api.log,
    ),
    op(
        "get",
        "/dead-letters",
        "consoleDeadLetters",
        "Dead letters, newest first",
        ok(s.DeadLetterPage),
        found=True,
        bad=True,
        params=(
            APPID_QUERY,
            DESTINATION_QUERY,
            Param("limit", Limit),
            Param("offset", Annotated[int, Meta(ge=0)]),
        ),
        handler=Api.dead_letters,
    ),
    op(
        "get",
        "/dead-letters/{delivery_id}",
        "consoleDeadLetter",
        "One dead letter with its attempts (time, status, error) and body",
        ok(dict[str, Any]),
        found=True,
        params=(DELIVERY_ID,),
        handler=Api.dead_letter,
    ),
    op(
        "post",
        "/dead-letters/replay",
        "consoleReplay",
        "Replay dead letters: the ones named, or all of one instance",
        ok(s.Replayed),
        change=True,
        found=True,
        bad=True,
        body=s.ReplayRequest,
        handler=Api.replay,
    ),
    op(
        "get",
        "/instances/{appid}/deliveries",
        "consoleDeliveries",
        "The instance's deliveries of the log's retention, newest first, with every attempt",
        ok(s.DeliveryPage),
        found=True,
        bad=True,
        description=(
            "Filters combine. At most 5,000 deliveries are looked at per call: with filters that match "
            "little, a page can be short and next_before still says where to go on."
        ),
        params=(
            APPID,
            Param("state", s.DeliveryState),
            Param("event_type", str),
            Param("event_id", str),
            DESTINATION_QUERY,
            Param("limit", Limit),
            BEFORE,
        ),
        handler=Api.deliveries,
    ),
    op(
        "get",
        "/deliveries/{delivery_id}",
        "consoleDelivery",
        "One delivery with every attempt",
        ok(s.ConsoleDelivery),
        found=True,
        params=(DELIVERY_ID,),
        handler=Api.delivery,
    ),
    op(
        "post",
        "/deliveries/{delivery_id}/retry",
        "consoleRetryNow",
        "Retry now: a retrying delivery's next attempt, at once",
        ok(s.ConsoleDelivery),
        change=True,
        found=True,
        params=(DELIVERY_ID,),
        description=(
            "The attempt is the one the retry schedule planned next, brought forward: it counts as an "
            "attempt, and if it fails the schedule goes on from it. No body. code -40900 (409) when the "
            "delivery is not retrying (pending, delivered, dead) or its attempt is already under way."
        ),
        extra={409: err("code -40900: the delivery is not retrying, or its next attempt is already under way")},
        handler=Api.retry_now,
    ),
    op(
        "get",
        "/failing-destinations",
        "consoleFailing",
        "The account's destinations whose every attempt has failed for SVCGW_FAILING_AFTER seconds",
        ok(s.Failing),
        found=True,
        params=(APPID_QUERY,),
        handler=Api.failing,
    ),
    op(
        "get",
        "/probing-destinations",
        "consoleProbing",
        "The account's destinations whose attempts time out, which get fewer attempts at a time until they answer",
        ok(s.Probing),
        found=True,
        params=(APPID_QUERY,),
        handler=Api.probing,
    ),
    # Controlled operations.
    op(
        "get",
        "/operations",
        "consoleDenied",
        "Controlled operations the account may not call",
        DENIED,
        handler=Api.operations,
    ),
    op(
        "post",
        "/operations/deny",
        "consoleDeny",
        "Deny operations (the gateway then answers 403)",
        DENIED,
        change=True,
        bad=True,
        body=s.OperationsRequest,
        handler=Api.deny,
    ),
    op(
        "post",
        "/operations/allow",
        "consoleAllow",
        "Allow operations again (the account's own denials; -40320 for one the operator denied)",
        DENIED,
        change=True,
        bad=True,
        body=s.OperationsRequest,
        extra=OPERATOR_DENIAL,
        handler=Api.allow,
    ),
    # API keys (receiver.console.apikeys).
    op(
        "get",
        "/keys",
        "consoleKeys",
        "The account's API keys: in use first, then revoked",
        ok(s.KeyList),
        handler=KeyApi.listed,
    ),
    op(
        "post",
        "/keys",
        "consoleCreateKey",
        "Create an API key; the answer holds the key, shown this once",
        ok(s.ConsoleNewKey),
        status=201,
        change=True,
        bad=True,
        body=s.NewKeyRequest,
        handler=KeyApi.create,
    ),
    op(
        "delete",
        "/keys/{key_id}",
        "consoleRevokeKey",
        "Revoke a key: the gateway refuses the very next call made with it",
        ok(s.ConsoleApiKey),
        change=True,
        found=True,
        params=(KEY_ID,),
        handler=KeyApi.revoke,
    ),
)
