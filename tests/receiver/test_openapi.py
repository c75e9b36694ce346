"""The OpenAPI document, and a schemathesis run against a live server built from it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.routing import BaseRoute, Mount, Route

from receiver.apispec import Answer, ApiRoute
from receiver.app import create_app
from receiver.gateway import codes as gateway_codes
from receiver.openapi import ROUTES, document
from svcgw.config.settings import Settings
from tests.receiver.gateway.stack import Stack, start_stack
from tests.receiver.gateway.stack import sim as sim  # the simulator fixture, shared with this module

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    ]
)

OWN_PATHS = r"^/(svc/|healthz$|readyz$|openapi\.json$)"


@pytest.fixture
def fuzzed(env: dict[str, str], sim: str) -> Iterator[Stack]:
    # Schemathesis makes a few hundred calls; the rate limit is not what is under test here.
    stack = start_stack(env, sim, SVCGW_RATE_LIMIT="100000/minute")
    yield stack
    stack.stop()


def test_document_describes_every_route_and_error_code(fuzzed: Stack) -> None:
    served = httpx.get(fuzzed.base + "/openapi.json", timeout=10)
    assert served.status_code == 200 and served.headers["content-type"] == "application/json"
    doc = served.json()
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) >= {
        "/svc/api/{module}/{action}",
        "/svc/instances/set-callback",
        "/svc/receiver/{appid}/{token}",
        "/healthz",
        "/readyz",
        "/openapi.json",
    }
    text = served.text
    for kind in gateway_codes.ALL_KINDS:
        assert str(kind.code) in text, kind
    # Every local reference resolves.
    for ref in {part.split('"')[0] for part in text.split('"$ref":"#/')[1:]}:
        node = doc
        for step in ref.split("/"):
            node = node[step]


def test_operations_table_is_extensible() -> None:
    example = ApiRoute("get", "/console/example", "example", "An example", {200: Answer("ok")})
    ROUTES.append(example)
    try:
        assert "/console/example" in document()["paths"]
    finally:
        ROUTES.remove(example)
    assert "/console/example" not in document()["paths"]


def _served(routes: list[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Mount):
            found |= _served(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            found |= {(method.lower(), prefix + route.path) for method in route.methods or () if method != "HEAD"}
    return found


def test_the_app_serves_each_documented_operation_and_no_other(settings: Settings) -> None:
    served = _served(create_app(settings).routes)
    # The console's pages, its icon and /docs are for browsers, not operations; /rq/ is mounted only
    # when configured.
    browsers = ("/docs", "/console", "/favicon.ico")
    served = {(method, path) for method, path in served if not path.startswith(browsers)} | {
        (method, path) for method, path in served if path.startswith("/console/api/")
    }
    documented = {(method, path) for path, item in document()["paths"].items() for method in item}
    assert served == documented - {("get", "/rq/")}


def test_schemathesis_finds_no_server_error_or_schema_violation(fuzzed: Stack, tmp_path: Path) -> None:
    _, key = fuzzed.account(devices=None)
    appid = fuzzed.create_device(key)
    # Steer part of the generated calls at a real instance and at real operations, so they get past
    # the ownership check and reach the capability layer instead of stopping at -40404.
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        f"""
[dictionaries.appids]
values = ["{appid}"]
[dictionaries.modules]
values = ["device", "long", "login", "message", "friend", "contact"]
[dictionaries.actions]
values = ["create", "start", "stop", "check", "updateCallbackURL", "getQr", "checkQr", "reconnect",
          "logout", "sendText", "sync", "deleteSnsComment", "listTags"]
[parameters]
"body.appid" = {{ dictionary = "appids", probability = 0.8 }}
"body.ql_appid" = {{ dictionary = "appids", probability = 0.5 }}
"path.module" = {{ dictionary = "modules", probability = 0.7 }}
"path.action" = {{ dictionary = "actions", probability = 0.7 }}
""",
        encoding="utf-8",
    )
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        fuzzed.base + "/openapi.json",
        "--header",
        f"Svc-Key: {key}",
        "--checks",
        CHECKS,
        # The routes this module documents; other modules' routes are fuzzed by their own tests.
        "--include-path-regex",
        OWN_PATHS,
        "--max-examples",
        "40",
        "--seed",
        "20260904",
        "--generation-with-security-parameters",
        "false",
        "--generation-database",
        "none",
        "--request-timeout",
        "20",
        "--no-color",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=tmp_path, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "passed" in output and "failed" not in output.split("SUMMARY")[-1], output
    assert "Traceback" not in fuzzed.process.output()
