"""tests.support's ``svcgw serve`` processes: a port someone else takes first is no server of ours."""

from __future__ import annotations

import contextlib

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests import support
from tests.support import ThreadedServer, free_port, start_server

pytestmark = pytest.mark.slow


def test_a_server_port_is_outside_the_range_of_other_tests_and_outgoing_connections() -> None:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        first = int(ranges.read().split()[0])
    assert all(1024 <= free_port() < first for _ in range(20))


def test_a_port_taken_by_another_server_that_answers_is_left_for_another(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def ready(request: object) -> PlainTextResponse:
        return PlainTextResponse("someone else's")

    # Someone else's server, answering /readyz 200, on the first port the harness picks.
    other = ThreadedServer(Starlette(routes=[Route("/readyz", ready)]), port=free_port()).start()
    ports = iter([other.port, free_port()])
    monkeypatch.setattr(support, "free_port", lambda: next(ports))
    with contextlib.ExitStack() as stack:
        stack.callback(other.stop)
        process, base = start_server(env)
        stack.callback(process.stop)
        assert process.alive() and base != other.base
        assert httpx.get(base + "/readyz", trust_env=False).text != "someone else's"
