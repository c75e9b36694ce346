"""A console API request's body, parsed with its declared type.

The types are those of ``/openapi.json`` (``receiver.console.schemas``), so
the document and the parsing cannot drift apart. msgspec checks types,
required fields and lengths; a refusal is told in the API's own words, from
the field's type: ``{name} must be a string`` (a list of strings, true or
false, a number), ``{name} is longer than {limit} characters``, always -40000 (400).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
from msgspec import inspect
from starlette.requests import Request

from receiver.console import codes as console_codes

from .web import ConsoleHTTPError, json_body

__all__ = ["parse", "parsed_body"]

T = TypeVar("T", bound=msgspec.Struct)

# The field a msgspec refusal names: "... - at `$.name`" (or `$.name[0]`), or "... required field `name`".
_FIELD = re.compile(r"at `\$\.([A-Za-z_][A-Za-z0-9_]*)|required field `([A-Za-z_][A-Za-z0-9_]*)`")


def _kinds(field_type: inspect.Type) -> list[inspect.Type]:
    """The types a field takes, without their descriptions."""
    if isinstance(field_type, inspect.Metadata):
        return _kinds(field_type.type)
    if isinstance(field_type, inspect.UnionType):
        return [kind for each in field_type.types for kind in _kinds(each)]
    return [field_type]


def _message(kind: type[msgspec.Struct], refusal: str, document: dict[str, Any]) -> str:
    found = _FIELD.search(refusal)
    info = inspect.type_info(kind)
    assert isinstance(info, inspect.StructType)
    fields = {field.encode_name: field for field in info.fields}
    if found is None or (found.group(1) or found.group(2)) not in fields:
        return refusal
    name = found.group(1) or found.group(2)
    kinds = _kinds(fields[name].type)
    value = document.get(name)
    for each in kinds:
        if isinstance(each, inspect.StrType) and isinstance(value, str) and each.max_length is not None:
            if len(value) > each.max_length:
                return f"{name} is longer than {each.max_length} characters"
    if any(isinstance(each, inspect.ListType) for each in kinds):
        return f"{name} must be a list of strings"
    if any(isinstance(each, inspect.BoolType) for each in kinds):
        return f"{name} must be true or false"
    if any(isinstance(each, inspect.FloatType | inspect.IntType) for each in kinds):
        return f"{name} must be a number" + (" or null" if any(isinstance(k, inspect.NoneType) for k in kinds) else "")
    return f"{name} must be a string"


def parse(document: dict[str, Any], kind: type[T]) -> T:
    """``document`` as a ``kind``; a refusal is -40000 (400) naming the field."""
    try:
        return msgspec.convert(document, kind)
    except msgspec.ValidationError as exc:
        raise ConsoleHTTPError(console_codes.BAD_REQUEST, _message(kind, str(exc), document)) from None


async def parsed_body(request: Request, kind: type[T]) -> T:
    """The request's JSON object (``json_body``: media type, size, syntax) as a ``kind``."""
    return parse(await json_body(request), kind)
