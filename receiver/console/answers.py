"""The console's answers to errors: one table and one handler for the JSON API, one of each for the pages.

Handlers raise; ``console_routes`` registers :func:`api_handlers` on the
``/console/api`` mount and :func:`page_handlers` on the pages' mount (each
a Starlette ``ExceptionMiddleware``), so every error class is answered in
one place per surface:

* the JSON API (:data:`API_ROWS`): ``{code, message, data: null}`` with a
  row of ``receiver.console.codes`` (``CONSOLE_KINDS``; for a further
  destination's refused value, the row of its class, ``destination_kind``)
  or of the gateway's (the callback address rows, -42900),
  ``Cache-Control: no-store``, and ``WWW-Authenticate: Bearer`` on the
  console's own 401s; a refused QR login step is answered as the gateway
  answered it (or with the capability layer's code on HTTP 200);
* the pages (:data:`PAGE_ROWS`): the error page, with the status, title and
  words of its row, for a thing not found, a storage failure (503), the
  rate limit (429 and ``Retry-After``), a refused QR login step, a further
  destination's value refused by a button, and a handler's own
  :class:`.pageserving.PageError`.

A storage failure is logged once, as a warning naming its class. What a
form answers with the form itself (a refused address, a bad password, ...)
its page handles, keeping what was typed; that is no error answer.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from receiver.console import codes as console_codes
from receiver.gateway import codes as gateway_codes
from svcgw.callbacks.addresses import AddressError
from svcgw.callbacks.destinationrules import DestinationRejected
from svcgw.delivery.retrynow import NotRetrying
from svcgw.errors import STORAGE_ERRORS, ErrorKind, Invalid, NotFound, Refusal, Rows
from svcgw.registry.passwords import PasswordRejected

from ..credentialguard import Throttled
from ..http import BodyTooLarge, ConflictingKeys, answer_body
from .pageserving import PageError, PageKit
from .qrattempt import AttemptGone, FlowError, Outcome
from .service import DeniedByOperator
from .web import ConsoleHTTPError, RateLimited, address_error

__all__ = ["API_ROWS", "PAGE_ROWS", "api_answer", "api_handlers", "flow_page", "page_handlers"]

log = logging.getLogger("svcgw.console")

Handler = Any  # Starlette's ExceptionHandler: (request, exc) -> response


# --- the JSON API ------------------------------------------------------------------------------
def _not_found(exc: NotFound) -> Refusal:
    kind = console_codes.CONSOLE_NOT_FOUND.get(exc.what)
    if kind is None:
        raise exc  # a thing the console never looks for: a bug, not an answer
    return ConsoleHTTPError(kind)


def _keys_throttled(exc: Throttled) -> Refusal:
    retry = {"Retry-After": str(exc.retry_after)}
    return ConsoleHTTPError(gateway_codes.RATE_LIMITED, gateway_codes.KEYS_THROTTLED_MESSAGE, headers=retry)


def _flow_refused(exc: FlowError) -> Refusal:
    """A refused QR login step: the gateway's own answer, or the layer's code on HTTP 200."""
    outcome = exc.outcome
    headers = {"Retry-After": outcome.retry_after} if outcome.retry_after else None
    message = outcome.message if outcome.by_gateway else outcome.describe()
    return Refusal(ErrorKind(outcome.code, outcome.status, message), headers=headers)


def _worded(kind: ErrorKind) -> Any:
    """The row ``kind`` with the error's own message."""
    return lambda exc: ConsoleHTTPError(kind, str(exc))


