"""The service's own OpenAPI document, served at ``GET /openapi.json``.

It describes the routes this server answers: the gateway API, set-callback,
the receiver, the health checks and this document. The capability layer's
operations are not listed one by one: the gateway forwards any
``module/action`` and returns its answer as it is.

The document is static data, composed from the tables of the parts that
define routes: :data:`PATHS` and :data:`SCHEMAS` here (gateway, receiver,
health), and the console's (``receiver.console.openapi``). To describe a new
route, add its path item to the table of the module that defines it, and
that table to :func:`document`. :func:`document` assembles a fresh copy on
each call; nothing adds to another module's tables.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from svcgw import errors

from .console import onboarding_openapi as onboarding
from .console import openapi as console

__all__ = ["API_VERSION", "PATHS", "RESPONSES", "SCHEMAS", "SECURITY_SCHEMES", "document", "openapi_endpoint"]

API_VERSION = "3.2.0"

JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _codes(*kinds: errors.ErrorKind) -> list[int]:
    return sorted({kind.code for kind in kinds})


def _error_schema(codes: list[int], description: str) -> dict[str, Any]:
    return {
        "description": description,
        "allOf": [_ref("Error"), {"type": "object", "properties": {"code": {"enum": codes}}}],
    }


def _error(schema: str, description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {JSON: {"schema": _ref(schema)}}}
    if headers:
        response["headers"] = headers
    return response


RETRY_AFTER = {
    "description": "Whole seconds to wait; a call made after that long, with none in between, goes through.",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "description": "An error of the service itself. HTTP status and code correspond.",
        "required": ["code", "message", "data"],
        "properties": {
            "code": {"type": "integer"},
            "message": {"type": "string"},
            "data": {"type": "null"},
        },
        "additionalProperties": False,
    },
    "BadRequest": _error_schema(
        _codes(
            errors.APPID_MISSING,
            errors.INSTANCE_FIELD,
            errors.AMBIGUOUS_PATH,
            errors.CALLBACK_APPID_MISSING,
            errors.CALLBACK_URL_INVALID,
            errors.CALLBACK_URL_OWN,
            errors.CALLBACK_URL_UNUSABLE,
        ),
        "-40001 appid missing or body not a JSON object; -40002 wrong instance field; -40004 ambiguous path; "
        "-40010 appid missing when configuring a callback; -40011/-40012/-40013 unusable callbackUrl",
    ),
    "Unauthorized": _error_schema(_codes(errors.UNAUTHORIZED), "API key missing, invalid or revoked"),
    "QuotaFull": _error_schema(_codes(errors.QUOTA_FULL), "device quota full (device/create)"),
    "Forbidden": _error_schema(
        _codes(errors.OPERATION_DENIED, errors.ENTITLEMENT_EXPIRED, errors.CALLBACK_FIELD_UNSUPPORTED),
        "-40300 operation denied to the account; -40402 entitlement expired (device/create); "
        "-40403 callbackUrl or pushHistory on an operation that does not take them",
    ),
    "NotFound": _error_schema(_codes(errors.NOT_FOUND), "appid does not exist or is not the caller's"),
    "TooLarge": _error_schema(_codes(errors.BODY_TOO_LARGE), "request body too large"),
    "RateLimited": _error_schema(_codes(errors.RATE_LIMITED), "rate limit exceeded"),
    "Unavailable": _error_schema(
        _codes(errors.REGISTRATION_FAILED, errors.UNAVAILABLE),
        "-50000 callback registration failed; -50002 capability layer or storage unavailable",
    ),
    "Envelope": {
        "type": "object",
        "description": "The capability layer's answer, passed on byte for byte. Success is code 0.",
        "required": ["code"],
        "properties": {
            "code": {"type": "integer"},
            "message": {"type": "string"},
            "time": {"type": "string", "description": "YYYY-MM-DD HH:mm:ss"},
            "data": {"description": "Business data; object, null or absent depending on the operation."},
            "detail": {"type": "string"},
        },
    },
    "OperationRequest": {
        "type": "object",
        "description": (
            "Any JSON object with the instance identifier; forwarded as sent. Only one instance field: "
            "appid, or ql_appid with the same value. callbackUrl and pushHistory only on long/start "
            "and long/updateCallbackURL."
        ),
        "required": ["appid"],
        "properties": {"appid": {"type": "string"}, "ql_appid": {"type": "string"}},
        "additionalProperties": True,
    },
    "SetCallbackRequest": {
        "type": "object",
        "required": ["appid", "callbackUrl"],
        "properties": {
            "appid": {"type": "string"},
            "ql_appid": {"type": "string"},
            "callbackUrl": {"type": "string", "description": "public http(s) address accepting POST"},
        },
    },
    "SetCallbackAnswer": {
        "type": "object",
        "required": ["code", "message", "time", "data"],
        "properties": {
            "code": {"const": 0},
            "message": {"const": "ok"},
            "time": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$"},
            "data": {
                "type": "object",
                "required": ["appid", "callbackUrl"],
                "properties": {"appid": {"type": "string"}, "callbackUrl": {"type": "string"}},
            },
        },
    },
    "ReceiverPost": {
        "type": "object",
        "required": ["event_type", "events"],
        "properties": {
            "appid": {"type": "string"},
            "event_type": {"type": "string", "minLength": 1},
            "events": {"type": "array", "items": {"type": "object"}},
        },
    },
    "ReceiverAnswer": {
        "type": "object",
        "required": ["code", "message", "data"],
        "properties": {
            "code": {"const": 0},
            "message": {"type": "string"},
            "data": {
                "type": "object",
                "required": ["accepted", "duplicates"],
                "properties": {
                    "accepted": {"type": "integer", "minimum": 0},
                    "duplicates": {"type": "integer", "minimum": 0},
                },
            },
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}, "redis": {"type": "string"}},
    },
}

SECURITY_SCHEMES: dict[str, Any] = {
    "SvcKey": {"type": "apiKey", "in": "header", "name": "Svc-Key"},
    "XSvcKey": {"type": "apiKey", "in": "header", "name": "X-Svc-Key"},
    "Bearer": {"type": "http", "scheme": "bearer"},
}

API_KEY: list[dict[str, list[str]]] = [{"SvcKey": []}, {"XSvcKey": []}, {"Bearer": []}]

# Shared responses of the authenticated gateway routes.
RESPONSES: dict[str, Any] = {
    "400": _error("BadRequest", "invalid request"),
    "401": _error("Unauthorized", "API key missing, invalid or revoked"),
    "402": _error("QuotaFull", "device quota full (device/create)"),
    "403": _error("Forbidden", "operation not allowed"),
    "404": _error("NotFound", "appid does not exist or no access"),
    "413": _error("TooLarge", "request body too large"),
    "429": _error("RateLimited", "rate limit exceeded", {"Retry-After": RETRY_AFTER}),
    "502": _error("Unavailable", "capability layer or storage unavailable; retry later"),
}


def _gateway_responses(ok: dict[str, Any], *extra: str) -> dict[str, Any]:
    wanted = ["400", "401", "403", "404", "413", "429", "502", *extra]
    responses = {"200": ok}
    for status in sorted(wanted):
        responses[status] = {"$ref": f"#/components/responses/E{status}"}
    return responses


def _path_param(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1, **schema},
    }


PATHS: dict[str, dict[str, Any]] = {
    "/svc/api/{module}/{action}": {
        "post": {
            "operationId": "callOperation",
            "summary": "Call a capability-layer operation",
            "description": (
                "Forwards the body to the capability layer and returns its answer as it is (HTTP 200, same "
                "bytes). Any module/action is forwarded, listed or not. device/create checks the account's "
                "quota and validity and registers the new appid; long/start and long/updateCallbackURL "
                "record callbackUrl as the forward address and give the capability layer the service's "
                "receiver address instead."
            ),
            "security": API_KEY,
            "parameters": [
                _path_param("module", "operation group, e.g. message"),
                _path_param("action", "operation, e.g. sendText"),
            ],
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("OperationRequest")}}},
            "responses": _gateway_responses(
                {"description": "the capability layer's answer", "content": {JSON: {"schema": _ref("Envelope")}}},
                "402",
            ),
        }
    },
    "/svc/instances/set-callback": {
        "post": {
            "operationId": "setCallback",
            "summary": "Set the forward address of one instance",
            "description": "Stores callbackUrl as the instance's forward address; not forwarded upstream.",
            "security": API_KEY,
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("SetCallbackRequest")}}},
            "responses": _gateway_responses(
                {"description": "address stored", "content": {JSON: {"schema": _ref("SetCallbackAnswer")}}}
            ),
        }
    },
    "/svc/receiver/{appid}/{token}": {
        "post": {
            "operationId": "receiveEvents",
            "summary": "Where the capability layer posts an instance's events",
            "description": "Answers 2xx once the post is stored; the events are then forwarded to the caller.",
            "security": [],
            "parameters": [
                _path_param("appid", "the instance", pattern="^[A-Za-z0-9_-]+$"),
                _path_param("token", "the instance's secret receiver token", pattern="^[A-Za-z0-9_-]+$"),
            ],
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("ReceiverPost")}}},
            "responses": {
                "200": {"description": "stored", "content": {JSON: {"schema": _ref("ReceiverAnswer")}}},
                "400": _error("Error", "not a JSON object"),
                "404": _error("Error", "no such receiver"),
                "413": _error("Error", "body too large"),
                "422": _error("Error", "not an envelope"),
                "503": _error("Error", "storage unavailable; retry", {"Retry-After": RETRY_AFTER}),
            },
        }
    },
    "/healthz": {
        "get": {
            "operationId": "healthz",
            "summary": "The process answers",
            "security": [],
            "responses": {"200": {"description": "alive", "content": {JSON: {"schema": _ref("Health")}}}},
        }
    },
    "/readyz": {
        "get": {
            "operationId": "readyz",
            "summary": "The process can reach its storage",
            "security": [],
            "responses": {
                "200": {"description": "ready", "content": {JSON: {"schema": _ref("Health")}}},
                "503": {"description": "not ready", "content": {JSON: {"schema": _ref("Health")}}},
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {JSON: {"schema": {"type": "object"}}}}},
        }
    },
}


def document() -> dict[str, Any]:
    """A fresh copy of the whole document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "svcgw",
            "version": API_VERSION,
            "description": (
                "Enterprise messaging gateway: pass-through of capability-layer operations, per-instance "
                "receiver and signed callback forwarding. Errors of the service itself are "
                "{code, message, data: null}; HTTP status and code correspond."
            ),
        },
        "paths": copy.deepcopy(
            {**PATHS, **console.CONSOLE_PATHS, **onboarding.ONBOARDING_PATHS, **console.OPERATOR_PATHS}
        ),
        "components": {
            "schemas": copy.deepcopy({**SCHEMAS, **console.CONSOLE_SCHEMAS, **onboarding.ONBOARDING_SCHEMAS}),
            "responses": {f"E{status}": copy.deepcopy(item) for status, item in RESPONSES.items()},
            "securitySchemes": copy.deepcopy({**SECURITY_SCHEMES, **console.CONSOLE_SECURITY_SCHEMES}),
        },
    }


async def openapi_endpoint(request: Request) -> Response:
    return Response(orjson.dumps(document()), media_type="application/json")
