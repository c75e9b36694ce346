"""Sign-in's limits over real HTTP, served with the options of ``svcgw serve`` (cli.runner.server_options):
the client address behind (or without) a trusted proxy, device cookies and their lane, wrong API keys, no room
for checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from cli.main import cli
from cli.runner import server_options
from receiver.app import create_app
from receiver.console import codes as console_codes
from receiver.console.signin import Lane, PasswordSignIn, SignInOutcome
from svcgw.config.settings import Settings, SettingsError
from tests.receiver.console.conftest import make_developer
from tests.receiver.console.members import PASSWORD, make_member, sign_in
from tests.receiver.console.test_pages import csrf_of
from tests.receiver.floods import address, flood, request, sign_ins
from tests.support import free_port, start_server, wait_for

LIMITED = {"code": -42900, "message": console_codes.SIGN_IN_MESSAGE, "data": None}


@contextlib.contextmanager
def served(env: dict[str, str], **extra: str) -> Iterator[tuple[str, Settings]]:
    """The app of ``env`` + ``extra`` behind uvicorn configured as ``svcgw serve`` configures it, in a thread."""
    settings = Settings.from_env({**env, **extra, "SVCGW_PORT": str(free_port())})
    server = uvicorn.Server(uvicorn.Config(create_app(settings), **server_options(settings)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=20, interval=0.01, what="the server")
        yield f"http://127.0.0.1:{settings.port}", settings
    finally:
        server.should_exit = True
        thread.join(20)


def attempt(base: str, login: str, password: str, forwarded: str | None = None) -> httpx.Response:
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    return httpx.post(base + "/console/api/session", json={"login": login, "password": password}, headers=headers)


def test_without_trusted_proxies_x_forwarded_for_is_ignored(env: dict[str, str]) -> None:
    with served(env, SVCGW_SIGNIN_FAILURES_PER_ADDRESS="3/15minutes") as (base, settings):
        member = make_member(settings)
        for number in range(3):
            assert attempt(base, f"guess{number}@example.com", "wrong!", f"203.0.113.{number}").status_code == 401
        # A fresh header value is no fresh window: the peer is the client.
        refused = attempt(base, member.login, PASSWORD, "203.0.113.99")
        assert refused.status_code == 429 and refused.json() == LIMITED


def test_behind_a_trusted_proxy_failures_count_against_the_client_it_names(env: dict[str, str]) -> None:
    extra = {"SVCGW_SIGNIN_FAILURES_PER_ADDRESS": "3/15minutes", "SVCGW_TRUSTED_PROXIES": "127.0.0.1"}
    with served(env, **extra) as (base, settings):
        member = make_member(settings)
        for number in range(3):
            assert attempt(base, f"guess{number}@example.com", "wrong!", "198.51.100.7").status_code == 401
        assert attempt(base, member.login, PASSWORD, "198.51.100.7").status_code == 429
        # Everyone else behind the same proxy still signs in.
        assert attempt(base, member.login, PASSWORD, "198.51.100.8").status_code == 200


def test_an_ipv6_client_is_counted_by_its_56(env: dict[str, str]) -> None:
    extra = {"SVCGW_SIGNIN_FAILURES_PER_ADDRESS": "3/15minutes", "SVCGW_TRUSTED_PROXIES": "127.0.0.1"}
    with served(env, **extra) as (base, settings):
        member = make_member(settings)
        # Three failures from three /64s of one /56 (one subscriber's line): a fresh /64 there is no fresh window.
        for number, address in enumerate(("2001:db8:1:2::1", "2001:db8:1:3::2", "2001:db8:1:ff:ffff:ffff:ffff:ffff")):
            assert attempt(base, f"guess{number}@example.com", "wrong!", address).status_code == 401
        refused = attempt(base, member.login, PASSWORD, "2001:db8:1:2:abcd::77")
        assert refused.status_code == 429 and refused.json() == LIMITED
        # The next /56, and IPv4 clients, count on their own.
        assert attempt(base, member.login, PASSWORD, "2001:db8:1:100::1").status_code == 200
        for number in range(3):
            assert attempt(base, "guess@example.com", "wrong!", f"198.51.100.{number}").status_code == 401
        assert attempt(base, member.login, PASSWORD, "198.51.100.3").status_code == 200


def test_the_ipv6_prefix_is_a_setting(env: dict[str, str]) -> None:
    extra = {
        "SVCGW_SIGNIN_FAILURES_PER_ADDRESS": "3/15minutes",
        "SVCGW_TRUSTED_PROXIES": "127.0.0.1",
        "SVCGW_IPV6_PREFIX": "64",
        "SVCGW_RECEIVER_FAILURES_PER_ADDRESS": "3/minute",
    }
    with served(env, **extra) as (base, settings):
        member = make_member(settings)
        for number, address in enumerate(("2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3")):
            assert attempt(base, f"guess{number}@example.com", "wrong!", address).status_code == 401
        assert attempt(base, member.login, PASSWORD, "2001:db8:1:2:abcd::77").status_code == 429
        assert attempt(base, member.login, PASSWORD, "2001:db8:1:3::1").status_code == 200  # another /64

        # The receiver's posts (the app's direct way, past the router) count by the same prefix.
        def post(forwarded: str) -> int:
            headers = {"X-Forwarded-For": forwarded}
            return httpx.post(base + "/svc/receiver/we_x/nothing", json={}, headers=headers).status_code

        assert [post(f"2001:db8:5:6::{n}") for n in range(1, 4)] == [404] * 3
        assert post("2001:db8:5:6::99") == 429 and post("2001:db8:5:7::1") == 404
    assert Settings.from_env({}).ipv6_prefix == 56
    for bad in ("31", "129", "a /56"):
        with pytest.raises(SettingsError, match="SVCGW_IPV6_PREFIX"):
            Settings.from_env({"SVCGW_IPV6_PREFIX": bad})


def test_trusted_proxies_are_addresses_or_networks() -> None:
    assert Settings.from_env({}).trusted_proxies == ()
    found = Settings.from_env({"SVCGW_TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1"}).trusted_proxies
    assert found == ("10.0.0.0/8", "127.0.0.1/32")
    assert Settings.from_env({"SVCGW_TRUSTED_PROXIES": "*"}).trusted_proxies == ("*",)
    with pytest.raises(SettingsError, match="SVCGW_TRUSTED_PROXIES"):
        Settings.from_env({"SVCGW_TRUSTED_PROXIES": "the proxy"})


def test_a_browser_that_signed_in_before_is_not_locked_out_by_someone_who_knows_the_login(
    env: dict[str, str],
) -> None:
    with served(env, SVCGW_SIGNIN_FAILURES_PER_LOGIN="3/15minutes") as (base, settings):
        member = make_member(settings)
        with httpx.Client(base_url=base, timeout=15) as browser:
            first = browser.post("/console/api/session", json={"login": member.login, "password": PASSWORD})
            assert first.status_code == 200
            device = [c for c in browser.cookies.jar if c.name.startswith("svcgw_device_")]
            assert len(device) == 1 and device[0].path == "/console" and device[0].has_nonstandard_attr("HttpOnly")
            # Someone without the cookie fills the login's window, in any case or width of the login.
            for login in (member.login.upper(), member.login, "\uff44" + member.login[1:]):
                assert sign_in(base, login, "wrong password!").status_code == 401
            assert sign_in(base, member.login, PASSWORD).status_code == 429
            # The browser with the cookie still signs in, and may change the password.
            again = browser.post("/console/api/session", json={"login": member.login, "password": PASSWORD})
            assert again.status_code == 200, again.text
            changed = browser.put(
                "/console/api/password",
                json={"current_password": PASSWORD, "new_password": "another good password"},
                headers={"X-CSRF-Token": again.json()["data"]["csrf_token"]},
            )
            assert changed.status_code == 200, changed.text
            # The cookie is no key of its own: wrong passwords from the browser meet a limit too.
            for _ in range(3):
                wrong = browser.post("/console/api/session", json={"login": member.login, "password": "wrong!"})
                assert wrong.status_code == 401
            late = browser.post(
                "/console/api/session", json={"login": member.login, "password": "another good password"}
            )
            assert late.status_code == 429
        # A cookie of the right name that this service did not sign does nothing.
        forged = httpx.post(
            base + "/console/api/session",
            json={"login": member.login, "password": "another good password"},
            cookies={device[0].name: "forged.value.here"},
        )
        assert forged.status_code == 429


def test_a_new_password_retires_every_device_cookie_made_before_it(env: dict[str, str]) -> None:
    new_password = "the operator's new password"
    with served(env, SVCGW_SIGNIN_FAILURES_PER_LOGIN="3/15minutes") as (base, settings):
        member = make_member(settings)
        # Four browsers that signed in with the old password, each with its device cookie.
        old = [httpx.Client(base_url=base, timeout=15) for _ in range(4)]
        fresh = httpx.Client(base_url=base, timeout=15)
        try:
            for browser in old:
                signed_in = browser.post("/console/api/session", json={"login": member.login, "password": PASSWORD})
                assert signed_in.status_code == 200, signed_in.text
                assert [c for c in browser.cookies.jar if c.name.startswith("svcgw_device_")]
            changed = CliRunner().invoke(
                cli, ["accounts", "set-password", "--account", member.account, "--password", "-"],
                env=env, input=new_password + "\n",
            )  # fmt: skip
            assert changed.exit_code == 0, changed.output
            # A browser that signs in with the new password gets a cookie of the new password.
            assert fresh.post("/console/api/session", json={"login": member.login, "password": new_password}).is_success
            # Someone without a cookie fills the login's window.
            for _ in range(3):
                assert sign_in(base, member.login, "wrong password!").status_code == 401
            # The old cookies are no cookies now: no window of their own, not even with the new password.
            for browser in old:
                late = browser.post("/console/api/session", json={"login": member.login, "password": new_password})
                assert late.status_code == 429 and late.json() == LIMITED
            again = fresh.post("/console/api/session", json={"login": member.login, "password": new_password})
            assert again.status_code == 200, again.text
        finally:
            for browser in [*old, fresh]:
                browser.close()


def test_the_sign_in_form_leaves_a_device_cookie_and_an_api_key_none(env: dict[str, str]) -> None:
    with served(env) as (base, settings):
        member = make_member(settings)
        developer = make_developer(settings)
        with httpx.Client(base_url=base, timeout=15) as browser:
            token = csrf_of(browser.get("/console/login").text)
            form = {"login": member.login, "password": PASSWORD, "csrf_token": token}
            assert browser.post("/console/login", data=form).status_code == 303
            assert [c.name for c in browser.cookies.jar if c.name.startswith("svcgw_device_")]
        with httpx.Client(base_url=base, timeout=15) as browser:
            token = csrf_of(browser.get("/console/login").text)
            by_key = browser.post("/console/login", data={"api_key": developer.key, "csrf_token": token})
            assert by_key.status_code == 303
            assert not [c.name for c in browser.cookies.jar if c.name.startswith("svcgw_device_")]


def test_wrong_api_keys_count_against_the_address(env: dict[str, str]) -> None:
    with served(env, SVCGW_SIGNIN_FAILURES_PER_ADDRESS="3/15minutes") as (base, settings):
        developer = make_developer(settings)
        # Right keys give their place back: they never fill the window.
        for _ in range(4):
            assert httpx.post(base + "/console/api/session", json={"api_key": developer.key}).status_code == 200
        for number in range(3):
            wrong = httpx.post(base + "/console/api/session", json={"api_key": f"svc_wrong{number}"})
            assert wrong.status_code == 401
        refused = httpx.post(base + "/console/api/session", json={"api_key": developer.key})
        assert refused.status_code == 429 and refused.json() == LIMITED and int(refused.headers["retry-after"]) >= 1


def test_sign_ins_beyond_the_room_for_checks_get_429_at_once_never_503(env: dict[str, str]) -> None:
    with served(env) as (base, settings):
        member = make_member(settings)

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                body = {"login": member.login, "password": "wrong password!"}
                return await asyncio.gather(*(client.post("/console/api/session", json=body) for _ in range(20)))

        answers = asyncio.run(burst())
        statuses = sorted(answer.status_code for answer in answers)
        assert 503 not in statuses and set(statuses) <= {401, 429}
        busy = [answer for answer in answers if answer.status_code == 429]
        assert busy and all(a.json() == LIMITED and a.headers["retry-after"] == "1" for a in busy)


def answers(conns: list[socket.socket]) -> Iterator[tuple[int, float]]:
    """The status each connection is answered with, and when (``time.monotonic()``), in the order they come."""
    with selectors.DefaultSelector() as selector:
        for conn in conns:
            selector.register(conn, selectors.EVENT_READ, conn)
        waiting = len(conns)
        while waiting:
            ready = selector.select(timeout=60)
            assert ready, f"{waiting} connections unanswered after a minute"
            for key, _ in ready:
                conn = key.data
                head = conn.recv(65536)
                yield int(head.split(b" ", 2)[1]), time.monotonic()
                selector.unregister(conn)
                waiting -= 1


@pytest.mark.slow
def test_during_a_flood_from_one_address_another_address_signs_in_quickly(env: dict[str, str]) -> None:
    # Every one of the flood's connections is let in (an address's share, SVCGW_HTTP_CONNECTIONS_PER_ADDRESS,
    # is 256 by default): the sign-in limits are the ones under test. How many the server has accepted
    # before it answers the first is the machine's timing, and past the share the rest would be closed unread.
    process, base = start_server(dict(env, SVCGW_HTTP_CONNECTIONS_PER_ADDRESS="512"))
    port = int(base.rsplit(":", 1)[1])
    body = b'{"login": "flood@example.com", "password": "wrong password!"}'
    request = (
        b"POST /console/api/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    with contextlib.ExitStack() as stack:
        stack.callback(process.stop)
        member = make_member(Settings.from_env(env))

        def send_flood() -> list[socket.socket]:
            """400 sign-ins at once from 127.0.0.1, sent as fast as sockets go (no client work in the way)."""
            flood = [stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=60)) for _ in range(400)]
            for conn in flood:
                conn.sendall(request)
            return flood

        flood = send_flood()
        # ...and one from another address (loopback has all of 127.0.0.0/8).
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=base, timeout=60, transport=transport) as other:
            started = time.monotonic()
            mine = other.post("/console/api/session", json={"login": member.login, "password": PASSWORD})
            took = time.monotonic() - started
            statuses = [int(conn.recv(65536).split(b" ", 2)[1]) for conn in flood]
            # The same sign-in alone, on the same server now: what the machine's own load costs it.
            started = time.monotonic()
            assert other.post("/console/api/session", json={"login": member.login, "password": PASSWORD}).is_success
            alone = time.monotonic() - started
        # The same flood again: all but the few that find room are refused at once, 429 without a check. When
        # the last of those is answered tells what reading and refusing the flood's requests costs the others
        # on this machine, checks aside.
        second = send_flood()
        started = time.monotonic()
        refused = [seconds - started for status, seconds in answers(second) if status == 429]
    assert mine.status_code == 200, mine.text
    assert len(refused) >= 300, len(refused)
    refusing = max(refused)
    # Its own check, one of the flood's at most, and the loop's turns for the flood's requests: under 2 s on
    # a machine at rest, however busy with other work never near the 200 checks of a queue.
    assert took < max(2.0, refusing + 3 * alone), (took, refusing, alone)
    assert 503 not in statuses and set(statuses) <= {401, 429} and statuses.count(429) >= 300


@pytest.mark.slow
def test_during_a_flood_from_many_addresses_a_browser_that_signed_in_before_signs_in_quickly(
    env: dict[str, str],
) -> None:
    process, base = start_server(env)
    port = int(base.rsplit(":", 1)[1])
    member = make_member(Settings.from_env(env))
    mine = {"login": member.login, "password": PASSWORD}

    async def main(browser: httpx.AsyncClient) -> tuple[httpx.Response, float, float, list[int]]:
        assert (await browser.post("/console/api/session", json=mine)).status_code == 200  # a device cookie
        # 400 sign-ins with logins nobody has, each from an address of its own: connected first, then sent
        # at once...
        connections = await asyncio.gather(*(
            asyncio.open_connection("127.0.0.1", port, local_addr=(address(number), 0)) for number in range(400)
        ))  # fmt: skip
        try:
            for number, (_, writer) in enumerate(connections):
                body = json.dumps({"login": f"stranger{number}@example.com", "password": "wrong!"}).encode()
                writer.write(request("POST", "/console/api/session", body, Content_Type="application/json"))
            # ...and, meanwhile, the browser that signed in before.
            started = time.monotonic()
            again = await browser.post("/console/api/session", json=mine)
            took = time.monotonic() - started
            heads = [await reader.readuntil(b"\r\n") for reader, _ in connections]
        finally:
            for _, writer in connections:
                writer.close()
        # The same sign-in alone, on the same server now: what the machine's own load costs it.
        started = time.monotonic()
        assert (await browser.post("/console/api/session", json=mine)).status_code == 200
        return again, took, time.monotonic() - started, [int(head.split(b" ", 2)[1]) for head in heads]

    async def with_browser() -> tuple[httpx.Response, float, float, list[int]]:
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(base_url=base, timeout=60, transport=transport, trust_env=False) as browser:
            return await main(browser)

    try:
        again, took, alone, statuses = asyncio.run(with_browser())
    finally:
        process.stop()
    assert again.status_code == 200, again.text
    assert took < max(3.0, 3 * alone), (took, alone)
    # The flood filled the room everyone else shares: refused at once, not queued.
    assert set(statuses) <= {401, 429} and statuses.count(429) >= 300, sorted(set(statuses))


@pytest.mark.slow
def test_during_a_sustained_flood_from_many_addresses_a_browser_that_signed_in_before_signs_in_quickly(
    env: dict[str, str],
) -> None:
    """400 addresses each sending its next sign-in as soon as the last is answered (most of them 429 at once),
    for a bounded count: the browser with a device cookie meanwhile, on a new connection each time."""
    process, base = start_server(env)
    port = int(base.rsplit(":", 1)[1])
    member = make_member(Settings.from_env(env))
    mine = {"login": member.login, "password": PASSWORD}
    bodies = (json.dumps({"login": f"s{n}@example.com", "password": "wrong!"}).encode() for n in range(4000))
    sends = [request("POST", "/console/api/session", body, Content_Type="application/json") for body in bodies]
    statuses: list[int] = []
    flooding = threading.Thread(
        target=lambda: statuses.extend(asyncio.run(flood(port, sends, at_once=400, source=address, deadline=120)))
    )
    took: list[float] = []
    try:
        with httpx.Client(base_url=base, timeout=60, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as b:
            assert b.post("/console/api/session", json=mine).status_code == 200  # a device cookie
            device = {c.name: c.value for c in b.cookies.jar if c.name.startswith("svcgw_device_")}
            started = time.monotonic()
            assert sign_in_with(base, mine, device) == 200
            alone = time.monotonic() - started
            flooding.start()
            # Past the flood's first burst (its connections opened): each sending again as answered. Bounded
            # by its count, not by this pause; the sign-ins below only need it under way.
            time.sleep(1.0)
            for _ in range(3):
                if not flooding.is_alive():
                    break
                started = time.monotonic()
                answer = sign_in_with(base, mine, device)
                took.append(time.monotonic() - started)
                assert answer == 200
            flooding.join(150)
    finally:
        process.stop()
    assert took and not flooding.is_alive()
    assert set(statuses) <= {401, 429} and statuses.count(429) >= len(statuses) // 2, sorted(set(statuses))
    print(f"sign-ins with a device cookie beside the flood {[round(t, 2) for t in took]} s, alone {alone:.2f} s")
    # Each signed in, all through the flood. How long they take is the benchmark's
    # (tests/bench/signin_flood.py): on two shared cores it moves with the load more than with the code.
    assert len(took) == 3


def sign_in_with(base: str, body: dict[str, str], cookies: dict[str, str]) -> int:
    """A sign-in from 127.0.0.2 on a connection of its own, showing ``cookies``; its status."""
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=base, timeout=60, transport=transport, cookies=cookies, trust_env=False) as client:
        return client.post("/console/api/session", json=body).status_code


@pytest.mark.slow
def test_during_a_flood_from_many_addresses_the_known_browser_is_served_through_its_lane(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The browser signs in as the flood's opening burst is in the server: it is signed in, by the lane's own
    loop (what it costs in time is the benchmark's, tests/bench/signin_flood.py)."""
    in_lane: list[tuple[str, object]] = []
    real = PasswordSignIn._in_lane

    async def recorded(self: PasswordSignIn, redis: Any, login: str, password: str, address: str, lane: Lane,
                       after: Any = None) -> Any:  # fmt: skip
        outcome = await real(self, redis, login, password, address, lane, after)
        in_lane.append((login, outcome))  # on the lane's own loop
        return outcome

    monkeypatch.setattr(PasswordSignIn, "_in_lane", recorded)
    with served(env) as (base, settings):
        member = make_member(settings)
        mine = {"login": member.login, "password": PASSWORD}
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=base, timeout=60, transport=transport, trust_env=False) as browser:
            assert browser.post("/console/api/session", json=mine).status_code == 200  # its device cookie
            assert in_lane == []  # no cookie shown yet: the room's
            answered = threading.Event()
            statuses: list[int] = []

            def send_flood() -> None:
                sent = flood(settings.port, sign_ins(1200), at_once=400, source=address, deadline=120,
                             answered=answered.set)  # fmt: skip
                statuses.extend(asyncio.run(sent))

            flooding = threading.Thread(target=send_flood)
            flooding.start()
            try:
                assert answered.wait(60), "the flood was never answered"
                again = browser.post("/console/api/session", json=mine)
            finally:
                flooding.join(150)
            assert again.status_code == 200, again.text
            # The session it got is a session.
            whoami = browser.get("/console/api/session")
            assert whoami.status_code == 200 and whoami.json()["data"]["account"] == member.account
    assert not flooding.is_alive()
    [(login, outcome)] = in_lane
    assert login == member.login
    # Signed in there, its session written there too.
    assert isinstance(outcome, SignInOutcome) and outcome.account == member.account and outcome.made is not None
    # The flood filled the room everyone else shares: most of it refused at once.
    assert set(statuses) <= {401, 429} and statuses.count(429) >= len(statuses) // 2, sorted(set(statuses))