API_ROWS: Rows[Refusal] = Rows(
    {
        ConsoleHTTPError: lambda exc: exc,
        NotFound: _not_found,
        AttemptGone: lambda exc: ConsoleHTTPError(
            console_codes.NOT_THE_CALLERS, "no such login attempt (an attempt expires after 15 minutes)"
        ),
        (Invalid, PasswordRejected, BodyTooLarge): _worded(console_codes.BAD_REQUEST),
        DeniedByOperator: _worded(console_codes.DENIED_BY_OPERATOR),
        NotRetrying: _worded(console_codes.NOT_RETRYING),
        AddressError: address_error,
        DestinationRejected: lambda exc: ConsoleHTTPError(console_codes.destination_kind(exc), exc.message),
        # Different keys in one request: none it can be signed in with.
        ConflictingKeys: lambda exc: ConsoleHTTPError(console_codes.NOT_SIGNED_IN),
        Throttled: _keys_throttled,
        FlowError: _flow_refused,
        STORAGE_ERRORS: lambda exc: ConsoleHTTPError(console_codes.STORAGE_UNAVAILABLE),
    }
)


def api_answer(refusal: Refusal) -> Response:
    """A refusal as the JSON API answers it: the one place that answer is built."""
    headers = {"Cache-Control": "no-store", **refusal.headers}
    if isinstance(refusal, ConsoleHTTPError) and refusal.status == 401:
        # A 401 names the scheme an API client can use instead of a session.
        headers["WWW-Authenticate"] = "Bearer"
    return Response(
        answer_body(refusal.code, refusal.message),
        status_code=refusal.status,
        media_type="application/json",
        headers=headers,
    )


async def _api_refused(request: Request, exc: Exception) -> Response:
    if isinstance(exc, STORAGE_ERRORS):
        log.warning("console storage error: %s", type(exc).__name__)
    return api_answer(API_ROWS.answer(exc))


def api_handlers() -> dict[Any, Handler]:
    """The JSON API mount's exception handlers: one, for every class of :data:`API_ROWS`."""
    return dict.fromkeys(API_ROWS.classes, _api_refused)


# --- the pages ----------------------------------------------------------------------------------
def flow_page(outcome: Outcome) -> PageError:
    """A refused QR login step as a page: the gateway's status, or 502 for the capability layer's refusal."""
    headers = {"Retry-After": outcome.retry_after} if outcome.retry_after else None
    refusal = {"code": outcome.code, "message": outcome.message, "operation": outcome.operation}
    status = outcome.status if outcome.by_gateway else 502
    return PageError(
        status, "Refused", outcome.describe(), headers=headers, context={"refusal": refusal, "nav": "instances"}
    )


def _too_many_changes(exc: RateLimited) -> PageError:
    seconds = f"{exc.retry_after} second{'s' if exc.retry_after != 1 else ''}"
    message = (
        "This account has used up its rate limit (console changes and gateway calls count together). "
        f"Nothing was changed. Try again in {seconds}."
    )
    return PageError(429, "Too many changes", message, headers={"Retry-After": str(exc.retry_after)})


PAGE_ROWS: Rows[PageError] = Rows(
    {
        PageError: lambda exc: exc,
        NotFound: lambda exc: PageError(404, "Not found", "There is nothing here for your account."),
        AttemptGone: lambda exc: PageError(
            404,
            "Login expired",
            "There is no such login for your account any more (a login expires after 15 minutes).",
        ),
        RateLimited: _too_many_changes,
        FlowError: lambda exc: flow_page(exc.outcome),
        DestinationRejected: lambda exc: PageError(console_codes.destination_kind(exc).status, "Refused", exc.message),
        STORAGE_ERRORS: lambda exc: PageError(
            503, "Storage unavailable", "The service's storage cannot be reached right now. Try again in a moment."
        ),
    }
)


def page_handlers(kit: PageKit) -> dict[Any, Handler]:
    """The pages mount's exception handlers: one, for every class of :data:`PAGE_ROWS`, rendering with ``kit``."""

    async def refused(request: Request, exc: Exception) -> Response:
        if isinstance(exc, STORAGE_ERRORS):
            log.warning("console storage error: %s", type(exc).__name__)
        page = PAGE_ROWS.answer(exc)
        response = await kit.render(
            request,
            "error.html",
            kit.session_of(request),
            status=page.status,
            title=page.title,
            message=page.message,
            **page.context,
        )
        response.headers.update(page.headers)
        return response

    return dict.fromkeys(PAGE_ROWS.classes, refused)

