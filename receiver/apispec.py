"""How a route declares itself, once (:class:`ApiRoute`), with its handler and types.

Each product of the HTTP role (``receiver.endpoint``, ``receiver.gateway``,
``receiver.console``) lists its routes as :class:`ApiRoute` values next to
the types of their requests and answers (msgspec ``Struct`` types, and
``Annotated`` types for parameters and headers). Each names the handler
that answers it: :func:`declared_routes` makes the Starlette routes from
the same table that ``receiver.openapi`` turns into the document (with
``msgspec.json.schema_components``), so a route cannot be served without
being described, or described without being served. No schema in the
document is written by hand (words and security schemes are). The console
parses its request bodies with the same types (``receiver.console.requests``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar

import msgspec
from msgspec import Meta
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from svcgw import errors

__all__ = [
    "JSON",
    "RETRY_AFTER",
    "Answer",
    "ApiRoute",
    "Error",
    "Header",
    "Ok",
    "Param",
    "RouteEndpoint",
    "Segment",
    "declared_routes",
    "error_type",
    "path_param",
]

JSON = "application/json"


class Error(msgspec.Struct, forbid_unknown_fields=True):
    """An error of the service itself. HTTP status and code correspond."""

    code: int
    message: str
    data: None


T = TypeVar("T")


class Ok(msgspec.Struct, Generic[T]):
    """A success of the console API: ``data`` is the answer."""

    code: Literal[0]
    message: Literal["ok"]
    data: T


def error_type(name: str, description: str, *kinds: errors.ErrorKind) -> type[msgspec.Struct]:
    """An :class:`Error` whose code is one of those of ``kinds``, named ``name`` in the document."""
    codes = sorted({kind.code for kind in kinds})
    kind_type = msgspec.defstruct(
        name,
        [
            ("code", Annotated[int, Meta(extra_json_schema={"enum": codes})]),
            ("message", str),
            ("data", None),
        ],
        forbid_unknown_fields=True,
        module=__name__,
    )
    kind_type.__doc__ = description
    return kind_type


@dataclass(frozen=True)
class Header:
    """An answer's header: its type, and what it means."""

    type: Any
    description: str = ""
    required: bool = True


@dataclass(frozen=True)
class Param:
    """A path or query parameter, with its type."""

    name: str
    type: Any
    where: Literal["path", "query"] = "query"
    description: str = ""


# Whole seconds, as the gateway's Retry-After header carries them.
RETRY_AFTER = Header(
    Annotated[str, Meta(pattern="^[0-9]+$")],
    "Whole seconds to wait; a call made after that long, with none in between, goes through.",
)


# One path segment as a route can match it: no "/", no line break (the mounts' ".*" stops there), and not
# "." or ".." (which a client resolves away before sending).
Segment = Annotated[str, Meta(pattern=r"^[^/\n]*[^/\n.][^/\n]*$")]


def path_param(name: str, description: str = "", type_: Any = Segment) -> Param:
    return Param(name, type_, "path", description)


@dataclass(frozen=True)
class Answer:
    """One status of a route's answers: its body's type (None: no body; a tuple: one of them) and headers."""

    description: str
    body: Any = None
    media_type: str = JSON
    headers: Mapping[str, Header] = field(default_factory=dict)


RouteEndpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class ApiRoute:
    """One method on one path, and what answers it.

    ``body`` is the request body's type; a tuple of types is a body that
    takes one of several forms (``oneOf``). ``security`` names the schemes of
    ``receiver.openapi`` that each let the call through; empty: none needed.
    ``handler`` answers the call: a module's function, or a method named on
    its class (``Gateway.api``) that :func:`declared_routes` binds to the
    object given; None for a route served otherwise (a mounted app).
    """

    method: str
    path: str
    operation_id: str
    summary: str
    answers: Mapping[int, Answer]
    description: str = ""
    security: Sequence[str] = ()
    params: Sequence[Param] = ()
    body: Any = None
    body_required: bool = True
    tags: Sequence[str] = ()
    handler: Callable[..., Awaitable[Response]] | None = None


Declared = TypeVar("Declared", bound=ApiRoute)


def declared_routes(
    table: Iterable[Declared],
    owners: Iterable[object] = (),
    *,
    prefix: str = "",
    endpoint: Callable[[Declared, Callable[..., Awaitable[Response]]], RouteEndpoint] | None = None,
) -> list[Route]:
    """The Starlette routes of the declared routes of ``table`` that have a handler, in the table's order.

    A method is bound to the one of ``owners`` whose class defines it. The
    routes are mounted at ``prefix``, which each path starts with; ``endpoint``
    wraps a bound handler as its declaration says (who may call it, say).
    """
    given = tuple(owners)
    routes: list[Route] = []
    for item in table:
        if item.handler is None:
            continue
        if not item.path.startswith(prefix):
            raise ValueError(f"{item.operation_id}: {item.path} is not under {prefix}")
        handler = _bound(item.handler, given)
        routes.append(
            Route(
                item.path.removeprefix(prefix),
                endpoint(item, handler) if endpoint else handler,
                methods=[item.method.upper()],
                name=item.operation_id,
            )
        )
    return routes


def _bound(
    handler: Callable[..., Awaitable[Response]], owners: tuple[object, ...]
) -> Callable[..., Awaitable[Response]]:
    if handler.__qualname__ == handler.__name__:  # a module's function: called as it is
        return handler
    for owner in owners:
        if getattr(type(owner), handler.__name__, None) is handler:
            bound: Callable[..., Awaitable[Response]] = getattr(owner, handler.__name__)
            return bound
    raise LookupError(f"{handler.__qualname__}: no object of its class was given to bind it to")
