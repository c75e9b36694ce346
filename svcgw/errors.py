"""The service's errors: one root, one table of ``{code, message, data: null}`` answers.

Every exception the service raises on purpose is a :class:`SvcgwError`. The
whole tree (each class's module in brackets when it is not this one)::

    SvcgwError
    ├── Refusal                  an answer to a caller: an ErrorKind (code, HTTP status, message),
    │   │                        this occurrence's message and extra headers (Retry-After)
    │   ├── GatewayError         the gateway API's and the receiver's refusals
    │   ├── PlainRefusal         the operators' endpoints' refusals (/metrics, /docs, /rq), as text
    │   └── ConsoleHTTPError     the console's refusals [receiver.console.web]
    │       └── RateLimited      a change over the account's rate limit
    ├── Rejected                 input the service cannot use; each surface picks its row
    │   ├── AddressError         a callback address against the address rules [svcgw.callbacks.addresses]
    │   ├── DestinationRejected  a further destination's value (also ValueError) [svcgw.callbacks.destinationrules]
    │   │   ├── BadEventTypes, BadRate, BadLabel, BadToken
    │   │   └── TooManyDestinations
    │   ├── EnvelopeError        a receiver post that is not an envelope [svcgw.intake.envelope]
    │   ├── NotUnicode           JSON text that is not UTF-8 [svcgw.intake.rawjson]
    │   ├── SettingsError        an SVCGW_* variable out of its range [svcgw.config.settings]
    │   ├── PasswordRejected     a password against the password rules [svcgw.registry.passwords]
    │   ├── LoginRejected, LoginTaken    a console login [svcgw.registry.credentials]
    │   ├── OperatorDenied       an operation only the operator can allow [svcgw.registry.store]
    │   ├── BodyError            a request body refused before it is read in full [receiver.http]
    │   │   ├── BodyTooLarge
    │   │   └── BadContentLength
    │   ├── ConflictingKeys      several different API keys in one request [receiver.http]
    │   └── Throttled            a credential refused unchecked: its address failed too often lately,
    │                            or no place for its check freed in time [receiver.credentialguard]
    ├── Missing                  what was asked for does not exist, or is not the caller's
    │   ├── NotFound             an account, API key, instance, delivery, dead letter or destination: ``what``
    │   │                        says which, so that each surface picks its row by it
    │   ├── UnknownReceiver      an appid and token that are no receiver [svcgw.intake.ingest]
    │   └── AttemptGone          no such QR login attempt [receiver.console.qrattempt]
    ├── DeliveryListError        [svcgw.delivery.listing]
    │   └── Invalid              a filter or page the list cannot use
    ├── RetryNowError            [svcgw.delivery.retrynow]
    │   └── NotRetrying          retry now of a delivery that is not retrying
    ├── ConsoleError             what the console's service refuses [receiver.console.service]
    │   ├── Invalid
    │   ├── DeniedByOperator
    │   └── NotRetrying
    ├── FlowError                a step of the console's QR login refused [receiver.console.qrattempt]
    ├── PageError                a console page's refusal, as an HTML page [receiver.console.pageserving]
    ├── Abandoned                the worker stops; a probe gives its claim back undecided [worker.prober]
    └── Failure                  an internal failure, not a refusal: the edge that meets it
        │                        answers with a row of the table (``raise X(...) from exc``)
        ├── UpstreamError        the capability layer [svcgw.upstream]
        │   ├── UpstreamUnreachable
        │   └── UpstreamUnusable
        ├── SendError            one delivery attempt [svcgw.callbacks.outbound]
        │   ├── Refused          the destination is refused by the address rules
        │   ├── TimedOut
        │   └── SendFailed
        ├── ReplicaNotConfirmed  (also RedisError) a post not confirmed by replicas [svcgw.intake.ingest]
        ├── EntryIdsTaken        (also RedisError) the log refused proposed entry ids [svcgw.intake.ingest]
        ├── LayoutError          the layout marker names a layout this version cannot keep [svcgw.storage.layoutversion]
        ├── _Unavailable         a probe could not ask the capability layer [worker.prober]
        ├── NoOpenShard          placement with every shard closed [svcgw.shards.placement]
        ├── ShardUnavailable     (also RedisError) a new instance's shard did not take its copies
        │                        [svcgw.registry.copies]
        └── VaultError           encryption at rest [svcgw.vault]

Classes that were ``LookupError``, ``ValueError`` or ``RedisError`` stay so,
so ``except`` clauses written against those keep working. Redis not serving
is :data:`STORAGE_ERRORS`: redis-py's ``RedisError``, and the ``RedisClusterException``
its stock Cluster client raises when no node of the Cluster answers. Two exceptions of
``svcgw.callbacks.outbound`` stay outside the tree on purpose: they are what aiohttp's
connector expects (an ``OSError``, a ``ClientConnectionError``), raised and
caught inside that module and turned into ``Refused`` there.

Answered in one place per surface. An error carries no answer of its own:
each surface has one table, a :class:`Rows`, that gives every error class it
answers its row there (a :class:`Refusal`, or a page), found along the
error's class hierarchy as Starlette finds an exception handler, and one
handler that renders it:

* the gateway API (``receiver.gateway.refusals``) and the receiver
  (``receiver.endpoint.receive``): JSON, rendered by ``receiver.http.refusal_response``;
* the console's JSON API and its pages (``receiver.console.answers``, the
  handlers of their two mounts);
* the operators' endpoints, /metrics, /docs and /rq: one line of text
  (``receiver.http.plain_answer``, the app's handler of :class:`PlainRefusal`);
* the command line (``cli.context``): exit status 1 and the message on stderr.

Route code raises; the core imports no web framework. A :class:`NotFound`
names what was not found (:data:`Thing`), and a surface picks its row by
that (:data:`GATEWAY_NOT_FOUND`, :data:`CONSOLE_NOT_FOUND`), never by the
message's words.

The table: every answer is ``{"code": ..., "message": ..., "data": null}``
with the HTTP status the spec pairs with the code, so a client may check
either. An :class:`ErrorKind` names one row.

Four parts, one per audience:

* the gateway API (:data:`ALL_KINDS`, the codes ``receiver.openapi``
  documents): the rows below down to :data:`UNAVAILABLE`;
* the receiver, where the capability layer posts events: its code is the
  negated HTTP status (``-400``, ``-404``, ``-413``, ``-422``, ``-429``), except a
  storage failure, ``-50002`` with 503 so the sender posts again
  (:data:`RECEIVER_KINDS`; :func:`receiver_kind` maps a status to its row);
* the console (:data:`CONSOLE_KINDS`, below);
* the operators' endpoints (:data:`PLAIN_KINDS`, below): not JSON but the
  message as one line of text; the code is the HTTP status.

An address that breaks the address rules (``svcgw.callbacks.addresses.AddressError``)
maps to its row with :func:`address_kind`.

``kind.status`` groups the rows the way HTTP does:

* 4xx: the caller has to change something (key, path, body, address) or
  wait (429);
* 502: the capability layer, or the service's own storage, could not be
  used; retrying later may work.

Codes the spec leaves to the service: ``-40300`` (403) for an operation
denied to the account (by the operator, or by the account in the console),
and ``-41300`` (413) for a body larger than the gateway accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import orjson
from redis.exceptions import RedisClusterException, RedisError

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
    "INSTANCE_FIELD",
    "KEYS_THROTTLED_MESSAGE",
    "NOT_FOUND",
    "OPERATION_DENIED",
    "QUOTA_FULL",
    "RATE_LIMITED",
    "RECEIVER_BAD_BODY",
    "RECEIVER_KINDS",
    "RECEIVER_LIMITED",
    "RECEIVER_NOT_ENVELOPE",
    "RECEIVER_NOT_FOUND",
    "RECEIVER_TOO_LARGE",
    "RECEIVER_UNAVAILABLE",
    "REGISTRATION_FAILED",
    "UNAUTHORIZED",
    "UNAVAILABLE",
    "ErrorKind",
    "Failure",
    "GatewayError",
    "Missing",
    "NotFound",
    "Refusal",
    "Rejected",
    "Rows",
    "SvcgwError",
    "Thing",
    "address_kind",
    "error_body",
    "receiver_kind",
]


class SvcgwError(Exception):
    """The root of every exception the service raises on purpose (the tree is above)."""


class Rejected(SvcgwError):
    """Input the service cannot use; the surface that meets it answers with its own row."""


class Missing(SvcgwError):
    """What was asked for does not exist, or is not the caller's."""


