"""The console's QR login and instance actions (``receiver.console.onboarding``) in ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from .openapi import APPID, JSON, _body, _err, _ok, _op, _ref

__all__ = ["ONBOARDING_PATHS", "ONBOARDING_SCHEMAS"]

ATTEMPT = {"name": "attempt", "in": "path", "required": True, "schema": {"type": "string"}}
GATEWAY_NOTE = (
    " Each step is a gateway call made for the account with the gateway's own checks, and counts against the "
    "rate limit as that call would. A step the gateway refuses answers its status, code and message "
    "(-40402 quota, -40300 denied, -40404, -42900 with Retry-After); one the capability layer refuses answers "
    "HTTP 200 with the layer's code and a message naming the operation."
)


def _step(op_id: str, summary: str, ok: dict[str, Any], *, found: bool = True, **extra: Any) -> dict[str, Any]:
    item = _op(op_id, summary, ok, change=True, counted=False, found=found, bad=True, **extra)
    item["description"] = (item.get("description", "") + GATEWAY_NOTE).strip()
    limited = _err("code -42900: over the account's rate limit; retry after the seconds in Retry-After")
    limited["headers"] = {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}}
    item["responses"]["429"] = limited
    item["responses"]["402"] = _err("code -40402: the account's device quota is full (403: entitlement expired)")
    return item


OPTIONS = _body(
    {
        "type": "object",
        "properties": {
            "callback_url": {"type": "string", "description": "long/start's address; empty: the account default"},
            "proxy": {"type": "string", "description": "for getQr, checkQr, submitQrCode; remembered"},
        },
    }
)
DONE = {"type": "object", "properties": {"appid": {"type": "string"}}}

ONBOARDING_PATHS: dict[str, dict[str, Any]] = {
    "/console/api/instances/new": {
        "post": _step(
            "consoleNewInstance",
            "A new instance: device/create and the first QR code of its login",
            {**_ok(_ref("ConsoleLogin")), "description": "created"},
            found=False,
            requestBody=OPTIONS,
        )
    },
    "/console/api/logins/{attempt}": {
        "get": _op(
            "consoleLogin",
            "One poll of a QR login (checkQr); on status 2, long/start",
            _ok(_ref("ConsoleLogin")),
            parameters=[ATTEMPT],
            found=True,
            description="A code older than its refreshInterval that nobody scanned is replaced." + GATEWAY_NOTE,
        )
    },
    "/console/api/logins/{attempt}/code": {
        "post": _step(
            "consoleLoginCode",
            "submitQrCode with the six-digit code sent to the phone",
            _ok(_ref("ConsoleLogin")),
            parameters=[ATTEMPT],
            requestBody=_body({"type": "object", "required": ["code"], "properties": {"code": {"type": "string"}}}),
        )
    },
    "/console/api/logins/{attempt}/renew": {
        "post": _step(
            "consoleLoginRenew", "A new QR code for the login", _ok(_ref("ConsoleLogin")), parameters=[ATTEMPT]
        )
    },
    "/console/api/instances/{appid}/relogin": {
        "post": _step(
            "consoleRelogin",
            "login/reconnect and a business read; if the instance is not back, a QR login",
            _ok(
                {
                    "type": "object",
                    "properties": {
                        "recovered": {"type": "boolean"},
                        "login": {"oneOf": [_ref("ConsoleLogin"), {"type": "null"}]},
                    },
                }
            ),
            parameters=[APPID],
            requestBody={
                "required": False,
                "content": {JSON: {"schema": {"type": "object", "properties": {"proxy": {"type": "string"}}}}},
            },
        )
    },
    "/console/api/instances/{appid}/qr-login": {
        "post": _step(
            "consoleQrLogin",
            "A QR login of the instance: long/stop, its GapClosed, then getQr",
            {**_ok(_ref("ConsoleLogin")), "description": "created"},
            parameters=[APPID],
            requestBody=OPTIONS,
        )
    },
    "/console/api/instances/{appid}/stop": {"post": _step("consoleStop", "long/stop", _ok(DONE), parameters=[APPID])},
    "/console/api/instances/{appid}/start": {
        "post": _step(
            "consoleStart",
            "long/start towards the address given, the instance's own, or the account default",
            _ok(DONE),
            parameters=[APPID],
            requestBody=_body({"type": "object", "properties": {"callback_url": {"type": "string"}}}),
        )
    },
    "/console/api/instances/{appid}/logout": {
        "post": _step("consoleLogout", "login/logout: the session key is destroyed", _ok(DONE), parameters=[APPID])
    },
}

ONBOARDING_SCHEMAS: dict[str, Any] = {
    "ConsoleLogin": {
        "type": "object",
        "description": "A QR login the console runs (kept 15 minutes).",
        "properties": {
            "id": {"type": "string"},
            "appid": {"type": "string"},
            "stage": {"enum": ["closing", "qr", "done", "failed"]},
            "status": {"type": ["integer", "null"], "description": "the last checkQr status"},
            "words": {"type": ["string", "null"], "description": "the status in words"},
            "needs_code": {"type": "boolean"},
            "cancelled": {"type": "boolean"},
            "image": {"type": "string", "description": "the QR image as a data: URL (PNG, JPEG or GIF)"},
            "refresh_interval": {"type": "integer"},
            "error": {"type": "string", "description": "the last refused step"},
            "created": {"type": "boolean", "description": "the instance was created by this login"},
        },
    }
}
