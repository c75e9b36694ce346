"""The console's JSON API, ``/metrics`` and ``/rq`` in ``/openapi.json``.

``receiver.openapi.document`` composes these tables with its own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONSOLE_PATHS", "CONSOLE_SCHEMAS", "CONSOLE_SECURITY_SCHEMES", "OPERATOR_PATHS"]

JSON = "application/json"
SECURITY: list[dict[str, list[str]]] = [{"ConsoleSession": []}, {"ConsoleApiKey": []}]
CHANGE_NOTE = " A change made with the session cookie needs the X-CSRF-Token header (the token from GET /session)."
COUNTED_NOTE = " It counts against the account's rate limit (SVCGW_RATE_LIMIT), shared with the gateway API."


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _ok(data: dict[str, Any] | None = None, description: str = "success") -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["code", "message", "data"],
        "properties": {"code": {"const": 0}, "message": {"const": "ok"}, "data": data or {}},
    }
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _err(description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": _ref("Error")}}}


def _responses(
    ok: dict[str, Any], *, change: bool = False, found: bool = False, bad: bool = False, counted: bool = False
) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": ok, "401": _err("code 401: not signed in")}
    if change:
        responses["403"] = _err("code -40310: CSRF token missing or wrong")
    if counted:
        limited = _err("code -42900: over the account's rate limit; retry after the seconds in Retry-After")
        limited["headers"] = {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}}
        responses["429"] = limited
    if found:
        responses["404"] = _err(
            "code -40404: no such appid, dead letter or delivery, or another account's (the same answer)"
        )
    if bad:
        responses["400"] = _err("code -40000 bad value; -40011/-40012/-40013 callback address refused")
    if change or bad:
        responses["415"] = _err("code -41500: a JSON body was expected")
    responses["503"] = _err("code -50002: storage temporarily unavailable")
    return responses


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {JSON: {"schema": schema}}}


APPID = {"name": "appid", "in": "path", "required": True, "schema": {"type": "string"}}
DELIVERY_ID = {"name": "delivery_id", "in": "path", "required": True, "schema": {"type": "string"}}
STRINGS = {"type": "array", "items": {"type": "string"}}
OPERATIONS_BODY = _body({"type": "object", "required": ["operations"], "properties": {"operations": STRINGS}})
DENIED = _ok(
    {
        "type": "object",
        "properties": {
            "denied": {**STRINGS, "description": "every operation the gateway refuses the account (both lists)"},
            "own": {**STRINGS, "description": "the account's own list, which deny and allow change"},
            "by_operator": {**STRINGS, "description": "the operator's list (svcgw accounts deny), read-only here"},
        },
    }
)


def _op(op_id: str, summary: str, ok: dict[str, Any], *, change: bool = False, **extra: Any) -> dict[str, Any]:
    found = bool(extra.pop("found", False))
    bad = bool(extra.pop("bad", False))
    counted = bool(extra.pop("counted", change))
    item: dict[str, Any] = {
        "operationId": op_id,
        "tags": ["console"],
        "summary": summary,
        "security": SECURITY,
        "responses": _responses(ok, change=change, found=found, bad=bad, counted=counted),
    }
    if change:
        note = CHANGE_NOTE + (COUNTED_NOTE if counted else "")
        item["description"] = (extra.pop("description", "") + note).strip()
    item.update(extra)
    return item


def _operator_denial(item: dict[str, Any]) -> dict[str, Any]:
    """The allow call's 403 has a second meaning: the operator denied the operation, and nothing changed."""
    item["responses"]["403"] = _err(
        "code -40310: CSRF token missing or wrong; code -40320: denied by the operator, only the operator "
        "can allow it again (nothing was changed)"
    )
    return item


