"""receiver.credentialguard: on its own (known credentials pass, others a few at a time, failures counted per
address), then the receiver, the gateway and the console's JSON API behind it, over real HTTP against a real
Redis, and a flood of bogus credentials against a real ``svcgw serve`` that never starves real traffic."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator

import httpx
import orjson
import pytest
from limits.storage import MemoryStorage
from redis.exceptions import ConnectionError as RedisConnectionError

from receiver.app import create_app
from receiver.credentialguard import BUSY_SECONDS, PER_ADDRESS, CheckRoom, CredentialGuard, Throttled
from receiver.endpoint import codes as receiver_codes
from receiver.gateway import codes as gateway_codes
from simulator.app import create_app as create_sim
from svcgw.config.settings import Settings
from tests.receiver.console.conftest import make_developer
from tests.receiver.floods import flood, request
from tests.support import Process, ThreadedServer, free_port, wait_ready_or_stop

POST = orjson.dumps({"event_type": "Msg", "events": [{"id": "flood", "content": "hello"}]})


# --- the guard on its own ---------------------------------------------------------------


def guard(failures: str = "3/minute", *, total: int = 100, wait: float = 5.0) -> CredentialGuard:
    return CredentialGuard("API key", failures, CheckRoom(total, PER_ADDRESS, wait), MemoryStorage())


class Verifier:
    """A check of credentials: the valid ones, how many checks ran, at most how many at once."""

    def __init__(self, valid: set[str], pause: float = 0.0, counted_in: Verifier | None = None) -> None:
        self.valid = valid
        self.pause = pause
        self.counted_in = counted_in  # a Verifier that counts this one's checks with its own
        self.checked: list[str] = []
        self.running = 0
        self.most = 0

    def _count(self, step: int) -> None:
        self.running += step
        self.most = max(self.most, self.running)
        if self.counted_in is not None:
            self.counted_in._count(step)

    def __call__(self, credential: str) -> Callable[[], Awaitable[str | None]]:
        async def verify() -> str | None:
            self.checked.append(credential)
            self._count(1)
            try:
                await asyncio.sleep(self.pause)
                return "account" if credential in self.valid else None
            finally:
                self._count(-1)

        return verify


def test_an_address_that_fails_too_often_is_refused_unchecked_and_no_other_address_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        keys, verifier = guard("3/minute"), Verifier({"real"})
        for number in range(3):
            assert await keys.check("192.0.2.1", f"made-up-{number}", verifier(f"made-up-{number}")) is None
        with pytest.raises(Throttled) as refused:
            await keys.check("192.0.2.1", "made-up-3", verifier("made-up-3"))
        assert 1 <= refused.value.retry_after <= 60
        # Refused before its check: the real key, never seen valid, waits for the window like the rest.
        with pytest.raises(Throttled):
            await keys.check("192.0.2.1", "real", verifier("real"))
        assert verifier.checked == ["made-up-0", "made-up-1", "made-up-2"]
        # Another address is not held up by that one's failures.
        assert await keys.check("192.0.2.2", "real", verifier("real")) == "account"

    with caplog.at_level(logging.WARNING, logger="svcgw"):
        asyncio.run(main())
    # Said once, when the window filled, naming the client and the limit (and no credential).
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "client 192.0.2.1 sent too many API keys that are not valid (3/minute); the ones not found valid lately "
        "are refused until its window has room"
    ]


def test_a_credential_found_valid_passes_even_from_a_refused_address_and_is_forgotten_when_it_fails() -> None:
    async def main() -> None:
        keys, verifier = guard("2/minute"), Verifier({"real"})
        assert await keys.check("192.0.2.9", "real", verifier("real")) == "account"
        assert keys.known("real") and not keys.known("made-up")
        for number in range(2):
            await keys.check("192.0.2.1", f"made-up-{number}", verifier(f"made-up-{number}"))
        with pytest.raises(Throttled):
            await keys.check("192.0.2.1", "made-up-2", verifier("made-up-2"))
        # Known valid: checked (every time) and let through, from the refused address too.
        assert await keys.check("192.0.2.1", "real", verifier("real")) == "account"
        assert verifier.checked.count("real") == 2
        # Revoked since: its check fails, and it is known no more.
        verifier.valid.clear()
        assert await keys.check("192.0.2.1", "real", verifier("real")) is None
        assert not keys.known("real")
        with pytest.raises(Throttled):
            await keys.check("192.0.2.1", "real", verifier("real"))

    asyncio.run(main())


def test_an_error_of_the_check_is_no_failure_of_the_credential() -> None:
    async def main() -> None:
        keys = guard("1/minute")

        async def unreachable() -> str | None:
            raise RedisConnectionError("down")

        for _ in range(3):
            with pytest.raises(RedisConnectionError):
                await keys.check("192.0.2.1", "made-up", unreachable)
        assert await keys.check("192.0.2.1", "made-up", Verifier(set())("made-up")) is None  # the window had room

    asyncio.run(main())


def test_unknown_credentials_are_checked_a_few_at_a_time_per_address_and_in_all_the_others_wait_their_turn() -> None:
    async def main() -> tuple[Verifier, Verifier, list[str | None]]:
        keys = guard("1000/minute", total=PER_ADDRESS + 2)
        everyone = Verifier(set(), pause=0.02)
        one, many = Verifier(set(), 0.02, everyone), Verifier(set(), 0.02, everyone)
        flood = [keys.check("192.0.2.1", f"made-up-{n}", one(f"made-up-{n}")) for n in range(5 * PER_ADDRESS)]
        others = [keys.check(f"192.0.2.{100 + n}", f"other-{n}", many(f"other-{n}")) for n in range(10)]
        outcomes = await asyncio.gather(*flood, *others)
        return one, everyone, outcomes

    one, everyone, outcomes = asyncio.run(main())
    # Every one was checked in the end (they waited, in turn, rather than being refused)...
    assert outcomes == [None] * (5 * PER_ADDRESS + 10) and len(one.checked) == 5 * PER_ADDRESS
    # ...one address's never more than its share at once, and all together never more than the room.
    assert one.most == PER_ADDRESS
    assert everyone.most == PER_ADDRESS + 2


def test_a_check_that_finds_no_place_in_time_is_refused_as_busy() -> None:
    async def main() -> Throttled:
        keys = guard("1000/minute", wait=0.1)
        slow = Verifier(set(), pause=1.0)
        holders = [asyncio.ensure_future(keys.check("192.0.2.1", f"s{n}", slow(f"s{n}"))) for n in range(PER_ADDRESS)]
        await asyncio.sleep(0.01)
        with pytest.raises(Throttled) as refused:
            await keys.check("192.0.2.1", "late", slow("late"))
        for holder in holders:
            holder.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        return refused.value

    assert asyncio.run(main()).retry_after == BUSY_SECONDS


# --- behind the receiver, the gateway and the console, over HTTP -----------------------------------------


@contextlib.contextmanager
def in_process(env: dict[str, str], sim: str, **extra: str) -> Iterator[tuple[str, Settings]]:
    settings = Settings.from_env(dict(env, SVCGW_UPSTREAM_URL=sim, **extra))
    server = ThreadedServer(create_app(settings)).start()
    try:
        yield server.base, settings
    finally:
        server.stop()


def client_from(address: str) -> httpx.Client:
    return httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address=address), trust_env=False)


def test_made_up_receiver_tokens_from_one_address_meet_its_window_and_real_posts_go_on(
    env: dict[str, str], sim: str
) -> None:
    with in_process(env, sim, SVCGW_RECEIVER_FAILURES_PER_ADDRESS="3/minute") as (base, settings):
        developer = make_developer(settings, instances=3)
        known, elsewhere, unseen = developer.appids
        with client_from("127.0.0.3") as flooder, client_from("127.0.0.2") as sender:
            assert flooder.post(developer.receiver_url(base, known), content=POST).status_code == 200
            for _ in range(3):
                assert flooder.post(f"{base}/svc/receiver/{known}/made-up", content=POST).status_code == 404
            refused = flooder.post(f"{base}/svc/receiver/{known}/made-up", content=POST)
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
            assert refused.json() == {"code": -429, "message": receiver_codes.RECEIVER_LIMITED.message, "data": None}
            # A token found valid before passes from the refused address; a token never seen waits there.
            assert flooder.post(developer.receiver_url(base, known), content=POST).status_code == 200
            assert flooder.post(developer.receiver_url(base, unseen), content=POST).status_code == 429
            # From another address nothing is refused, and a token found valid there passes here too.
            assert sender.post(developer.receiver_url(base, elsewhere), content=POST).status_code == 200
            assert flooder.post(developer.receiver_url(base, elsewhere), content=POST).status_code == 200


def wrong_keys(client: httpx.Client, url: str, count: int, **body: object) -> list[int]:
    return [client.post(url, json=body, headers={"Svc-Key": f"sk_made-up-{n}"}).status_code for n in range(count)]


def test_made_up_api_keys_from_one_address_meet_its_window_on_the_gateway_and_the_console_alike(
    env: dict[str, str], sim: str
) -> None:
    with in_process(env, sim, SVCGW_KEY_FAILURES_PER_ADDRESS="4/minute") as (base, settings):
        developer, newcomer = make_developer(settings), make_developer(settings)
        call = f"{base}/svc/api/message/sendText"
        body = {"appid": developer.appids[0], "toWxid": "friend", "content": "hi"}
        with client_from("127.0.0.3") as flooder, client_from("127.0.0.2") as other:
            assert flooder.post(call, json=body, headers={"Svc-Key": developer.key}).status_code == 200
            assert wrong_keys(flooder, call, 2, **body) == [401, 401]
            refused_keys = [
                flooder.get(f"{base}/console/api/instances", headers={"Svc-Key": f"sk_made-up-{n}"}).status_code
                for n in range(2)
            ]
            assert refused_keys == [401, 401]
            # The address's four failures, on either surface, are its window: now refused unchecked, on both.
            gateway = flooder.post(call, json=body, headers={"Svc-Key": "sk_made-up-5"})
            console = flooder.get(f"{base}/console/api/instances", headers={"Svc-Key": newcomer.key})
            for refused in (gateway, console):
                assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
                assert refused.json() == {"code": -42900, "message": gateway_codes.KEYS_THROTTLED_MESSAGE, "data": None}
            # The key found valid before still works from there; the newcomer's works from elsewhere.
            assert flooder.post(call, json=body, headers={"Svc-Key": developer.key}).status_code == 200
            assert flooder.get(f"{base}/console/api/instances", headers={"Svc-Key": developer.key}).is_success
            assert other.get(f"{base}/console/api/instances", headers={"Svc-Key": newcomer.key}).is_success


@pytest.fixture
def sim() -> Iterator[str]:
    server = ThreadedServer(create_sim()).start()
    yield server.base
    server.stop()


@contextlib.contextmanager
def serving(env: dict[str, str], sim: str, **extra: str) -> Iterator[tuple[int, Settings]]:
    """``svcgw serve`` with the simulator as the capability layer: its port and settings."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server_env = dict(env, SVCGW_PORT=str(port), SVCGW_PUBLIC_URL=base, SVCGW_UPSTREAM_URL=sim, **extra)
    process = Process(["serve"], server_env, f"serve-{port}").start()
    wait_ready_or_stop(process, base + "/readyz", "the HTTP server")
    try:
        yield port, Settings.from_env(server_env)
    finally:
        process.stop()


