"""The body of a gateway call: checks 4, 5, 6 and 8 of the package docstring, pure.

The body is parsed once, keeping where each top-level member's bytes are
(``svcgw.intake.rawjson``), so the instance field can be judged with duplicates
in view and ``callbackUrl`` can be rewritten without touching any other
byte of what the caller sent.

Which operations take the callback fields is decided by :func:`takes_callback`
alone, for check 6, check 8 and the dispatch of :mod:`.forwarding` alike:
``long/start`` and ``long/updateCallbackURL`` on their API paths, and
``set-callback`` on its own route only. ``instances/set-callback`` under
``/svc/api/`` is an API operation like any unlisted one, forwarded as sent,
so it takes neither field. Whatever the checks decided, :func:`outbound_body`
is the last word on what the capability layer gets: a ``callbackUrl`` only as
the instance's receiver URL.
"""

from __future__ import annotations

from typing import Any, cast

from receiver.gateway import codes as gateway_codes
from svcgw.errors import GatewayError
from svcgw.intake.rawjson import Member, NotUnicode, parse_object, replace_member

__all__ = [
    "CALLBACK_FIELDS",
    "CALLBACK_OPERATIONS",
    "DEVICE_CREATE",
    "INSTANCE_FIELDS",
    "LONG_START",
    "SET_CALLBACK_OPERATION",
    "UPDATE_CALLBACK",
    "UPLOAD_OPERATIONS",
    "check_callback_fields",
    "instance_id",
    "outbound_body",
    "parse_body",
    "takes_callback",
]

SET_CALLBACK_OPERATION = "instances/set-callback"
DEVICE_CREATE = "device/create"
LONG_START = "long/start"
UPDATE_CALLBACK = "long/updateCallbackURL"
# The API operations that take callbackUrl and pushHistory; set-callback takes them on its own route only.
CALLBACK_OPERATIONS = frozenset({LONG_START, UPDATE_CALLBACK})
# The operations whose bodies may be up to SVCGW_UPLOAD_MAX_BODY_BYTES (a file inline); every
# other one is held to SVCGW_GATEWAY_MAX_BODY_BYTES. Spelled exactly so: another case of the
# same path gets the smaller limit.
UPLOAD_OPERATIONS = frozenset({"cdn/uploadImage", "cdn/uploadFile", "cdn/uploadVideo"})

INSTANCE_FIELDS = ("appid", "ql_appid")
CALLBACK_FIELDS = ("callbackUrl", "pushHistory")


def _squash(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


_INSTANCE_SPELLINGS = frozenset(_squash(name) for name in INSTANCE_FIELDS)
_CALLBACK_SPELLINGS = frozenset(_squash(name) for name in CALLBACK_FIELDS)
_ADDRESS_SPELLING = _squash("callbackUrl")


def takes_callback(operation: str, *, sets_callback: bool) -> bool:
    """Whether the call takes ``callbackUrl`` and ``pushHistory``.

    ``sets_callback``: the call came by the set-callback route (or the console
    asked for that operation), not by an API path that happens to spell it.
    """
    return sets_callback or operation in CALLBACK_OPERATIONS


def parse_body(raw: bytes) -> tuple[dict[str, Any], list[Member]]:
    """Check 4 after the size: UTF-8 JSON that is an object, or -40001.

    UTF-8 is strict: UTF-16 or UTF-32 text, and an escaped lone surrogate
    (``"\\ud800"``, which no UTF-8 encoder can write back) are not UTF-8 JSON.
    """
    try:
        return parse_object(raw)
    except (UnicodeDecodeError, NotUnicode):
        raise GatewayError(gateway_codes.APPID_MISSING, "the body is not UTF-8 JSON") from None
    except TypeError:
        raise GatewayError(gateway_codes.APPID_MISSING, "the body must be a JSON object") from None
    except (ValueError, RecursionError):
        raise GatewayError(gateway_codes.APPID_MISSING, "the body is not valid JSON") from None


def instance_id(document: dict[str, Any], members: list[Member], *, configuring: bool) -> str:
    """The instance the call is about, under checks 5 and 6."""
    names = [member.name for member in members]
    for name in names:
        if name not in INSTANCE_FIELDS and _squash(name) in _INSTANCE_SPELLINGS:
            raise GatewayError(gateway_codes.INSTANCE_FIELD, f"wrong instance field name {name[:64]!r}; send appid")
    for field in INSTANCE_FIELDS:
        if names.count(field) > 1:
            raise GatewayError(gateway_codes.INSTANCE_FIELD, f"{field} sent more than once")
    values = {field: document[field] for field in INSTANCE_FIELDS if document.get(field) is not None}
    for field, value in values.items():
        if not isinstance(value, str):
            raise GatewayError(gateway_codes.APPID_MISSING, f"{field} must be a string")
    distinct = set(values.values())
    if len(distinct) > 1:
        raise GatewayError(gateway_codes.INSTANCE_FIELD, "appid and ql_appid differ; send one instance field")
    if not distinct:
        if configuring:
            raise GatewayError(gateway_codes.CALLBACK_APPID_MISSING)
        raise GatewayError(gateway_codes.APPID_MISSING, "appid missing")
    return cast(str, distinct.pop())


def _unsupported(name: str, operation: str) -> GatewayError:
    unsupported = gateway_codes.CALLBACK_FIELD_UNSUPPORTED
    return GatewayError(unsupported, f"{name[:64]!r} is not accepted on {operation}; {unsupported.message}")


def check_callback_fields(members: list[Member], operation: str, *, sets_callback: bool = False) -> None:
    """Check 8: a callback field (any spelling) only where it is taken (:func:`takes_callback`), spelled right."""
    takes = takes_callback(operation, sets_callback=sets_callback)
    for member in members:
        if _squash(member.name) in _CALLBACK_SPELLINGS and (not takes or member.name not in CALLBACK_FIELDS):
            raise _unsupported(member.name, operation)


def outbound_body(raw: bytes, members: list[Member], operation: str, receiver_url: str | None) -> bytes:
    """The bytes the capability layer gets for a body of ``members``: a callbackUrl only as ``receiver_url``.

    Every ``callbackUrl`` member becomes the instance's receiver URL, every
    other byte stays as sent. Without a ``receiver_url`` (an operation that
    does not configure the instance's callback), or with the address under
    another spelling, a body that names an address is refused (-40403) rather
    than forwarded: the caller's address never reaches the capability layer,
    whatever routed the call here.
    """
    addresses = [member for member in members if _squash(member.name) == _ADDRESS_SPELLING]
    if not addresses:
        return raw
    if receiver_url is None:
        raise _unsupported(addresses[0].name, operation)
    for member in addresses:
        if member.name != "callbackUrl":
            raise _unsupported(member.name, operation)
    return replace_member(raw, addresses, "callbackUrl", receiver_url)
