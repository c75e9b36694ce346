"""Where things are in raw JSON: member and item spans, over the bytes as received.

The service never re-serializes what a client or the capability layer sent:
a 19-digit integer, ``1e2`` or the whitespace of an event reach their
destination as they arrived. This module finds the byte span of each
top-level member of an object (duplicates included, in order) and of each
item of an array, so callers can cut or replace exactly those bytes.

Two layers:

* :func:`parse_object` validates a body (the standard JSON grammar; ``NaN``
  and ``Infinity`` refused; integers of any size kept exact; strict UTF-8,
  see below) and returns the parsed object with its members. It raises
  ``ValueError`` when the text is not JSON and ``TypeError`` when it is
  JSON but not an object (``RecursionError`` may escape for absurd
  nesting, as from ``json``).
* :func:`lone_surrogate` says whether a parsed value holds a string that
  is not Unicode text: the JSON grammar lets ``"\\ud800"`` through, but no
  UTF-8 encoder (Redis, ``orjson``, an HTTP header) can write it.
* :func:`members`, :func:`items` and :func:`skip_value` scan JSON that is
  already known to be valid (parsed by ``orjson`` or :func:`parse_object`);
  on anything else their result is undefined.

Offsets are byte offsets into the data given.

Errors, all ``ValueError``::

    ValueError               not JSON (``json.JSONDecodeError``, ``NaN``, ``Infinity``)
    ├── UnicodeDecodeError   the bytes are not UTF-8
    └── NotUnicode           a string escapes a lone surrogate (parse_object)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from svcgw.errors import Rejected

__all__ = [
    "Member",
    "NotUnicode",
    "items",
    "lone_surrogate",
    "members",
    "parse_object",
    "replace_member",
    "skip_value",
    "skip_ws",
]


class Member(NamedTuple):
    """One member of an object: its decoded name and where its value's bytes lie."""

    name: str
    start: int
    end: int


_WS = b" \t\r\n"
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRUCTURE = re.compile(rb'[\[\]{}"]')
_SCALAR_END = re.compile(rb"[,}\]\s]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)

# What an escaped surrogate looks like in the raw text; bodies without one
# (nearly all) need no walk over their strings.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class NotUnicode(Rejected, ValueError):
    """JSON whose strings are not Unicode text: an escaped lone surrogate such as ``"\\ud800"``."""


def lone_surrogate(value: Any, raw: bytes | None = None) -> bool:
    """Whether any string in the parsed ``value``, member names included, holds a lone surrogate.

    ``raw``, the text ``value`` was parsed from, lets the answer come from
    one scan of the bytes when they escape no surrogate at all. An escaped
    pair (``"\\ud83d\\ude00"``) is one character after parsing, not a
    surrogate.
    """
    if raw is not None and _SURROGATE_ESCAPE.search(raw) is None:
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def skip_ws(data: bytes, i: int) -> int:
    """Index of the first non-whitespace byte at or after ``i`` (``len(data)`` if none)."""
    n = len(data)
    while i < n and data[i] in _WS:
        i += 1
    return i


def skip_value(data: bytes, i: int) -> int:
    """Index just past the JSON value starting at ``i``."""
    first = data[i : i + 1]
    if first == b'"':
        match = _STRING.match(data, i)
        assert match is not None
        return match.end()
    if first in (b"{", b"["):
        depth = 0
        pos = i
        while True:
            match = _STRUCTURE.search(data, pos)
            assert match is not None
            char = match.group()
            if char == b'"':
                string = _STRING.match(data, match.start())
                assert string is not None
                pos = string.end()
                continue
            pos = match.end()
            if char in (b"{", b"["):
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    return pos
    match = _SCALAR_END.search(data, i)
    return match.start() if match else len(data)


def _name(quoted: bytes) -> str:
    # Escapes are decoded by the standard library, which accepts what the
    # grammar accepts (lone surrogates included); plain names need no parser.
    text = quoted.decode("utf-8", "surrogatepass")
    return json.loads(text) if "\\" in text else text[1:-1]


def members(data: bytes, i: int) -> list[Member]:
    """The members of the object starting at ``i``, in order, duplicates included."""
    assert data[i : i + 1] == b"{"
    found: list[Member] = []
    i = skip_ws(data, i + 1)
    if data[i : i + 1] == b"}":
        return found
    while True:
        name_end = skip_value(data, i)
        name = _name(data[i:name_end])
        i = skip_ws(data, name_end)
        i = skip_ws(data, i + 1)  # past ':'
        end = skip_value(data, i)
        found.append(Member(name, i, end))
        i = skip_ws(data, end)
        if data[i : i + 1] == b"}":
            return found
        i = skip_ws(data, i + 1)  # past ','


def items(data: bytes, start: int, end: int) -> list[bytes]:
    """The raw bytes of each item of the array spanning ``data[start:end]``."""
    found: list[bytes] = []
    i = skip_ws(data, start + 1)
    if data[i : i + 1] == b"]":
        return found
    while i < end:
        item_end = skip_value(data, i)
        found.append(data[i:item_end])
        i = skip_ws(data, item_end)
        if data[i : i + 1] == b"]":
            break
        i = skip_ws(data, i + 1)
    return found


def parse_object(raw: bytes) -> tuple[dict[str, Any], list[Member]]:
    """Parse UTF-8 JSON that must be an object, with where each top-level value is.

    The object is what parsing gives (a repeated name keeps its last value);
    the member list has every occurrence. Raises ``UnicodeDecodeError`` (a
    ``ValueError``) for bytes that are not UTF-8 (UTF-16 and UTF-32
    included), and :class:`NotUnicode` for an escaped lone surrogate.
    """
    document = _DECODER.decode(raw.decode("utf-8"))
    if not isinstance(document, dict):
        raise TypeError("the body is not a JSON object")
    if lone_surrogate(document, raw):
        raise NotUnicode("a string holds a lone surrogate")
    return document, members(raw, skip_ws(raw, 0))


def replace_member(raw: bytes, found: Iterable[Member], name: str, value: str) -> bytes:
    """``raw`` with every top-level ``name`` member's value replaced by the string ``value``.

    Only those spans change; every other byte stays as sent.
    """
    encoded = json.dumps(value).encode("utf-8")
    for member in sorted((m for m in found if m.name == name), key=lambda m: m.start, reverse=True):
        raw = raw[: member.start] + encoded + raw[member.end :]
    return raw
