"""The HTTP server sheds slow clients itself: a head that drips, a body that stalls (SVCGW_HTTP_HEADER_TIMEOUT)."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from simulator.app import create_app as create_sim
from svcgw.settings import Settings, SettingsError
from svcgw.store import Store
from tests.conftest import with_store
from tests.support import ThreadedServer, start_server

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

DRIPS = 1000
TIMEOUT = 2.0  # SVCGW_HTTP_HEADER_TIMEOUT here; 10 s by default
HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"  # never ends: one more header byte now and then
BODY = (
    b"POST /console/api/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
)


@contextlib.contextmanager
def enough_descriptors(needed: int) -> Iterator[None]:
    """This process's (and its children's) limit of open files raised to ``needed`` while it runs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = soft if soft >= needed else min(needed, hard)
    if wanted < needed:
        pytest.skip(f"the open-file limit ({hard}) is below the {needed} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def closed_by_peer(conn: socket.socket) -> bool:
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_thousand_slow_clients_are_closed_and_others_answered_meanwhile(env: dict[str, str]) -> None:
    with contextlib.ExitStack() as stack:
        stack.enter_context(enough_descriptors(4 * DRIPS + 256))
        sim = ThreadedServer(create_sim()).start()
        stack.callback(sim.stop)

        async def new_key(store: Store) -> str:
            account = await store.create_account("slow clients", devices=10)
            return (await store.create_key(account.id))[1]

        key = with_store(Settings.from_env(env), new_key)
        process, base = start_server(dict(env, SVCGW_HTTP_HEADER_TIMEOUT=str(TIMEOUT), SVCGW_UPSTREAM_URL=sim.base))
        stack.callback(process.stop)
        port = int(base.rsplit(":", 1)[1])

        drips: list[tuple[socket.socket, bool]] = []  # (connection, whether its head drips)
        for number in range(DRIPS):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            stack.callback(conn.close)
            dripping = number % 2 == 0
            conn.sendall(HEAD if dripping else BODY)
            conn.setblocking(False)  # read below without waiting
            drips.append((conn, dripping))
        opened = time.monotonic()

        # Meanwhile a new client is answered at once, by the service's own routes and by the gateway.
        with httpx.Client(base_url=base, timeout=5) as client:
            started = time.monotonic()
            assert client.get("/healthz").status_code == 200
            healthz = time.monotonic() - started
            started = time.monotonic()
            created = client.post(
                "/svc/api/device/create",
                json={"appid": "", "type": "iPad", "name": "t", "version": 0},
                headers={"Svc-Key": key},
            )
            gateway = time.monotonic() - started
        assert created.status_code == 200 and created.json()["code"] == 0, created.text
        assert healthz < 1.0 and gateway < 1.0, (healthz, gateway)
        still_open = sum(1 for conn, _ in drips if not closed_by_peer(conn))
        assert still_open > DRIPS // 2, still_open  # they were open while the others were answered

        # Every drip is closed by the server within the timeout and a margin, heads dripping all along.
        deadline = opened + TIMEOUT + 8
        open_ones = list(drips)
        while open_ones and time.monotonic() < deadline:
            for conn, dripping in open_ones:
                if dripping:
                    with contextlib.suppress(OSError):
                        conn.send(b"X")
            time.sleep(0.25)
            open_ones = [(conn, dripping) for conn, dripping in open_ones if not closed_by_peer(conn)]
        assert not open_ones, f"{len(open_ones)} slow connections still open {time.monotonic() - opened:.1f} s on"


def test_the_header_timeout_has_a_default_and_refuses_nonsense() -> None:
    assert Settings.from_env({}).http_header_timeout == 10.0
    assert Settings.from_env({"SVCGW_HTTP_HEADER_TIMEOUT": "2.5"}).http_header_timeout == 2.5
    for bad in ("0", "soon"):
        with pytest.raises(SettingsError, match="SVCGW_HTTP_HEADER_TIMEOUT"):
            Settings.from_env({"SVCGW_HTTP_HEADER_TIMEOUT": bad})
