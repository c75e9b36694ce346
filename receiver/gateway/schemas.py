"""The gateway API's routes, declared once with their handlers, and their request and answer types.

The app's router and ``/openapi.json`` are both made from :data:`ROUTES`
(``receiver.apispec``). These types describe the gateway's operations for the document only. The
gateway is a byte-exact pass-through on the service's hot path: it never
decodes a request with them, and keeps its own cheap checks
(``receiver.gateway.body``) on the raw bytes, so typed parsing costs the
hot path nothing and an answer's bytes stay the capability layer's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from receiver.gateway import codes as gateway_codes

from ..apispec import RETRY_AFTER, Answer, ApiRoute, error_type, path_param
from .handlers import API_PATH, SET_CALLBACK_PATH, Gateway

__all__ = ["ROUTES"]

API_KEY = ("SvcKey", "XSvcKey", "Bearer")
Segment = Annotated[str, Meta(min_length=1)]


class OperationRequest(msgspec.Struct):
    """Any JSON object with the instance identifier; forwarded as sent.

    Only one instance field: appid, or ql_appid with the same value.
    callbackUrl and pushHistory only on long/start and long/updateCallbackURL.
    """

    appid: str
    ql_appid: str | UnsetType = UNSET


class Envelope(msgspec.Struct):
    """The capability layer's answer, passed on byte for byte. Success is code 0."""

    code: int
    message: str | UnsetType = UNSET
    time: Annotated[str, Meta(description="YYYY-MM-DD HH:mm:ss")] | UnsetType = UNSET
    data: Annotated[Any, Meta(description="Business data; object, null or absent depending on the operation.")] = UNSET
    detail: str | UnsetType = UNSET


class SetCallbackRequest(msgspec.Struct):
    """The instance, and its new forward address."""

    appid: str
    callbackUrl: Annotated[str, Meta(description="public http(s) address accepting POST")]
    ql_appid: str | UnsetType = UNSET


class CallbackSet(msgspec.Struct):
    """The instance and the address stored."""

    appid: str
    callbackUrl: str


class SetCallbackAnswer(msgspec.Struct):
    """The address is stored."""

    code: Literal[0]
    message: Literal["ok"]
    time: Annotated[str, Meta(pattern=r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")]
    data: CallbackSet


BadRequest = error_type(
    "BadRequest",
    "-40001 appid missing or body not a JSON object; -40002 wrong instance field; -40004 ambiguous path; "
    "-40010 appid missing when configuring a callback; -40011/-40012/-40013 unusable callbackUrl",
    gateway_codes.APPID_MISSING,
    gateway_codes.INSTANCE_FIELD,
    gateway_codes.AMBIGUOUS_PATH,
    gateway_codes.CALLBACK_APPID_MISSING,
    gateway_codes.CALLBACK_URL_INVALID,
    gateway_codes.CALLBACK_URL_OWN,
    gateway_codes.CALLBACK_URL_UNUSABLE,
)
Unauthorized = error_type("Unauthorized", "API key missing, invalid or revoked", gateway_codes.UNAUTHORIZED)
QuotaFull = error_type("QuotaFull", "device quota full (device/create)", gateway_codes.QUOTA_FULL)
Forbidden = error_type(
    "Forbidden",
    "-40300 operation denied to the account; -40402 entitlement expired (device/create); "
    "-40403 callbackUrl or pushHistory on an operation that does not take them",
    gateway_codes.OPERATION_DENIED,
    gateway_codes.ENTITLEMENT_EXPIRED,
    gateway_codes.CALLBACK_FIELD_UNSUPPORTED,
)
NotFound = error_type("NotFound", "appid does not exist or is not the caller's", gateway_codes.NOT_FOUND)
TooLarge = error_type("TooLarge", "request body too large", gateway_codes.BODY_TOO_LARGE)
RateLimited = error_type("RateLimited", "rate limit exceeded", gateway_codes.RATE_LIMITED)
Unavailable = error_type(
    "Unavailable",
    "-50000 callback registration failed; -50002 capability layer or storage unavailable",
    gateway_codes.REGISTRATION_FAILED,
    gateway_codes.UNAVAILABLE,
)

# The errors of every authenticated gateway route.
REFUSALS: dict[int, Answer] = {
    400: Answer("invalid request", BadRequest),
    401: Answer("API key missing, invalid or revoked", Unauthorized),
    403: Answer("operation not allowed", Forbidden),
    404: Answer("appid does not exist or no access", NotFound),
    413: Answer("request body too large", TooLarge),
    429: Answer("rate limit exceeded", RateLimited, headers={"Retry-After": RETRY_AFTER}),
    502: Answer("capability layer or storage unavailable; retry later", Unavailable),
}

ROUTES = (
    ApiRoute(
        "post",
        API_PATH,
        "callOperation",
        "Call a capability-layer operation",
        description=(
            "Forwards the body to the capability layer and returns its answer as it is (HTTP 200, same "
            "bytes). Any module/action is forwarded, listed or not. device/create checks the account's "
            "quota and validity and registers the new appid; long/start and long/updateCallbackURL "
            "record callbackUrl as the forward address and give the capability layer the service's "
            "receiver address instead."
        ),
        security=API_KEY,
        params=(
            path_param("module", "operation group, e.g. message", Segment),
            path_param("action", "operation, e.g. sendText", Segment),
        ),
        body=OperationRequest,
        answers={
            200: Answer("the capability layer's answer", Envelope),
            **REFUSALS,
            402: Answer("device quota full (device/create)", QuotaFull),
        },
        handler=Gateway.api,
    ),
    ApiRoute(
        "post",
        SET_CALLBACK_PATH,
        "setCallback",
        "Set the forward address of one instance",
        description="Stores callbackUrl as the instance's forward address; not forwarded upstream.",
        security=API_KEY,
        body=SetCallbackRequest,
        answers={200: Answer("address stored", SetCallbackAnswer), **REFUSALS},
        handler=Gateway.set_callback,
    ),
)
