"""How a route declares itself for ``/openapi.json``: its operation, with types.

Each product of the HTTP role (``receiver.endpoint``, ``receiver.gateway``,
``receiver.console``) lists its routes as :class:`Operation` values next to
the types of their requests and answers (msgspec ``Struct`` types, and
``Annotated`` types for parameters and headers). ``receiver.openapi`` turns
every operation into the document with ``msgspec.json.schema_components``:
no schema in the document is written by hand (words and security schemes are). The console
parses its request bodies with the same types (``receiver.console.requests``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar

import msgspec
from msgspec import Meta

from svcgw import errors

__all__ = [
    "JSON",
    "RETRY_AFTER",
    "Answer",
    "Error",
    "Header",
    "Ok",
    "Operation",
    "Param",
    "Segment",
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
    """One status of an operation: its body's type (None: no body; a tuple: one of them) and headers."""

    description: str
    body: Any = None
    media_type: str = JSON
    headers: Mapping[str, Header] = field(default_factory=dict)


@dataclass(frozen=True)
class Operation:
    """One method on one path.

    ``body`` is the request body's type; a tuple of types is a body that
    takes one of several forms (``oneOf``). ``security`` names the schemes of
    ``receiver.openapi`` that each let the call through; empty: none needed.
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
