"""The gateway's answers to errors: one table of rows and one handler, for every way in.

A call comes in by the direct path (``Gateway.direct``, most calls), by the
router (an API path that needed routing, ``instances/set-callback``) or from
the console (``Gateway.invoke``); each ends in :meth:`.handlers.Gateway._answer`,
whose one clause catches the classes of :data:`ROWS` and hands them to
:func:`refused`. The operations raise, and never build an error answer:

* a ``GatewayError`` is its own row;
* a thing not found is the row of its kind (``receiver.gateway.codes.GATEWAY_NOT_FOUND``);
* a body over the limit, different keys in one request, a throttled key
  look-up and a refused callback address have the rows of checks 2 to 11
  (see the package docstring);
* the capability layer failing, or Redis, is -50002, with a warning that
  names the operation. Where a step has a row of its own (a callback
  registration, -50000), the step converts (``raise GatewayError(...) from exc``).
"""

from __future__ import annotations

import logging

from starlette.responses import Response

from receiver.gateway import codes as gateway_codes
from svcgw.callbacks.addresses import AddressError
from svcgw.errors import STORAGE_ERRORS, GatewayError, NotFound, Refusal, Rows
from svcgw.upstream import UpstreamError

from ..credentialguard import Throttled
from ..http import BodyTooLarge, ConflictingKeys, refusal_response

__all__ = ["ROWS", "refused"]

log = logging.getLogger("svcgw.gateway")

_BEARER = {"WWW-Authenticate": "Bearer"}


def _not_found(exc: NotFound) -> Refusal:
    kind = gateway_codes.GATEWAY_NOT_FOUND.get(exc.what)
    if kind is None:
        raise exc  # a thing the gateway never looks for: a bug, not an answer
    return GatewayError(kind)


def _too_large(exc: BodyTooLarge) -> Refusal:
    return GatewayError(gateway_codes.BODY_TOO_LARGE, f"the request body is larger than {exc.limit} bytes")


def _throttled(exc: Throttled) -> Refusal:
    retry = {"Retry-After": str(exc.retry_after)}
    return GatewayError(gateway_codes.RATE_LIMITED, gateway_codes.KEYS_THROTTLED_MESSAGE, headers=retry)


ROWS: Rows[Refusal] = Rows(
    {
        GatewayError: lambda exc: exc,
        NotFound: _not_found,
        BodyTooLarge: _too_large,
        # Several different keys: no key the call can be judged by (check 2).
        ConflictingKeys: lambda exc: GatewayError(gateway_codes.UNAUTHORIZED, headers=_BEARER),
        Throttled: _throttled,
        AddressError: lambda exc: GatewayError(gateway_codes.address_kind(exc), exc.message),
        (UpstreamError, *STORAGE_ERRORS): lambda exc: GatewayError(gateway_codes.UNAVAILABLE),
    }
)


def refused(exc: Exception, module: str, action: str) -> Response:
    """The answer to a call of ``module/action`` that met ``exc``: its row of :data:`ROWS`."""
    if isinstance(exc, UpstreamError):
        log.warning("upstream %s/%s failed: %s", module, action, exc)
    elif isinstance(exc, STORAGE_ERRORS):
        log.warning("gateway storage error on %s/%s: %s", module, action, type(exc).__name__)
    return refusal_response(ROWS.answer(exc))