def _callback_item(scope: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    found = bool(params)
    return {
        "get": _op(
            f"consoleGet{scope}Callback",
            f"The {scope.lower()} callback settings",
            _ok(_ref("ConsoleCallback")),
            parameters=params,
            found=found,
        ),
        "put": _op(
            f"consoleSet{scope}Callback",
            f"Save the {scope.lower()} callback address; a non-empty one gets one SvcCallbackTest POST",
            _ok({"type": "object", "properties": {"callback": _ref("ConsoleCallback"), "test": _ref("ConsoleTest")}}),
            change=True,
            found=found,
            bad=True,
            parameters=params,
            requestBody=_body(_ref("ConsoleCallbackRequest")),
            description=(
                "An empty url removes the address and its Bearer token. A blank bearer_token keeps the stored "
                "token while the address keeps its origin (scheme, host, port); on a new origin the token is "
                "deleted unless keep_token is true. bearer false deletes it. The address is saved even when "
                "the test fails; test is null when no test was sent."
            ),
        ),
    }


SESSION = {"type": "object", "properties": {"account": {"type": "string"}, "csrf_token": {"type": "string"}}}
LIMITED_SIGN_IN = {
    **_err("code -42900: too many failed sign-ins for the login or the address (the same message as a failure)"),
    "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
}
API_KEY: dict[str, Any] = {
    "type": "object",
    "description": "One of the account's API keys: never the key itself, except once in the answer that creates it.",
    "properties": {
        "id": {"type": "string"},
        "label": {"type": "string"},
        "prefix": {"type": "string", "description": "the key's first characters"},
        "created_at": {"type": "number"},
        "last_used": {"type": ["number", "null"], "description": "Unix seconds of the last gateway call"},
        "revoked": {"type": "boolean"},
        "revoked_at": {"type": ["number", "null"]},
    },
}
KEY_ID = {"name": "key_id", "in": "path", "required": True, "schema": {"type": "string"}}

CONSOLE_PATHS: dict[str, dict[str, Any]] = {
    "/console/api/session": {
        "post": {
            "operationId": "consoleSignIn",
            "tags": ["console"],
            "summary": "Sign in with a login and password, or an API key; sets the session cookie",
            "description": (
                "Failed sign-ins are limited per login and per client address (SVCGW_SIGNIN_FAILURES_PER_LOGIN, "
                "SVCGW_SIGNIN_FAILURES_PER_ADDRESS); every failure has the same message, whether the login "
                "exists or not. Signing in does not count against the account's rate limit."
            ),
            "security": [],
            "requestBody": _body(
                {
                    "oneOf": [
                        {
                            "type": "object",
                            "required": ["login", "password"],
                            "properties": {"login": {"type": "string"}, "password": {"type": "string"}},
                        },
                        {"type": "object", "required": ["api_key"], "properties": {"api_key": {"type": "string"}}},
                    ]
                }
            ),
            "responses": {
                "200": _ok(SESSION),
                "400": _err("code -40000: a field is missing or not a string"),
                "401": _err("code 401: login and password do not match (or API key invalid or revoked)"),
                "415": _err("code -41500: a JSON body was expected"),
                "429": LIMITED_SIGN_IN,
            },
        },
        "get": _op(
            "consoleSession",
            "Who is signed in, and the CSRF token",
            _ok(
                {
                    "type": "object",
                    "properties": {"account": {"type": "string"}, "csrf_token": {"type": ["string", "null"]}},
                }
            ),
        ),
        "delete": _op("consoleSignOut", "Sign out (ends the session)", _ok(), change=True, counted=False),
    },
    "/console/api/instances": {
        "get": _op(
            "consoleInstances", "The account's instances", _ok({"type": "array", "items": _ref("ConsoleInstance")})
        ),
    },
    "/console/api/instances/{appid}": {
        "get": _op("consoleInstance", "One instance", _ok(_ref("ConsoleInstance")), parameters=[APPID], found=True),
    },
    "/console/api/callback": _callback_item("Account", []),
    "/console/api/callback/rotate-secret": {
        "post": _op(
            "consoleRotateAccountSecret",
            "New signing secret for the account default",
            _ok(_ref("ConsoleCallback")),
            change=True,
        ),
    },
    "/console/api/instances/{appid}/callback": _callback_item("Instance", [APPID]),
    "/console/api/instances/{appid}/callback/rotate-secret": {
        "post": _op(
            "consoleRotateInstanceSecret",
            "New signing secret for the instance's own address",
            _ok(_ref("ConsoleCallback")),
            change=True,
            parameters=[APPID],
            found=True,
        ),
    },
    "/console/api/instances/{appid}/log": {
        "get": _op(
            "consoleCallbackLog",
            "The callback log: last 24 h, raw bodies as received, newest first",
            _ok(
                {
                    "type": "object",
                    "properties": {
                        "entries": {"type": "array", "items": _ref("ConsoleLogEntry")},
                        "next_before": {"type": ["string", "null"], "description": "pass as before for the next page"},
                    },
                }
            ),
            found=True,
            bad=True,
            parameters=[
                APPID,
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                {"name": "before", "in": "query", "schema": {"type": "string"}},
            ],
        ),
    },
    "/console/api/dead-letters": {
        "get": _op(
            "consoleDeadLetters",
            "Dead letters, newest first",
            _ok(
                {
                    "type": "object",
                    "properties": {
                        "dead_letters": {"type": "array", "items": {"type": "object"}},
                        "total": {"type": "integer"},
                        "limit": {"type": "integer"},
                        "offset": {"type": "integer"},
                    },
                }
            ),
            found=True,
            bad=True,
            parameters=[
                {"name": "appid", "in": "query", "schema": {"type": "string"}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
            ],
        ),
    },
    "/console/api/dead-letters/{delivery_id}": {
        "get": _op(
            "consoleDeadLetter",
            "One dead letter with its attempts (time, status, error) and body",
            _ok({"type": "object"}),
            found=True,
            parameters=[{"name": "delivery_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        ),
    },
    "/console/api/dead-letters/replay": {
        "post": _op(
            "consoleReplay",
            "Replay dead letters: the ones named, or all of one instance",
            _ok(
                {
                    "type": "object",
                    "properties": {
                        "results": {"type": "array", "items": {"type": "object"}},
                        "replayed": {"type": "integer"},
                    },
                }
            ),
            change=True,
            found=True,
            bad=True,
            requestBody=_body(
                {
                    "type": "object",
                    "properties": {
                        "ids": STRINGS,
                        "appid": {"type": "string"},
                        "since": {
                            "type": "string",
                            "description": "a duration such as 30m, 2h or 1d: only dead letters that died since",
                        },
                    },
                    "description": (
                        "exactly one of ids and appid; with since, appid is optional (every instance of the "
                        "account) and ids are not allowed"
                    ),
                }
            ),
        ),
    },
    "/console/api/instances/{appid}/deliveries": {
        "get": _op(
            "consoleDeliveries",
            "The instance's deliveries of the log's retention, newest first, with every attempt",
            _ok(
                {
                    "type": "object",
                    "properties": {
                        "deliveries": {"type": "array", "items": _ref("ConsoleDelivery")},
                        "next_before": {
                            "type": ["string", "null"],
                            "description": "pass as before for the next (older) page; null at the end",
                        },
                    },
                }
            ),
            found=True,
            bad=True,
            description=(
                "Filters combine. At most 5,000 deliveries are looked at per call: with filters that match "
                "little, a page can be short and next_before still says where to go on."
            ),
            parameters=[
                APPID,
                {"name": "state", "in": "query", "schema": {"enum": ["pending", "retrying", "delivered", "dead"]}},
                {"name": "event_type", "in": "query", "schema": {"type": "string"}},
                {"name": "event_id", "in": "query", "schema": {"type": "string"}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                {"name": "before", "in": "query", "schema": {"type": "string"}},
            ],
        ),
    },
    "/console/api/deliveries/{delivery_id}": {
        "get": _op(
            "consoleDelivery",
            "One delivery with every attempt",
            _ok(_ref("ConsoleDelivery")),
            found=True,
            parameters=[DELIVERY_ID],
        ),
    },
    "/console/api/deliveries/{delivery_id}/retry": {
        "post": _op(
            "consoleRetryNow",
            "Retry now: a retrying delivery's next attempt, at once",
            _ok(_ref("ConsoleDelivery")),
            change=True,
            found=True,
            parameters=[DELIVERY_ID],
            description=(
                "The attempt is the one the retry schedule planned next, brought forward: it counts as an "
                "attempt, and if it fails the schedule goes on from it. No body. code -40900 (409) when the "
                "delivery is not retrying (pending, delivered, dead) or its attempt is already under way."
            ),
        ),
    },
    "/console/api/failing-destinations": {
        "get": _op(
            "consoleFailing",
            "The account's destinations whose every attempt has failed for SVCGW_FAILING_AFTER seconds",
            _ok(
                {
                    "type": "object",
                    "properties": {
                        "failing": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "destination": {"type": "string", "description": "scheme://host:port"},
                                    "failing_since": {"type": "number"},
                                    "last_failure": {"type": "number"},
                                    "appids": STRINGS,
                                },
                            },
                        }
                    },
                }
            ),
            found=True,
            parameters=[{"name": "appid", "in": "query", "schema": {"type": "string"}}],
        ),
    },
    "/console/api/operations": {
        "get": _op("consoleDenied", "Controlled operations the account may not call", DENIED),
    },
    "/console/api/operations/deny": {
        "post": _op(
            "consoleDeny",
            "Deny operations (the gateway then answers 403)",
            DENIED,
            change=True,
            bad=True,
            requestBody=OPERATIONS_BODY,
        ),
    },
    "/console/api/operations/allow": {
        "post": _operator_denial(
            _op(
                "consoleAllow",
                "Allow operations again (the account's own denials; -40320 for one the operator denied)",
                DENIED,
                change=True,
                bad=True,
                requestBody=OPERATIONS_BODY,
            )
        ),
    },
}

# Signing in with a password, invitations, the account's sessions, API keys (receiver.console.account, .apikeys).
CONSOLE_PATHS.update(
    {
        "/console/api/invitation": {
            "post": {
                "operationId": "consoleAcceptInvitation",
                "tags": ["console"],
                "summary": "Choose the password with a one-time invitation (svcgw accounts invite); signs in",
                "security": [],
                "requestBody": _body(
                    {
                        "type": "object",
                        "required": ["token", "password"],
                        "properties": {"token": {"type": "string"}, "password": {"type": "string"}},
                    }
                ),
                "responses": {
                    "200": _ok(SESSION),
                    "400": _err("code -40000: the password breaks a rule (the message says which)"),
                    "410": _err("code -41000: the invitation was used, has expired or does not exist"),
                    "415": _err("code -41500: a JSON body was expected"),
                    "503": _err("code -50002: storage temporarily unavailable"),
                },
            }
        },
        "/console/api/password": {
            "put": _op(
                "consoleChangePassword",
                "Change the password; every other session of the account ends, this one stays",
                _ok({"type": "object", "properties": {"changed": {"const": True}}}),
                change=True,
                bad=True,
                requestBody=_body(
                    {
                        "type": "object",
                        "required": ["current_password", "new_password"],
                        "properties": {"current_password": {"type": "string"}, "new_password": {"type": "string"}},
                    }
                ),
                description="A wrong current password is -40330 (403) and counts as a failed sign-in.",
            ),
        },
        "/console/api/sessions": {
            "delete": _op(
                "consoleSignOutEverywhere",
                "Sign out everywhere: every session of the account ends, this one too (API keys keep working)",
                _ok(),
                change=True,
                counted=False,
            ),
        },
        "/console/api/keys": {
            "get": _op(
                "consoleKeys",
                "The account's API keys: in use first, then revoked",
                _ok({"type": "object", "properties": {"keys": {"type": "array", "items": API_KEY}}}),
            ),
            "post": _op(
                "consoleCreateKey",
                "Create an API key; the answer holds the key, shown this once",
                _ok({**API_KEY, "properties": {**API_KEY["properties"], "key": {"type": "string"}}}),
                change=True,
                bad=True,
                requestBody=_body({"type": "object", "properties": {"label": {"type": "string", "maxLength": 100}}}),
            ),
        },
        "/console/api/keys/{key_id}": {
            "delete": _op(
                "consoleRevokeKey",
                "Revoke a key: the gateway refuses the very next call made with it",
                _ok(API_KEY),
                change=True,
                found=True,
                parameters=[KEY_ID],
            ),
        },
    }
)
# A new key is answered 201.
_create_key = CONSOLE_PATHS["/console/api/keys"]["post"]["responses"]
_create_key["201"] = _create_key.pop("200")
CONSOLE_PATHS["/console/api/password"]["put"]["responses"]["403"] = _err(
    "code -40310: CSRF token missing or wrong; code -40330: the current password is wrong"
)

CONSOLE_PATHS["/console/api/deliveries/{delivery_id}/retry"]["post"]["responses"]["409"] = _err(
    "code -40900: the delivery is not retrying, or its next attempt is already under way"
)

OPERATOR_PATHS: dict[str, dict[str, Any]] = {
    "/metrics": {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics (text exposition format)",
            "security": [],
            "responses": {
                "200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
                "503": {"description": "storage unavailable"},
            },
        }
    },
    "/rq/": {
        "get": {
            "operationId": "rqDashboard",
            "summary": "rq-dashboard, read-only (only when SVCGW_DASHBOARD_USER and _PASSWORD are set)",
            "security": [{"DashboardBasic": []}],
            "responses": {
                "200": {"description": "the dashboard", "content": {"text/html": {"schema": {"type": "string"}}}},
                "401": {"description": "credentials missing or wrong"},
                "403": {"description": "a mutating dashboard endpoint; refused"},
                "404": {"description": "the dashboard is not configured"},
            },
        }
    },
}

CONSOLE_SCHEMAS: dict[str, Any] = {
    "ConsoleCallback": {
        "type": "object",
        "description": "A callback configuration. The Bearer token itself is never returned.",
        "properties": {
            "scope": {"enum": ["account", "instance"]},
            "appid": {"type": ["string", "null"]},
            "url": {"type": ["string", "null"]},
            "secret": {"type": ["string", "null"], "description": "signing secret for X-Svc-Signature"},
            "bearer": {"type": "boolean", "description": "whether a Bearer token is set"},
        },
    },
    "ConsoleCallbackRequest": {
        "type": "object",
        "required": ["url"],
        "properties": {
            "url": {"type": "string", "description": "empty removes the address and its token"},
            "bearer_token": {"type": "string", "description": "blank keeps the stored token (same origin)"},
            "bearer": {"type": "boolean", "description": "false deletes the token"},
            "keep_token": {
                "type": "boolean",
                "description": "true keeps the stored token for an address on a new origin; else it is deleted",
            },
        },
    },
    "ConsoleTest": {
        "type": ["object", "null"],
        "description": "The SvcCallbackTest POST's outcome; ok means only that the address answered 2xx.",
        "properties": {
            "ok": {"type": "boolean"},
            "event_id": {"type": "string"},
            "status": {"type": ["integer", "null"]},
            "error": {"type": ["string", "null"]},
            "duration_ms": {"type": "number"},
            "response": {"type": "string"},
        },
    },
    "ConsoleInstance": {
        "type": "object",
        "properties": {
            "appid": {"type": "string"},
            "status": {"type": "string", "description": "online, offline, stopped, logged_out or not_started"},
            "reason": {"type": ["string", "null"]},
            "action_required": {"type": ["string", "null"]},
            "forward_url": {"type": ["string", "null"]},
            "forward_source": {"enum": ["instance", "account", None]},
            "last_event_at": {"type": ["number", "null"], "description": "Unix seconds of the last post received"},
        },
    },
    "ConsoleDelivery": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "appid": {"type": "string"},
            "event_type": {"type": "string"},
            "event_ids": STRINGS,
            "state": {"enum": ["pending", "retrying", "delivered", "dead"]},
            "received_at": {"type": ["number", "null"]},
            "next_attempt_at": {
                "type": ["number", "null"],
                "description": "when the next attempt is due; null when none is scheduled (pending: at once)",
            },
            "delivered_at": {"type": ["number", "null"]},
            "dead_at": {"type": ["number", "null"]},
            "attempts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "attempt": {"type": "integer"},
                        "at": {"type": ["number", "null"]},
                        "ok": {"type": "boolean"},
                        "status": {"type": ["integer", "null"]},
                        "error": {"type": ["string", "null"]},
                        "duration_ms": {"type": ["number", "null"]},
                        "response": {"type": "string", "description": "the first 1 KB of the answer's body"},
                        "destination": {"type": ["string", "null"]},
                    },
                },
            },
        },
    },
    "ConsoleLogEntry": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "received_at": {"type": "number"},
            "body": {"type": ["string", "null"], "description": "exactly as received"},
            "accepted": {"type": "integer"},
            "duplicates": {"type": "integer"},
            "delivery_id": {"type": ["string", "null"]},
            "state": {"type": ["string", "null"], "description": "queued, retrying, delivered, dead"},
        },
    },
}

CONSOLE_SECURITY_SCHEMES: dict[str, Any] = {
    "ConsoleSession": {"type": "apiKey", "in": "cookie", "name": "svcgw_console"},
    "ConsoleApiKey": {"type": "apiKey", "in": "header", "name": "Svc-Key"},
    "DashboardBasic": {"type": "http", "scheme": "basic"},
}

