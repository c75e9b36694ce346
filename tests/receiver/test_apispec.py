"""Routes made from declared operations: each bound to its owner, at its path and method, and nothing else."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount
from starlette.testclient import TestClient

from receiver.apispec import Answer, ApiRoute, RouteEndpoint, declared_routes

OK = {200: Answer("ok")}


class Greeter:
    def __init__(self, name: str) -> None:
        self.name = name

    async def greet(self, request: Request) -> Response:
        return PlainTextResponse(f"{self.name} greets {request.path_params['who']}")


class Counter:
    async def count(self, request: Request) -> Response:
        return PlainTextResponse("counted")


async def alive(request: Request) -> Response:
    return PlainTextResponse("alive")


TABLE = (
    ApiRoute("get", "/api/greet/{who}", "greet", "Greets", OK, handler=Greeter.greet),
    ApiRoute("post", "/api/count", "count", "Counts", OK, handler=Counter.count),
    ApiRoute("get", "/api/alive", "alive", "A module's function", OK, handler=alive),
    ApiRoute("get", "/api/elsewhere", "elsewhere", "Served by a mounted app", OK),
)


def test_each_declared_operation_is_routed_to_its_owners_handler() -> None:
    routes = declared_routes(TABLE, (Counter(), Greeter("ann")), prefix="/api")
    assert [(route.path, route.methods, route.name) for route in routes] == [
        ("/greet/{who}", {"GET", "HEAD"}, "greet"),
        ("/count", {"POST"}, "count"),
        ("/alive", {"GET", "HEAD"}, "alive"),
    ]
    with TestClient(Starlette(routes=[Mount("/api", routes=list(routes))])) as client:
        assert client.get("/api/greet/bob").text == "ann greets bob"
        assert client.post("/api/count").text == "counted"
        assert client.get("/api/alive").text == "alive"
        # Only the declared method, and nothing for an operation without a handler.
        assert client.get("/api/count").status_code == 405
        assert client.get("/api/elsewhere").status_code == 404


def test_a_wrapper_sees_each_operation_it_wraps() -> None:
    seen: list[str] = []

    def endpoint(item: ApiRoute, handler: RouteEndpoint) -> RouteEndpoint:
        async def wrapped(request: Request) -> Response:
            seen.append(item.operation_id)
            return await handler(request)

        return wrapped

    routes = declared_routes(TABLE[1:3], (Counter(),), endpoint=endpoint)
    with TestClient(Starlette(routes=list(routes))) as client:
        assert client.post("/api/count").text == "counted"
        assert client.get("/api/alive").text == "alive"
    assert seen == ["count", "alive"]


def test_a_method_whose_owner_is_not_given_is_refused_when_the_routes_are_made() -> None:
    with pytest.raises(LookupError, match=r"Greeter\.greet"):
        declared_routes(TABLE, (Counter(),))


def test_a_path_outside_the_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="alive: /api/alive is not under /console"):
        declared_routes(TABLE[2:3], prefix="/console")