# What a NotFound says was not found; a surface picks its row by it.
Thing = Literal["account", "api key", "instance", "delivery", "dead letter", "destination"]


class NotFound(Missing, LookupError):
    """No such thing, or not the caller's; ``what`` says which thing, the message names it for a person."""

    def __init__(self, message: str, *, what: Thing) -> None:
        super().__init__(message)
        self.what: Thing = what


class Failure(SvcgwError):
    """An internal failure (not a refusal): the edge that meets it answers with a row of the table."""


@dataclass(frozen=True)
class ErrorKind:
    """One row of the table: the code, the HTTP status paired with it, the row's own message."""

    code: int
    status: int
    message: str


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

# The receiver's answers; most carry a message of their own (the reason a post is refused).
RECEIVER_BAD_BODY = ErrorKind(-400, 400, "the body is not a JSON object")
RECEIVER_NOT_FOUND = ErrorKind(-404, 404, "no such receiver")
RECEIVER_TOO_LARGE = ErrorKind(-413, 413, "the body is too large")
RECEIVER_NOT_ENVELOPE = ErrorKind(-422, 422, "the body is not an envelope")
RECEIVER_UNAVAILABLE = ErrorKind(-50002, 503, "storage temporarily unavailable, retry later")
RECEIVER_LIMITED = ErrorKind(
    -429, 429, "too many posts to receivers that do not exist from this address; retry after the time in Retry-After"
)

