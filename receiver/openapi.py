"""The service's own OpenAPI document, served at ``GET /openapi.json``, made from declared types.

It describes the routes this server answers: the receiver endpoint, the
gateway API, the console's JSON API, the health checks, ``/metrics``,
``/rq`` and this document. The capability layer's operations are not listed
one by one: the gateway forwards any ``module/action`` and returns its
answer as it is.

Every route is an :class:`receiver.apispec.ApiRoute` in the table of the
part that defines it (``receiver.endpoint.schemas``,
``receiver.gateway.schemas``, ``receiver.console.API_ROUTES``, and
:data:`SERVER` here), the table its router is made from too;
:data:`ROUTES` lists them. :func:`document` turns them into the
document on each call: msgspec makes every schema from the routes'
types, which are named in ``components``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, Literal

import msgspec
import orjson
from starlette.requests import Request
from starlette.responses import Response

from .apispec import JSON, Answer, ApiRoute
from .console import API_ROUTES as CONSOLE_ROUTES
from .console import consoleroute
from .endpoint import schemas as endpoint
from .gateway import schemas as gateway
from .health import healthz, readyz
from .metrics import metrics_endpoint

__all__ = ["API_VERSION", "ROUTES", "SECURITY_SCHEMES", "document", "openapi_endpoint"]

API_VERSION = "3.2.0"
REF = "#/components/schemas/{name}"


class ShardHealth(msgspec.Struct):
    """Whether one shard's Redis answers; the shard is named by its index only."""

    shard: int
    redis: Literal["ok", "unreachable"]


class Health(msgspec.Struct):
    """Whether the process, and its storage, answer.

    For /readyz, status is ok when every shard answers, degraded when shard 0
    answers and another does not (still ready), unavailable when shard 0 does
    not; redis is ok only when every shard answers; shards has each shard's
    answer, and unreachable the indexes of those that did not.
    """

    status: str
    redis: str | msgspec.UnsetType = msgspec.UNSET
    shards: list[ShardHealth] | msgspec.UnsetType = msgspec.UNSET
    unreachable: list[int] | msgspec.UnsetType = msgspec.UNSET


@functools.cache
def _served() -> bytes:
    # Made once per process: the tables do not change while it serves, and making it takes tens of ms.
    return orjson.dumps(document())


async def openapi_endpoint(request: Request) -> Response:
    return Response(_served(), media_type="application/json")


# The server's own routes; receiver.app routes them (and mounts /rq), from this table too.
SERVER: tuple[ApiRoute, ...] = (
    ApiRoute("get", "/healthz", "healthz", "The process answers", {200: Answer("alive", Health)}, handler=healthz),
    ApiRoute(
        "get",
        "/readyz",
        "readyz",
        "The process can reach its storage: every shard's Redis",
        {
            200: Answer("ready: shard 0 answers (degraded when another does not)", Health),
            503: Answer("not ready: shard 0 does not answer", Health),
        },
        handler=readyz,
    ),
    ApiRoute(
        "get",
        "/openapi.json",
        "openapi",
        "This document",
        {200: Answer("OpenAPI 3.1", dict[str, Any])},
        handler=openapi_endpoint,
    ),
    ApiRoute(
        "get",
        "/metrics",
        "metrics",
        "Prometheus metrics (text exposition format)",
        {
            200: Answer("metrics", str, "text/plain"),
            401: Answer("SVCGW_METRICS_TOKEN is set: its bearer token is required", str, "text/plain"),
            403: Answer("no SVCGW_METRICS_TOKEN: only a scrape from the host itself", str, "text/plain"),
            503: Answer("storage unavailable", str, "text/plain"),
        },
        handler=metrics_endpoint,
    ),
    ApiRoute(
        "get",
        "/rq/",
        "rqDashboard",
        "rq-dashboard, read-only (only when SVCGW_DASHBOARD_USER and _PASSWORD are set)",
        {
            200: Answer("the dashboard", str, "text/html"),
            401: Answer("credentials missing or wrong"),
            403: Answer("a mutating dashboard endpoint; refused"),
            404: Answer("the dashboard is not configured"),
        },
        security=("DashboardBasic",),
        # No handler: the dashboard is an app of its own, mounted when configured (receiver.app).
    ),
)

