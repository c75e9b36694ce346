"""A flood of slow bodies and idle keep-alive connections from 16 addresses, together more than the server's
cap of connections: ``svcgw serve`` sheds the idle and the slowest (cli.pressure), and a client at another
address is answered meanwhile, by the service's own routes, the gateway and the receiver."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from simulator.app import create_app as create_sim
from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from tests.cli.test_slow_clients import enough_descriptors
from tests.conftest import provision, with_store
from tests.connflood import Calls, FloodProcess, other_client
from tests.support import Process, ThreadedServer, start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

CAP = 256  # SVCGW_HTTP_LIMIT_CONCURRENCY here: each address may hold an eighth, 32
ADDRESSES = 16  # 8 sending slow bodies, 8 holding idle keep-alive connections
WANTED = 40  # connections each flooding address tries to keep open: 640 in all, 512 past the shares


def shedding(process: Process) -> bool:
    """Whether the server has said it closes connections to make room; what it said if it has ended."""
    if not process.alive():
        raise AssertionError(f"the server ended under the flood ({process.exit_status()}):\n{process.output()}")
    return "closed to make room" in process.output()


def test_a_flood_of_slow_bodies_and_idle_connections_from_16_addresses_leaves_others_answered(
    env: dict[str, str],
) -> None:
    with contextlib.ExitStack() as stack:
        stack.enter_context(enough_descriptors(4 * ADDRESSES * WANTED + 512))
        sim = ThreadedServer(create_sim()).start()
        stack.callback(sim.stop)
        settings = Settings.from_env(env)

        async def new_key(store: Store) -> str:
            account = await store.create_account("floods", devices=1000)
            return (await store.create_key(account.id))[1]

        key = with_store(settings, new_key)
        tenant = provision(settings)
        process, base = start_server(dict(env, SVCGW_HTTP_LIMIT_CONCURRENCY=str(CAP), SVCGW_UPSTREAM_URL=sim.base))
        stack.callback(process.stop)
        port = int(base.rsplit(":", 1)[1])
        receiver = tenant.receiver_url("")
        calls = Calls()

        flood = FloodProcess(port, ADDRESSES, WANTED)
        try:
            # Until the server itself says it is shedding: the flood has reached its cap.
            wait_for(lambda: shedding(process), 30, 0.2, "the server shedding")
            asyncio.run(other_client(base, key, receiver, 10.0, calls))
        finally:
            held = flood.end()

    # The flood held more connections than the cap allows at once, and kept opening them.
    assert held["most"] >= CAP and held["opened"] > 2 * CAP, held
    # The other client: at least 95 % of its calls answered 2xx within a second, each kind of call.
    failed = [(name, ok, round(took, 2)) for name, ok, took in calls.outcomes if not (ok and took < 1.0)]
    assert len(calls.outcomes) >= 30, calls.outcomes
    assert calls.good(1.0) >= 0.95 * len(calls.outcomes), (failed, calls.why)
    for name in ("healthz", "gateway", "receiver"):
        assert any(n == name and ok for n, ok, _ in calls.outcomes), name
    log = process.output()
    assert "Traceback" not in log
