"""The HTTP server sheds slow clients itself: a head that drips, a body that stalls (SVCGW_HTTP_HEADER_TIMEOUT)
or trickles (SVCGW_HTTP_BODY_TIMEOUT, SVCGW_HTTP_BODY_MIN_RATE), one address's connections past its share
(SVCGW_HTTP_CONNECTIONS_PER_ADDRESS)."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from simulator.app import create_app as create_sim
from svcgw.config.settings import Settings, SettingsError
from svcgw.registry.store import Store
from tests.conftest import with_store
from tests.support import ThreadedServer, start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

DRIPS = 1000
TIMEOUT = 4.0  # SVCGW_HTTP_HEADER_TIMEOUT here; 10 s by default
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
    """Whether the server has closed the connection (what it said first, a 408 say, is read and dropped)."""
    while True:
        try:
            if not conn.recv(65536, socket.MSG_DONTWAIT):
                return True
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
            # From eight addresses: each holds fewer than its share (256) of the server's connections.
            source = (f"127.0.0.{10 + number % 8}", 0)
            conn = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=source)
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
        # Well before the drips' own timeout: not queued behind them. (The server's first turns go to reading
        # the thousand connections' first bytes, which a machine busy with other work stretches towards a second.)
        assert healthz < TIMEOUT / 2 and gateway < TIMEOUT / 2, (healthz, gateway)
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


def trickle(conns: list[socket.socket], answers: list[bytes]) -> list[socket.socket]:
    """One more byte of each body; the connections the server has not closed (what closed ones were
    answered goes to ``answers``)."""
    still: list[socket.socket] = []
    for conn in conns:
        answer, closed = b"", False
        while not closed:
            try:
                chunk = conn.recv(65536)
            except BlockingIOError:
                break
            except OSError:
                closed = True
            else:
                answer += chunk
                closed = not chunk
        if closed:
            answers.append(answer)
            conn.close()
            continue
        with contextlib.suppress(OSError):
            conn.send(b" ")
        still.append(conn)
    return still


def test_a_body_trickled_at_a_byte_a_second_is_answered_408_within_30_seconds(env: dict[str, str]) -> None:
    # The defaults: a body must be in 20 s after its head, a second more for every 500 bytes received.
    process, base = start_server(env)
    try:
        with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=5) as conn:
            conn.sendall(BODY.replace(b"Content-Length: 100", b"Content-Length: 1000"))
            started = time.monotonic()
            conn.setblocking(False)
            answer = b""
            while time.monotonic() - started < 35:
                # JSON whitespace, a byte a second: never a stall, yet 35 bytes in 35 s.
                with contextlib.suppress(OSError):
                    conn.send(b" ")
                time.sleep(1.0)
                with contextlib.suppress(BlockingIOError, ConnectionResetError):
                    chunk = conn.recv(65536)
                    answer += chunk
                    if not chunk:
                        break
            elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408 "), f"{answer!r} after {elapsed:.1f} s"
        assert elapsed < 30, elapsed
        # The app heard a disconnect: an info line, not an error with a traceback.
        wait_for(lambda: "ended before its body arrived" in process.output(), timeout=5, what="the info line")
        assert "Traceback" not in process.output() and '"level":"error"' not in process.output()
    finally:
        process.stop()


TRICKLES = 2100


def test_2100_trickling_bodies_from_one_address_leave_the_server_to_others(env: dict[str, str]) -> None:
    with contextlib.ExitStack() as stack:
        stack.enter_context(enough_descriptors(TRICKLES + 512))
        sim = ThreadedServer(create_sim()).start()
        stack.callback(sim.stop)

        async def new_key(store: Store) -> str:
            account = await store.create_account("trickles", devices=10)
            return (await store.create_key(account.id))[1]

        key = with_store(Settings.from_env(env), new_key)
        process, base = start_server(dict(env, SVCGW_UPSTREAM_URL=sim.base))  # the default limits
        stack.callback(process.stop)
        port = int(base.rsplit(":", 1)[1])
        # Another client: its own address (127.0.0.1 is the attacker's neighbour, 127.0.0.2 the attacker).
        client = stack.enter_context(
            httpx.Client(base_url=base, timeout=5, transport=httpx.HTTPTransport(local_address="127.0.0.3"))
        )
        waits: list[float] = []

        def healthz() -> None:
            started = time.monotonic()
            answer = client.get("/healthz", headers={"Connection": "close"})
            waits.append(time.monotonic() - started)
            assert answer.status_code == 200, (len(waits), answer.status_code, answer.text)
            assert waits[-1] < 2.0, (len(waits), waits[-1])

        conns: list[socket.socket] = []
        opened = time.monotonic()
        for number in range(TRICKLES):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
            stack.callback(conn.close)
            with contextlib.suppress(OSError):  # past its share, the server may have closed it already
                conn.sendall(BODY.replace(b"Content-Length: 100", b"Content-Length: 1000"))
            conn.setblocking(False)
            conns.append(conn)
            if number % 100 == 0:
                healthz()

        # A byte or two a second on each; the other client is answered at once all along, gateway included.
        refused: list[bytes] = []
        while time.monotonic() - opened < 8:
            conns = trickle(conns, refused)
            healthz()
            time.sleep(0.5)
        created = client.post(
            "/svc/api/device/create",
            json={"appid": "", "type": "iPad", "name": "t", "version": 0},
            headers={"Svc-Key": key},
        )
        assert created.status_code == 200 and created.json()["code"] == 0, created.text
        # The attacker holds its share of the server's 2,048 connections, and no more: the rest were
        # closed at once, unanswered.
        assert 200 <= len(conns) <= 256 and len(refused) == TRICKLES - len(conns), (len(conns), len(refused))
        assert not any(refused)

        # Every body is answered 408 by its deadline (20 s, and a second per 500 bytes), trickling to the end.
        held = len(conns)
        timed_out: list[bytes] = []
        while conns and time.monotonic() - opened < 30:
            conns = trickle(conns, timed_out)
            healthz()
            time.sleep(0.5)
        assert not conns, f"{len(conns)} trickling bodies still open {time.monotonic() - opened:.1f} s on"
        # A byte sent after the server's 408 and close can meet a reset that drops the 408 unread (the
        # kernel discards what the reset overtakes), on a busy machine more often: every answer read is
        # a 408, and most are read.
        answered = [answer for answer in timed_out if answer]
        assert len(timed_out) == held and all(answer.startswith(b"HTTP/1.1 408 ") for answer in answered)
        assert len(answered) >= held // 2, (len(answered), held)
        assert max(waits) < 2.0 and len(waits) > 40, (len(waits), max(waits))
        log = process.output()
        assert "Traceback" not in log and "client 127.0.0.2 holds 256 connections" in log


def test_the_header_timeout_has_a_default_and_refuses_nonsense() -> None:
    assert Settings.from_env({}).http_header_timeout == 10.0
    assert Settings.from_env({"SVCGW_HTTP_HEADER_TIMEOUT": "2.5"}).http_header_timeout == 2.5
    for bad in ("0", "soon"):
        with pytest.raises(SettingsError, match="SVCGW_HTTP_HEADER_TIMEOUT"):
            Settings.from_env({"SVCGW_HTTP_HEADER_TIMEOUT": bad})
