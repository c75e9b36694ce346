"""The body of a gateway call: checks 4, 5, 6 and 8 of the package docstring, pure.

The body is parsed once, keeping where each top-level member's bytes are
(``svcgw.intake.rawjson``), so the instance field can be judged with duplicates
in view and ``callbackUrl`` can be rewritten without touching any other
byte of what the caller sent.
"""

from __future__ import annotations

from typing import Any, cast

from svcgw import errors
from svcgw.errors import GatewayError
from svcgw.intake.rawjson import Member, NotUnicode, parse_object

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
    "parse_body",
]

SET_CALLBACK_OPERATION = "instances/set-callback"
DEVICE_CREATE = "device/create"
LONG_START = "long/start"
UPDATE_CALLBACK = "long/updateCallbackURL"
CALLBACK_OPERATIONS = frozenset({LONG_START, UPDATE_CALLBACK, SET_CALLBACK_OPERATION})
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


def parse_body(raw: bytes) -> tuple[dict[str, Any], list[Member]]:
    """Check 4 after the size: UTF-8 JSON that is an object, or -40001.

    UTF-8 is strict: UTF-16 or UTF-32 text, and an escaped lone surrogate
    (``"\\ud800"``, which no UTF-8 encoder can write back) are not UTF-8 JSON.
    """
    try:
        return parse_object(raw)
    except (UnicodeDecodeError, NotUnicode):
        raise GatewayError(errors.APPID_MISSING, "the body is not UTF-8 JSON") from None
    except TypeError:
        raise GatewayError(errors.APPID_MISSING, "the body must be a JSON object") from None
    except (ValueError, RecursionError):
        raise GatewayError(errors.APPID_MISSING, "the body is not valid JSON") from None


def instance_id(document: dict[str, Any], members: list[Member], *, configuring: bool) -> str:
    """The instance the call is about, under checks 5 and 6."""
    names = [member.name for member in members]
    for name in names:
        if name not in INSTANCE_FIELDS and _squash(name) in _INSTANCE_SPELLINGS:
            raise GatewayError(errors.INSTANCE_FIELD, f"wrong instance field name {name[:64]!r}; send appid")
    for field in INSTANCE_FIELDS:
        if names.count(field) > 1:
            raise GatewayError(errors.INSTANCE_FIELD, f"{field} sent more than once")
    values = {field: document[field] for field in INSTANCE_FIELDS if document.get(field) is not None}
    for field, value in values.items():
        if not isinstance(value, str):
            raise GatewayError(errors.APPID_MISSING, f"{field} must be a string")
    distinct = set(values.values())
    if len(distinct) > 1:
        raise GatewayError(errors.INSTANCE_FIELD, "appid and ql_appid differ; send one instance field")
    if not distinct:
        if configuring:
            raise GatewayError(errors.CALLBACK_APPID_MISSING)
        raise GatewayError(errors.APPID_MISSING, "appid missing")
    return cast(str, distinct.pop())


def check_callback_fields(members: list[Member], operation: str) -> None:
    """Check 8: a callback field (any spelling) only where it is taken, and only spelled right."""
    for member in members:
        if _squash(member.name) in _CALLBACK_SPELLINGS and (
            operation not in CALLBACK_OPERATIONS or member.name not in CALLBACK_FIELDS
        ):
            unsupported = errors.CALLBACK_FIELD_UNSUPPORTED
            message = f"{member.name[:64]!r} is not accepted on {operation}; {unsupported.message}"
            raise GatewayError(unsupported, message)