@pytest.mark.slow
def test_a_flood_of_bogus_credentials_from_one_address_leaves_real_traffic_from_another_alone(
    env: dict[str, str], sim: str
) -> None:
    # Neither the account's own rate limit nor the server's share of connections per address (which
    # would close the flood's connections past 256 unread) is what this is about: every request gets in.
    limits = {"SVCGW_RATE_LIMIT": "100000/minute", "SVCGW_HTTP_CONNECTIONS_PER_ADDRESS": "512"}
    with serving(env, sim, **limits) as (port, settings):
        developer = make_developer(settings)
        appid = developer.appids[0]
        base = f"http://127.0.0.1:{port}"
        # 6,000 requests from 127.0.0.1, 400 at once: API-key sign-ins and receiver posts, every credential made up.
        bogus = []
        for number in range(3000):
            sign_in = orjson.dumps({"api_key": "sk_" + secrets.token_urlsafe(32)})
            bogus.append(request("POST", "/console/api/session", sign_in, Content_Type="application/json"))
            target = f"/svc/receiver/{appid}/{secrets.token_urlsafe(24)}"
            bogus.append(request("POST", target, POST, Content_Type="application/json"))

        async def real_traffic(done: asyncio.Event) -> list[tuple[str, int]]:
            """Posts and gateway calls from 127.0.0.2, four clients each one after another, while the flood lasts."""
            answers: list[tuple[str, int]] = []
            transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
            async with httpx.AsyncClient(base_url=base, timeout=30, transport=transport, trust_env=False) as client:
                await asyncio.gather(*(one_client(client, done, answers) for _ in range(4)))
            return answers

        async def one_client(client: httpx.AsyncClient, done: asyncio.Event, answers: list[tuple[str, int]]) -> None:
            stop = time.monotonic() + 120
            while not done.is_set() and time.monotonic() < stop:
                posted = await client.post(developer.receiver_url("", appid), content=POST)
                answers.append(("post", posted.status_code))
                called = await client.post(
                    "/svc/api/message/sendText",
                    json={"appid": appid, "toWxid": "friend", "content": "hi"},
                    headers={"Svc-Key": developer.key},
                )
                answers.append(("call", called.status_code))

        async def main() -> tuple[list[int], list[tuple[str, int]], float]:
            done = asyncio.Event()
            real = asyncio.ensure_future(real_traffic(done))
            started = time.monotonic()
            try:
                statuses = await flood(port, bogus, at_once=400, source=lambda _: "127.0.0.1", deadline=90)
            finally:
                done.set()
            took = time.monotonic() - started
            return statuses, await real, took

        statuses, answers, took = asyncio.run(main())
    posts = [status for kind, status in answers if kind == "post"]
    calls = [status for kind, status in answers if kind == "call"]
    assert len(posts) >= 8 and len(calls) >= 8, (len(posts), len(calls), took)
    assert set(posts) == {200} and set(calls) == {200}, (sorted(posts), sorted(calls))
    # The flood itself is refused for what it is, never with "storage unavailable".
    assert len(statuses) == 6000 and set(statuses) <= {401, 404, 429}, sorted(set(statuses))
