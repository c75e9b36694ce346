"""The console's error codes: each row's code, HTTP status and message, for its JSON API and its pages.

``receiver.console.answers`` says which error gets which row and renders it
(``{code, message, data: null}`` for the JSON API, an error page for the
pages). The console also answers with some of the gateway's rows
(``receiver.gateway.codes``: the rate limit, the callback address rows).
A further destination's refused value has the row :func:`destination_kind`
gives its class.
"""

from __future__ import annotations

from collections.abc import Mapping

from svcgw.callbacks.destinationrules import BadEventTypes, BadRate, BadToken, DestinationRejected, TooManyDestinations
from svcgw.errors import ErrorKind, Thing

__all__ = [
    "BAD_EVENT_TYPES",
    "BAD_RATE",
    "BAD_REQUEST",
    "BAD_TOKEN",
    "CONSOLE_KINDS",
    "CONSOLE_NOT_FOUND",
    "CSRF_FAILED",
    "DENIED_BY_OPERATOR",
    "INVITATION_GONE",
    "KEY_REFUSED",
    "NOT_RETRYING",
    "NOT_SIGNED_IN",
    "NOT_THE_CALLERS",
    "NO_DEAD_LETTER",
    "NO_DELIVERY",
    "NO_DESTINATION",
    "NO_KEY",
    "OPEN_BODY_TOO_LARGE",
    "SIGN_IN_LIMITED",
    "SIGN_IN_MESSAGE",
    "SIGN_IN_REFUSED",
    "STORAGE_UNAVAILABLE",
    "TOO_MANY_DESTINATIONS",
    "UNSUPPORTED_MEDIA",
    "WRONG_PASSWORD",
    "destination_kind",
]

# The console (``receiver.console``) answers in the same shape, with these rows
# of its own. They stay out of ``ALL_KINDS``, which is the gateway's table. Its
# not-found has the gateway's code with its own wording, and storage trouble is
# 503 there, because the console serves itself rather than a capability layer.
#
#   code     HTTP  when
#   401      401   not signed in, or the API key given to sign in is refused
#   -40310   403   CSRF token missing or wrong
#   -40320   403   allowing an operation the operator denied (only the operator can)
#   -40404   404   no such appid or dead letter, or another account's
#   -40000   400   a value the console cannot use (the message says which)
#   -41500   415   a JSON body was expected
#   -50002   503   storage temporarily unavailable
#   -40404   404   no such delivery, or another account's
#   -40900   409   retry now asked of a delivery that is not retrying
#   401      401   login and password do not match (one message, whether the login exists or not)
#   -42900   429   too many failed sign-ins for the login or the address (the same message, Retry-After)
#   -40330   403   the current password given to change it is wrong
#   -41000   410   an invitation that was used, has expired or was never issued
#   -40404   404   no such API key, or another account's
#   -40404   404   no such further destination, or another account's
#   -40020   400   a further destination's event types are not plain event type names, or too many
#   -40021   400   a further destination's rate limit is not deliveries per second within bounds
#   -40920   409   a scope already has its most further destinations
#   -40022   400   a Bearer token (the primary address's or a further destination's) with control characters
#   -41300   413   a body sent before signing in past 8 KiB
NOT_SIGNED_IN = ErrorKind(401, 401, "sign in first: a console session or an API key is required")
KEY_REFUSED = ErrorKind(401, 401, "API key invalid or revoked")
CSRF_FAILED = ErrorKind(-40310, 403, "CSRF token missing or wrong")
DENIED_BY_OPERATOR = ErrorKind(-40320, 403, "denied by the operator; only the operator can allow it again")
NOT_THE_CALLERS = ErrorKind(-40404, 404, "appid does not exist or is not the caller's")
NO_DEAD_LETTER = ErrorKind(-40404, 404, "no such dead letter")
BAD_REQUEST = ErrorKind(-40000, 400, "bad request")
UNSUPPORTED_MEDIA = ErrorKind(-41500, 415, "send a JSON object with Content-Type: application/json")
STORAGE_UNAVAILABLE = ErrorKind(-50002, 503, "storage temporarily unavailable; retry later")
NO_DELIVERY = ErrorKind(-40404, 404, "no such delivery")
NOT_RETRYING = ErrorKind(-40900, 409, "only a retrying delivery can be retried now")
SIGN_IN_MESSAGE = (
    "That login and password do not match, or there were too many attempts: check them, "
    "and if it goes on, wait a few minutes"
)
SIGN_IN_REFUSED = ErrorKind(401, 401, SIGN_IN_MESSAGE)
SIGN_IN_LIMITED = ErrorKind(-42900, 429, SIGN_IN_MESSAGE)
WRONG_PASSWORD = ErrorKind(-40330, 403, "the current password is wrong")
INVITATION_GONE = ErrorKind(
    -41000, 410, "this invitation has expired or has already been used; ask the operator for a new one"
)
NO_KEY = ErrorKind(-40404, 404, "no such API key")
NO_DESTINATION = ErrorKind(-40404, 404, "no such destination")
BAD_EVENT_TYPES = ErrorKind(-40020, 400, "event_types must be plain event type names such as Msg or InstanceOffline")
BAD_RATE = ErrorKind(-40021, 400, "rate must be deliveries per second, more than 0, or null for no limit")
TOO_MANY_DESTINATIONS = ErrorKind(-40920, 409, "this account or instance has the most destinations it may have")
BAD_TOKEN = ErrorKind(-40022, 400, "a Bearer token must not contain control characters such as CR, LF or NUL")
# A body sent before signing in past receiver.openbodies.OPEN_BODY_BYTES (8 KiB).
OPEN_BODY_TOO_LARGE = ErrorKind(-41300, 413, "a body sent before signing in has at most 8192 bytes")

CONSOLE_KINDS: tuple[ErrorKind, ...] = (
    NOT_SIGNED_IN,
    KEY_REFUSED,
    CSRF_FAILED,
    DENIED_BY_OPERATOR,
    NOT_THE_CALLERS,
    NO_DEAD_LETTER,
    BAD_REQUEST,
    UNSUPPORTED_MEDIA,
    STORAGE_UNAVAILABLE,
    NO_DELIVERY,
    NOT_RETRYING,
    SIGN_IN_REFUSED,
    SIGN_IN_LIMITED,
    WRONG_PASSWORD,
    INVITATION_GONE,
    NO_KEY,
    NO_DESTINATION,
    BAD_EVENT_TYPES,
    BAD_RATE,
    TOO_MANY_DESTINATIONS,
    BAD_TOKEN,
    OPEN_BODY_TOO_LARGE,
)

# The console's row for a thing not found (another account's is not found alike).
CONSOLE_NOT_FOUND: Mapping[Thing, ErrorKind] = {
    "instance": NOT_THE_CALLERS,
    "dead letter": NO_DEAD_LETTER,
    "delivery": NO_DELIVERY,
    "api key": NO_KEY,
    "destination": NO_DESTINATION,
}

# A further destination's refused value, by its class (the nearest along the class hierarchy).
_DESTINATION_KINDS: Mapping[type[DestinationRejected], ErrorKind] = {
    BadEventTypes: BAD_EVENT_TYPES,
    BadRate: BAD_RATE,
    TooManyDestinations: TOO_MANY_DESTINATIONS,
    BadToken: BAD_TOKEN,
}


def destination_kind(exc: DestinationRejected) -> ErrorKind:
    """The row of a further destination's refused value: its class's, else -40000."""
    for cls in type(exc).__mro__:
        kind = _DESTINATION_KINDS.get(cls)
        if kind is not None:
            return kind
    return BAD_REQUEST