RECEIVER_KINDS: tuple[ErrorKind, ...] = (
    RECEIVER_BAD_BODY,
    RECEIVER_NOT_FOUND,
    RECEIVER_TOO_LARGE,
    RECEIVER_NOT_ENVELOPE,
    RECEIVER_UNAVAILABLE,
    RECEIVER_LIMITED,
)

# The gateway's row for a thing not found: an instance is -40404; the caller's own account, gone
# since its key was checked, is a key that no longer works.
GATEWAY_NOT_FOUND: Mapping[Thing, ErrorKind] = {"instance": NOT_FOUND, "account": UNAUTHORIZED}

_RECEIVER_BY_STATUS = {kind.status: kind for kind in RECEIVER_KINDS if kind.code == -kind.status}

_ADDRESS_KINDS = {kind.code: kind for kind in (CALLBACK_URL_INVALID, CALLBACK_URL_OWN, CALLBACK_URL_UNUSABLE)}


def receiver_kind(status: int) -> ErrorKind:
    """The receiver's row for a refused post with this HTTP status (code ``-status``)."""
    return _RECEIVER_BY_STATUS.get(status) or ErrorKind(-status, status, "bad request")


class _Coded(Protocol):
    code: int


def address_kind(error: _Coded) -> ErrorKind:
    """The row of an address that breaks the address rules (-40011 for a code it does not know)."""
    return _ADDRESS_KINDS.get(error.code, CALLBACK_URL_INVALID)


def error_body(code: int, message: str) -> bytes:
    return orjson.dumps({"code": code, "message": message, "data": None})


class Refusal(SvcgwError):
    """An answer to a caller: a row of the table, this occurrence's message, extra headers.

    Only the surfaces render it (see the module docstring); it holds no answer of its own.
    """

    def __init__(
        self, kind: ErrorKind, message: str | None = None, *, headers: Mapping[str, str] | None = None
    ) -> None:
        self.kind = kind
        self.message = message or kind.message
        self.headers = dict(headers or {})
        super().__init__(self.message)

    @property
    def code(self) -> int:
        return self.kind.code

    @property
    def status(self) -> int:
        return self.kind.status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind.code}, {self.message!r})"


class GatewayError(Refusal):
    """A refusal of the gateway API or of the receiver."""


class PlainRefusal(Refusal):
    """A refusal of an operators' endpoint (/metrics, /docs, /rq), answered as one line of text."""


Answer = TypeVar("Answer")


class Rows(Generic[Answer]):
    """One surface's table: the answer there to each error class it answers.

    ``rows`` maps an error class (or a tuple of them) to what makes its
    answer from the error. An error finds its row along its class's MRO,
    nearest first, as Starlette finds an exception handler, so a subclass
    may have a row of its own. :attr:`classes` are what a surface registers
    its one handler for (or catches, on a path that bypasses the router).
    """

    __slots__ = ("_rows", "classes")

    def __init__(self, rows: Mapping[type[Exception] | tuple[type[Exception], ...], Callable[[Any], Answer]]) -> None:
        table: dict[type[Exception], Callable[[Any], Answer]] = {}
        for key, row in rows.items():
            for cls in key if isinstance(key, tuple) else (key,):
                table[cls] = row
        self._rows = table
        self.classes: tuple[type[Exception], ...] = tuple(table)

    def answer(self, exc: Exception) -> Answer:
        """``exc``'s answer; ``exc`` itself is raised again when no row is its (caught by mistake: a bug)."""
        for cls in type(exc).__mro__:
            row = self._rows.get(cls)
            if row is not None:
                return row(exc)
        raise exc