# Every route, in the order of the document. A new route goes in the table of the part that defines it.
ROUTES: list[ApiRoute] = [
    *gateway.ROUTES,
    *endpoint.ROUTES,
    *SERVER,
    *CONSOLE_ROUTES,
]

SECURITY_SCHEMES: dict[str, Any] = {
    "SvcKey": {"type": "apiKey", "in": "header", "name": "Svc-Key"},
    "XSvcKey": {"type": "apiKey", "in": "header", "name": "X-Svc-Key"},
    "Bearer": {"type": "http", "scheme": "bearer"},
    **consoleroute.SECURITY_SCHEMES,
}


class _Schemas:
    """The schema of every type the routes name, made in one pass so that shared types are named once."""

    def __init__(self, types: list[Any]) -> None:
        generated, self.components = msgspec.json.schema_components(types, ref_template=REF)
        self._by_id = {id(kind): schema for kind, schema in zip(types, generated, strict=True)}
        for schema in self.components.values():
            schema.pop("title", None)
            if "description" in schema:  # a docstring's lines, as one paragraph
                schema["description"] = " ".join(schema["description"].split())

    def __call__(self, kind: Any) -> dict[str, Any]:
        return dict(self._by_id[id(kind)])


def _forms(body: Any) -> tuple[Any, ...]:
    """The forms a body takes: a tuple of types is one of them, None no body."""
    return body if isinstance(body, tuple) else () if body is None else (body,)


def _types(table: Iterable[ApiRoute]) -> list[Any]:
    found: list[Any] = []
    for item in table:
        found += [param.type for param in item.params]
        found += _forms(item.body)
        for answer in item.answers.values():
            found += [header.type for header in answer.headers.values()]
            found += _forms(answer.body)
    return found


def _body(body: Any, schema: _Schemas) -> dict[str, Any]:
    forms = _forms(body)
    return schema(forms[0]) if len(forms) == 1 else {"oneOf": [schema(form) for form in forms]}


def _answer(answer: Answer, schema: _Schemas) -> dict[str, Any]:
    item: dict[str, Any] = {"description": answer.description}
    if answer.body is not None:
        item["content"] = {answer.media_type: {"schema": _body(answer.body, schema)}}
    if answer.headers:
        item["headers"] = {
            name: {
                **({"description": header.description} if header.description else {}),
                "required": header.required,
                "schema": schema(header.type),
            }
            for name, header in answer.headers.items()
        }
    return item


def _operation(item: ApiRoute, schema: _Schemas) -> dict[str, Any]:
    described: dict[str, Any] = {"operationId": item.operation_id}
    if item.tags:
        described["tags"] = list(item.tags)
    described["summary"] = item.summary
    if item.description:
        described["description"] = item.description
    described["security"] = [{name: []} for name in item.security]
    if item.params:
        described["parameters"] = [
            {
                "name": param.name,
                "in": param.where,
                **({"required": True} if param.where == "path" else {}),
                **({"description": param.description} if param.description else {}),
                "schema": schema(param.type),
            }
            for param in item.params
        ]
    if item.body is not None:
        body = _body(item.body, schema)
        described["requestBody"] = {"required": item.body_required, "content": {JSON: {"schema": body}}}
    described["responses"] = {str(status): _answer(item.answers[status], schema) for status in sorted(item.answers)}
    return described


def document() -> dict[str, Any]:
    """The whole document, made afresh from :data:`ROUTES`."""
    table = list(ROUTES)
    schema = _Schemas(_types(table))
    paths: dict[str, dict[str, Any]] = {}
    for item in table:
        paths.setdefault(item.path, {})[item.method] = _operation(item, schema)
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
        "paths": paths,
        "components": {"schemas": schema.components, "securitySchemes": dict(SECURITY_SCHEMES)},
    }
