"""The shape every console route shares (``ConsoleRoute``, made by ``op``), for the tables of the ``*routes`` modules.

Who may call a route (a session or an API key), whether it is a change (CSRF) that counts against the
rate limit, and the errors each kind of call can answer; with the parts more than one table names.
``receiver.openapi`` takes the console's security schemes from here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta
from starlette.responses import Response

from ..apispec import Answer, ApiRoute, Error, Header, Ok, Param, path_param

__all__ = [
    "API",
    "APPID",
    "BEFORE",
    "LIMITED",
    "RETRY_AFTER",
    "SECURITY_SCHEMES",
    "ConsoleRoute",
    "Limit",
    "err",
    "ok",
    "op",
]

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
BEFORE = Param("before", str)
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
