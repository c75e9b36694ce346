"""Every operation of ``/openapi.json``, fuzzed in-process against the ASGI app and a real Redis.

Schemathesis reads the document from the app itself and calls each
operation with bodies, parameters and paths made from its declared types,
as the account of a real API key (the console takes the key as a session,
the gateway as its key). Every answer must be documented: no server error,
a documented status code, content type, headers and body. The examples are
few and derandomized: the run is the same every time and takes seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.strategies import SearchStrategy
from redis.asyncio import Redis as AsyncRedis
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.applications import Starlette

from receiver.app import create_app
from receiver.openapi import document
from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.receiver.gateway.stack import sim as sim  # the simulator fixture, shared with this module

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES = 6


@dataclass
class Fuzzed:
    app: Starlette
    key: str
    appid: str
    token: str


async def _developer(settings: Settings) -> tuple[str, str, str]:
    client = AsyncRedis.from_url(settings.redis_url or "", decode_responses=True)
    try:
        store = Store(client, TokenVault.from_settings(settings), keys)
        account = await store.create_account("fuzzed", devices=10)
        _, key = await store.create_key(account.id)
        appid = "we_fuzzed"
        token = await store.register_instance(appid, account.id)
        return key, appid, token
    finally:
        await client.aclose()


@pytest.fixture
def fuzzed(env: dict[str, str], sim: str) -> Iterator[Fuzzed]:
    # A few hundred calls; the rate limit is not what is under test. The capability layer is the
    # simulator, so that gateway calls and the console's QR steps reach it.
    settings = Settings.from_env({**env, "SVCGW_RATE_LIMIT": "100000/minute", "SVCGW_UPSTREAM_URL": sim})
    key, appid, token = asyncio.run(_developer(settings))
    app = create_app(settings)
    yield Fuzzed(app, key, appid, token)
    asgi.shutdown_lifespans()  # closes the app's clients, on schemathesis' event loop


def test_every_documented_operation_answers_as_documented(fuzzed: Fuzzed) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzzed.app)
    schema.config.generation.update(with_security_parameters=False, deterministic=True)
    operations = [result.ok() for result in schema.get_all_operations()]
    documented = {(method.upper(), path) for path, item in document()["paths"].items() for method in item}
    # Schemathesis leaves out the document it was loaded from; tests/receiver/test_openapi.py fetches it.
    assert {(operation.method.upper(), operation.path) for operation in operations} == documented - {
        ("GET", "/openapi.json")
    }

    headers = {"Svc-Key": fuzzed.key}
    calls = 0
    for operation in operations:
        # A path's appid and token are the account's real instance, so that calls get past the ownership
        # checks (another account's appid is fuzzed by tests/receiver/test_openapi.py).
        names = {param.name for param in operation.path_parameters}
        pinned = {name: value for name, value in (("appid", fuzzed.appid), ("token", fuzzed.token)) if name in names}
        strategy: SearchStrategy[schemathesis.Case[Any]] = operation.as_strategy(path_parameters=pinned or None)

        @hypothesis_settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def call(case: schemathesis.Case[Any]) -> None:
            nonlocal calls
            response = case.call(headers=headers)
            calls += 1
            case.validate_response(response, checks=CHECKS)

        call()
    assert calls >= len(operations)