# --- the console's answers ------------------------------------------------------
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
)

# The console's row for a thing not found (another account's is not found alike).
CONSOLE_NOT_FOUND: Mapping[Thing, ErrorKind] = {
    "instance": NOT_THE_CALLERS,
    "dead letter": NO_DEAD_LETTER,
    "delivery": NO_DELIVERY,
    "api key": NO_KEY,
    "destination": NO_DESTINATION,
}

__all__ += [
    "BAD_EVENT_TYPES",
    "BAD_RATE",
    "BAD_REQUEST",
    "BAD_TOKEN",
    "CONSOLE_KINDS",
    "CONSOLE_NOT_FOUND",
    "CSRF_FAILED",
    "DENIED_BY_OPERATOR",
    "GATEWAY_NOT_FOUND",
    "INVITATION_GONE",
    "KEY_REFUSED",
    "NOT_RETRYING",
    "NOT_SIGNED_IN",
    "NOT_THE_CALLERS",
    "NO_DEAD_LETTER",
    "NO_DELIVERY",
    "NO_DESTINATION",
    "NO_KEY",
    "SIGN_IN_LIMITED",
    "SIGN_IN_MESSAGE",
    "SIGN_IN_REFUSED",
    "STORAGE_UNAVAILABLE",
    "TOO_MANY_DESTINATIONS",
    "UNSUPPORTED_MEDIA",
    "WRONG_PASSWORD",
]

# --- the operators' plain answers ------------------------------------------------
# /metrics, /docs and the rq-dashboard at /rq answer in text, one line and its
# newline (``receiver.http.plain_answer``); the code is the HTTP status.
METRICS_TOKEN_REQUIRED = ErrorKind(401, 401, "a bearer token is required")
METRICS_NOT_LOCAL = ErrorKind(403, 403, "set SVCGW_METRICS_TOKEN to scrape from another host")
METRICS_UNAVAILABLE = ErrorKind(503, 503, "storage unavailable")
DOCS_NOT_FOUND = ErrorKind(404, 404, "not found")
DASHBOARD_SIGN_IN = ErrorKind(401, 401, "authentication required")
DASHBOARD_READ_ONLY = ErrorKind(
    403, 403, "the dashboard is read-only here; replay dead letters with `svcgw dlq replay` or the console"
)
DASHBOARD_NOT_FOUND = ErrorKind(404, 404, "not found in the dashboard")  # then ": " and why
DASHBOARD_NO_JOB = ErrorKind(404, 404, "no such job")
DASHBOARD_LIMITED = ErrorKind(
    429, 429, "too many wrong credentials from this address; retry after the time in Retry-After"
)
# Its text never names the Redis (the host may be in it).
DASHBOARD_UNAVAILABLE = ErrorKind(503, 503, "Redis does not answer; try again shortly")

PLAIN_KINDS: tuple[ErrorKind, ...] = (
    METRICS_TOKEN_REQUIRED,
    METRICS_NOT_LOCAL,
    METRICS_UNAVAILABLE,
    DOCS_NOT_FOUND,
    DASHBOARD_SIGN_IN,
    DASHBOARD_READ_ONLY,
    DASHBOARD_NOT_FOUND,
    DASHBOARD_NO_JOB,
    DASHBOARD_LIMITED,
    DASHBOARD_UNAVAILABLE,
)

__all__ += [
    "DASHBOARD_LIMITED",
    "DASHBOARD_NOT_FOUND",
    "DASHBOARD_NO_JOB",
    "DASHBOARD_READ_ONLY",
    "DASHBOARD_SIGN_IN",
    "DASHBOARD_UNAVAILABLE",
    "DOCS_NOT_FOUND",
    "METRICS_NOT_LOCAL",
    "METRICS_TOKEN_REQUIRED",
    "METRICS_UNAVAILABLE",
    "PLAIN_KINDS",
    "PlainRefusal",
]

# Redis not serving a command: a ``RedisError``, or, from the stock Cluster client, the
# ``RedisClusterException`` that says none of the Cluster's nodes answers (it is no RedisError).
STORAGE_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)

__all__ += ["STORAGE_ERRORS"]
