"""The gateway API's error codes: each row's code, the HTTP status the spec pairs with it, its message.

Every refusal of the gateway API is ``{"code": ..., "message": ..., "data": null}``
with the row's status, so a client may check either (``receiver.http.refusal_response``
renders it; ``receiver.gateway.refusals`` says which error gets which row).
:data:`ALL_KINDS` are the codes ``receiver.openapi`` documents. An address that
breaks the address rules (``svcgw.callbacks.addresses.AddressError``) maps to
its row with :func:`address_kind`; a thing not found by what it is
(``svcgw.errors.NotFound.what``) with :data:`GATEWAY_NOT_FOUND`.

``kind.status`` groups the rows the way HTTP does:

* 4xx: the caller has to change something (key, path, body, address) or
  wait (429);
* 502: the capability layer, or the service's own storage, could not be
  used; retrying later may work.

Codes the spec leaves to the service: ``-40300`` (403) for an operation
denied to the account (by the operator, or by the account in the console),
and ``-41300`` (413) for a body larger than the gateway accepts. The console
uses some of these rows too (the rate limit, the callback address rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from svcgw.errors import ErrorKind, Thing

__all__ = [
    "ALL_KINDS",
    "AMBIGUOUS_PATH",
    "APPID_MISSING",
    "BODY_TOO_LARGE",
    "CALLBACK_APPID_MISSING",
    "CALLBACK_FIELD_UNSUPPORTED",
    "CALLBACK_URL_INVALID",
    "CALLBACK_URL_OWN",
    "CALLBACK_URL_UNUSABLE",
    "ENTITLEMENT_EXPIRED",
    "GATEWAY_NOT_FOUND",
    "INSTANCE_FIELD",
    "KEYS_THROTTLED_MESSAGE",
    "NOT_FOUND",
    "OPERATION_DENIED",
    "QUOTA_FULL",
    "RATE_LIMITED",
    "REGISTRATION_FAILED",
    "UNAUTHORIZED",
    "UNAVAILABLE",
    "address_kind",
]

UNAUTHORIZED = ErrorKind(401, 401, "API key missing, invalid or revoked")
APPID_MISSING = ErrorKind(-40001, 400, "appid missing, or the body is not a JSON object")
INSTANCE_FIELD = ErrorKind(-40002, 400, "wrong instance field name; send appid")
AMBIGUOUS_PATH = ErrorKind(-40004, 400, "ambiguous request path; use /svc/api/{module}/{action}")
CALLBACK_APPID_MISSING = ErrorKind(-40010, 400, "appid missing when configuring a callback")
CALLBACK_URL_INVALID = ErrorKind(-40011, 400, "callbackUrl is not an http(s) address")
CALLBACK_URL_OWN = ErrorKind(-40012, 400, "callback address is the service's own receiver address")
CALLBACK_URL_UNUSABLE = ErrorKind(-40013, 400, "callback address does not resolve or is internal")
OPERATION_DENIED = ErrorKind(-40300, 403, "this operation is not enabled for the account")
QUOTA_FULL = ErrorKind(-40402, 402, "the account's device quota is full")
ENTITLEMENT_EXPIRED = ErrorKind(-40402, 403, "the account's entitlement has expired")
CALLBACK_FIELD_UNSUPPORTED = ErrorKind(
    -40403,
    403,
    "callbackUrl and pushHistory are valid only on api/long/start, api/long/updateCallbackURL and set-callback",
)
NOT_FOUND = ErrorKind(-40404, 404, "appid does not exist or no access")
BODY_TOO_LARGE = ErrorKind(-41300, 413, "the request body is too large")
RATE_LIMITED = ErrorKind(-42900, 429, "rate limit exceeded; retry after the time in Retry-After")
# RATE_LIMITED's message when the caller's address sent too many keys that are not valid (gateway, console).
KEYS_THROTTLED_MESSAGE = "too many API keys that are not valid from this address; retry after the time in Retry-After"
REGISTRATION_FAILED = ErrorKind(-50000, 502, "callback registration failed; retry later")
UNAVAILABLE = ErrorKind(-50002, 502, "service temporarily unavailable; back off and retry")

ALL_KINDS: tuple[ErrorKind, ...] = (
    UNAUTHORIZED,
    APPID_MISSING,
    INSTANCE_FIELD,
    AMBIGUOUS_PATH,
    CALLBACK_APPID_MISSING,
    CALLBACK_URL_INVALID,
    CALLBACK_URL_OWN,
    CALLBACK_URL_UNUSABLE,
    OPERATION_DENIED,
    QUOTA_FULL,
    ENTITLEMENT_EXPIRED,
    CALLBACK_FIELD_UNSUPPORTED,
    NOT_FOUND,
    BODY_TOO_LARGE,
    RATE_LIMITED,
    REGISTRATION_FAILED,
    UNAVAILABLE,
)

# The gateway's row for a thing not found: an instance is -40404; the caller's own account, gone
# since its key was checked, is a key that no longer works.
GATEWAY_NOT_FOUND: Mapping[Thing, ErrorKind] = {"instance": NOT_FOUND, "account": UNAUTHORIZED}

_ADDRESS_KINDS = {kind.code: kind for kind in (CALLBACK_URL_INVALID, CALLBACK_URL_OWN, CALLBACK_URL_UNUSABLE)}


class _Coded(Protocol):
    code: int


def address_kind(error: _Coded) -> ErrorKind:
    """The row of an address that breaks the address rules (-40011 for a code it does not know)."""
    return _ADDRESS_KINDS.get(error.code, CALLBACK_URL_INVALID)
