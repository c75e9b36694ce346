"""The service's errors: one root, one tree; each surface's codes live next to that surface.

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
    │   ├── Invalid              (also ValueError) a value given with a request that cannot be used: a filter,
    │   │                        a cursor, a form's field; the message says which (the delivery lists, the console)
    │   └── Throttled            a credential refused unchecked: its address failed too often lately,
    │                            or no place for its check freed in time [receiver.credentialguard]
    ├── Missing                  what was asked for does not exist, or is not the caller's
    │   ├── NotFound             an account, API key, instance, delivery, dead letter or destination: ``what``
    │   │                        says which, so that each surface picks its row by it
    │   ├── UnknownReceiver      an appid and token that are no receiver [svcgw.intake.ingest]
    │   └── AttemptGone          no such QR login attempt [receiver.console.qrattempt]
    ├── RetryNowError            [svcgw.delivery.retrynow]
    │   └── NotRetrying          retry now of a delivery that is not retrying
    ├── ConsoleError             what the console's service refuses [receiver.console.service]
    │   └── DeniedByOperator
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
handler that renders it. Each surface's rows (its codes, an
:class:`ErrorKind` each: the code, the HTTP status paired with it, the
row's message) live next to that surface:

* the gateway API: rows in ``receiver.gateway.codes``, table in
  ``receiver.gateway.refusals``;
* the receiver, where the capability layer posts events: rows in
  ``receiver.endpoint.codes``, table in ``receiver.endpoint.receive``;
* the console's JSON API and its pages: rows in ``receiver.console.codes``,
  tables in ``receiver.console.answers``;
* the operators' endpoints, /metrics, /docs and /rq: rows in
  ``receiver.plaincodes``, one line of text (``receiver.http.plain_answer``,
  the app's handler of :class:`PlainRefusal`);
* the command line (``cli.context``): exit status 1 and the message on stderr.

Every JSON answer is ``{"code": ..., "message": ..., "data": ...}``, built by
one serializer, ``receiver.http.answer_body``; a refusal's ``data`` is null.

Route code raises; the core imports no web framework and holds no surface's
codes. A :class:`NotFound` names what was not found (:data:`Thing`), and a
surface picks its row by that, never by the message's words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from redis.exceptions import RedisClusterException, RedisError

__all__ = [
    "STORAGE_ERRORS",
    "ErrorKind",
    "Failure",
    "GatewayError",
    "Invalid",
    "Missing",
    "NotFound",
    "PlainRefusal",
    "Refusal",
    "Rejected",
    "Rows",
    "SvcgwError",
    "Thing",
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


class Invalid(Rejected, ValueError):
    """A value given with a request that cannot be used (a filter, a cursor, a form's field); the message says which."""


class Failure(SvcgwError):
    """An internal failure (not a refusal): the edge that meets it answers with a row of the table."""


@dataclass(frozen=True)
class ErrorKind:
    """One row of the table: the code, the HTTP status paired with it, the row's own message."""

    code: int
    status: int
    message: str


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


# Redis not serving a command: a ``RedisError``, or, from the stock Cluster client, the
# ``RedisClusterException`` that says none of the Cluster's nodes answers (it is no RedisError).
STORAGE_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)
