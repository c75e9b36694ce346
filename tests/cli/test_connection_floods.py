"""A flood of slow bodies and idle keep-alive connections from 16 addresses, together more than the server's
cap of connections: ``svcgw serve`` sheds the idle and the slowest (cli.pressure), and a client at another
address is answered meanwhile, by the service's own routes, the gateway and the receiver."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import httpx
import pytest

from simulator.app import create_app as create_sim
from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from tests.cli.test_slow_clients import enough_descriptors
from tests.conftest import provision, with_store
from tests.receiver.floods import address
from tests.support import ThreadedServer, start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

CAP = 256  # SVCGW_HTTP_LIMIT_CONCURRENCY here: each address may hold an eighth, 32
ADDRESSES = 16  # 8 sending slow bodies, 8 holding idle keep-alive connections
WANTED = 40  # connections each flooding address tries to keep open: 640 in all, 512 past the shares
OTHER = "127.0.0.3"
# A sign-in trickled at the minimum rate (500 bytes/s, the default): under the 8 KiB cap of such bodies,
# and 16 s to send in full, longer than the flood lasts.
SLOW_BODY = 8000
SLOW_HEAD = (
    b"POST /console/api/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n{" % SLOW_BODY
)
PING = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@dataclass
class Flood:
    """The flood's own count of the connections it holds open, and the most it held at once."""

    port: int
    stop: float
    open: int = 0
    most: int = 0
    opened: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def _connect(self, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            pair = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.1)
            return None
        self.opened += 1
        self.open += 1
        self.most = max(self.most, self.open)
        return pair

    async def slow_body(self, source: str) -> None:
        """A body of SLOW_BODY bytes at 500 bytes/s, opened again whenever the server closes it."""
        while time.monotonic() < self.stop:
            pair = await self._connect(source)
            if pair is None:
                continue
            _, writer = pair
            try:
                writer.write(SLOW_HEAD)
                for _ in range(SLOW_BODY // 250):
                    await asyncio.sleep(0.5)
                    if writer.is_closing() or time.monotonic() > self.stop:
                        break
                    writer.write(b" " * 250)
            except OSError:
                pass
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(0.05)

    async def idle(self, source: str) -> None:
        """A keep-alive connection that asks for /healthz every 4 s, opened again whenever the server closes it."""
        while time.monotonic() < self.stop:
            pair = await self._connect(source)
            if pair is None:
                continue
            reader, writer = pair
            try:
                while time.monotonic() < self.stop:
                    writer.write(PING)
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                    length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
                    await reader.readexactly(length)
                    await asyncio.sleep(4.0)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, IndexError, ValueError):
                pass
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(0.05)

    def start(self) -> None:
        for number in range(ADDRESSES):
            task = self.slow_body if number % 2 == 0 else self.idle
            for _ in range(WANTED):
                self.tasks.append(asyncio.ensure_future(task(address(number))))

    async def end(self) -> None:
        self.stop = 0.0
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), 30)


@dataclass
class Calls:
    """The other client's calls: whether each was answered 2xx, and in how long."""

    outcomes: list[tuple[str, bool, float]] = field(default_factory=list)
    why: list[str] = field(default_factory=list)  # what each call that was not answered 2xx met

    def good(self, within: float) -> int:
        return sum(1 for _, ok, took in self.outcomes if ok and took < within)


async def other_client(base: str, key: str, receiver: str, seconds: float, calls: Calls) -> None:
    """/healthz, a gateway call and a receiver post, in turn, for ``seconds`` (at most 300 calls)."""
    transport = httpx.AsyncHTTPTransport(local_address=OTHER)
    async with httpx.AsyncClient(base_url=base, timeout=5, transport=transport, trust_env=False) as client:
        device = {"appid": "", "type": "iPad", "name": "t", "version": 0}
        event = b'{"event_type":"Msg","events":[{"id":"%d"}]}'

        async def send(name: str, number: int) -> httpx.Response:
            if name == "healthz":
                return await client.get("/healthz")
            if name == "gateway":
                return await client.post("/svc/api/device/create", json=device, headers={"Svc-Key": key})
            return await client.post(receiver, content=event % number)

        ends = time.monotonic() + seconds
        number = 0
        while time.monotonic() < ends and len(calls.outcomes) < 300:
            for name in ("healthz", "gateway", "receiver"):
                number += 1
                started = time.monotonic()
                try:
                    answer = await send(name, number)
                    ok = 200 <= answer.status_code < 300 and (name != "gateway" or answer.json()["code"] == 0)
                    if not ok:
                        calls.why.append(f"{name}: {answer.status_code} {answer.text[:80]}")
                except httpx.HTTPError as exc:
                    ok = False
                    calls.why.append(f"{name}: {exc!r}")
                calls.outcomes.append((name, ok, time.monotonic() - started))
            await asyncio.sleep(0.1)


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

        async def main() -> Flood:
            flood = Flood(port, time.monotonic() + 60)
            flood.start()
            try:
                # Until the server itself says it is shedding: the flood has reached its cap.
                await asyncio.to_thread(
                    wait_for, lambda: "closed to make room" in process.output(), 30, 0.2, "the server shedding"
                )
                await other_client(base, key, receiver, 10.0, calls)
            finally:
                await flood.end()
            return flood

        flood = asyncio.run(main())

    # The flood held more connections than the cap allows at once, and kept opening them.
    assert flood.most >= CAP and flood.opened > 2 * CAP, (flood.most, flood.opened)
    # The other client: at least 95 % of its calls answered 2xx within a second, each kind of call.
    failed = [(name, ok, round(took, 2)) for name, ok, took in calls.outcomes if not (ok and took < 1.0)]
    assert len(calls.outcomes) >= 30, calls.outcomes
    assert calls.good(1.0) >= 0.95 * len(calls.outcomes), (failed, calls.why)
    for name in ("healthz", "gateway", "receiver"):
        assert any(n == name and ok for n, ok, _ in calls.outcomes), name
    log = process.output()
    assert "Traceback" not in log
