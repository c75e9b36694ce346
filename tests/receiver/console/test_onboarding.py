"""A new instance by QR login and the instance actions, through the console's JSON API and its pages.

The app runs in-process behind a real HTTP server with the simulator (also
behind a real server) as its capability layer, against the test Redis; the
simulator's QR codes wait for ``/_sim/qr`` as a person with a phone would.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.liveness import transitions
from svcgw.registry.store import Scope, Store
from svcgw.shards.connections import async_client
from svcgw.storage.keys import PLAIN as keys
from tests.receiver.console.conftest import ConsoleClient
from tests.receiver.gateway.stack import Stack, start_stack
from tests.receiver.gateway.stack import sim as sim  # the module's simulator fixture
from tests.support import Sink, wait_for

CODE = "482913"


@pytest.fixture
def stack(env: dict[str, str], sim: str) -> Iterator[Stack]:
    running = start_stack(env, sim, SVCGW_RATE_LIMIT="1000/minute")
    answer = running.client.post(f"{sim}/_sim/config", json={"qr_auto": False, "check_warmup": 0})
    assert answer.status_code == 200, answer.text
    yield running
    running.client.post(f"{sim}/_sim/config", json={"qr_auto": True})
    running.stop()


class Developer:
    """An account with a key, signed in to the console's JSON API."""

    def __init__(self, stack: Stack, devices: int | None = 10) -> None:
        self.stack = stack
        self.account, self.key = stack.account(devices=devices)
        self.console = ConsoleClient(stack.base, self.key)

    def post(self, path: str, body: dict[str, Any] | None = None, *, csrf: bool = True) -> Any:
        return self.console.change("POST", path, body if body is not None else {}, csrf=csrf)

    def poll(self, attempt: str) -> dict[str, Any]:
        answer = self.console.get(f"/logins/{attempt}")
        assert answer.status_code == 200, answer.text
        return answer.json()["data"]  # type: ignore[no-any-return]

    def phone(self, appid: str, action: str, **extra: Any) -> dict[str, Any]:
        answer = self.stack.client.post(f"{self.stack.sim}/_sim/qr", json={"appid": appid, "action": action, **extra})
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]

    def online(self, sink: Sink, proxy: str = "") -> str:
        """A new instance logged in by QR and started towards ``sink``; its appid."""
        begun = self.post("/instances/new", {"callback_url": sink.url, "proxy": proxy})
        assert begun.status_code == 201, begun.text
        attempt = begun.json()["data"]
        self.phone(attempt["appid"], "scan")
        self.phone(attempt["appid"], "confirm")
        assert self.poll(attempt["id"])["stage"] == "done"
        return str(attempt["appid"])

    def close(self) -> None:
        self.console.close()


@pytest.fixture
def developer(stack: Stack) -> Iterator[Developer]:
    made = Developer(stack)
    yield made
    made.close()


@pytest.fixture
def stranger(stack: Stack) -> Iterator[Developer]:
    made = Developer(stack)
    yield made
    made.close()


def status_of(redis: Redis, appid: str) -> str:
    return str(transitions.describe(redis.hgetall(keys.instance(appid)))["status"])


def service_events(redis: Redis, appid: str, event_type: str) -> int:
    # The callback log names every delivery of the instance, service events included.
    ids = [fields[b"delivery"] for _, fields in redis.xrange(keys.callback_log(appid)) if fields.get(b"delivery")]
    return sum(1 for i in ids if redis.hget(keys.delivery(i.decode()), "event_type") == event_type.encode())


def go_offline(settings: Settings, appid: str) -> None:
    """What the prober does when a reconnect failed: the flip and its InstanceOffline (relogin)."""

    async def flip() -> None:
        client = async_client(settings, decode=True)
        try:
            made = await transitions.go_offline(
                client, keys, settings, appid, reason="probe failed", action_required="relogin", detected_at=1.0
            )
            assert made is not None
        finally:
            await client.aclose()

    asyncio.run(flip())


# --- the QR flow ------------------------------------------------------------------------------------
def test_a_new_instance_by_qr_with_a_code_then_online(
    stack: Stack, developer: Developer, sink: Sink, redis: Redis
) -> None:
    begun = developer.post("/instances/new", {"callback_url": sink.url, "proxy": "socks5://10.0.0.7:1080"})
    assert begun.status_code == 201, begun.text
    attempt = begun.json()["data"]
    appid = attempt["appid"]
    assert attempt["stage"] == "qr" and attempt["created"] is True
    assert "proxy" not in attempt and "10.0.0.7" not in begun.text  # never echoed back
    assert attempt["image"].startswith("data:image/png;base64,")
    assert attempt["refresh_interval"] == 30
    assert developer.poll(attempt["id"])["words"].startswith("Waiting for a scan")

    # Registered under the account by device/create, as through the gateway.
    assert redis.hget(keys.instance(appid), "account") == developer.account.encode()

    developer.phone(appid, "scan")
    polled = developer.poll(attempt["id"])
    assert (polled["status"], polled["words"]) == (1, "Scanned. Confirm the login on the phone.")
    developer.phone(appid, "code", code=CODE)
    polled = developer.poll(attempt["id"])
    assert polled["status"] == 10 and polled["needs_code"] is True
    assert "six-digit code" in polled["words"]

    wrong = developer.post(f"/logins/{attempt['id']}/code", {"code": "000000"})
    assert wrong.status_code == 200
    assert wrong.json()["data"]["error"] == "login/submitQrCode was refused: -1 invalid verify code"
    assert developer.post(f"/logins/{attempt['id']}/code", {"code": "12"}).json()["data"]["error"]
    done = developer.post(f"/logins/{attempt['id']}/code", {"code": CODE})
    assert done.status_code == 200 and done.json()["data"]["stage"] == "done", done.text

    assert status_of(redis, appid) == "online"
    assert stack.forward_address(appid) == sink.url
    sim_side = stack.sim_instance(appid)
    assert sim_side["usable"] is True and sim_side["callbackUrl"] != sink.url  # the receiver URL instead
    assert redis.hget(keys.instance(appid), "proxy") == b"socks5://10.0.0.7:1080"
    listed = developer.console.get("/instances").json()["data"]
    assert [(i["appid"], i["status"]) for i in listed] == [(appid, "online")]
    # The simulator's GapConnected and GapSucceed reach the receiver: the instance's events flow.
    wait_for(lambda: redis.xlen(keys.callback_log(appid)) >= 2, what="the connection events in the log")


def test_every_login_status_in_words_and_a_cancel_offers_a_new_code(developer: Developer) -> None:
    attempt = developer.post("/instances/new", {"callback_url": "http://127.0.0.1:9/hook"}).json()["data"]
    developer.phone(attempt["appid"], "cancel")
    polled = developer.poll(attempt["id"])
    assert polled["status"] == 4 and polled["cancelled"] is True and "new code" in polled["words"]
    renewed = developer.post(f"/logins/{attempt['id']}/renew").json()["data"]
    assert renewed["uuid"] != attempt["uuid"] and renewed["status"] == -1
    assert developer.poll(attempt["id"])["status"] == -1


def test_polls_at_the_same_time_start_the_connection_once(stack: Stack, developer: Developer, sink: Sink) -> None:
    attempt = developer.post("/instances/new", {"callback_url": sink.url}).json()["data"]
    developer.phone(attempt["appid"], "confirm")
    with ThreadPoolExecutor(4) as pool:
        polls = list(pool.map(lambda _: developer.console.get(f"/logins/{attempt['id']}"), range(4)))
    assert all(p.status_code == 200 for p in polls)
    assert developer.poll(attempt["id"])["stage"] == "done"
    assert stack.sim_instance(attempt["appid"])["calls"]["long/start"] == 1


def test_a_code_nobody_scanned_is_replaced_after_its_refresh_interval(developer: Developer, redis: Redis) -> None:
    attempt = developer.post("/instances/new", {"callback_url": "http://127.0.0.1:9/hook"}).json()["data"]
    key = keys.console_login_attempt(developer.account, attempt["id"])
    assert redis.ttl(key) > 0
    redis.hset(key, "issued_at", "1")  # issued long ago
    fresh = developer.poll(attempt["id"])
    assert fresh["uuid"] != attempt["uuid"] and fresh["image"] != attempt["image"]
    developer.phone(attempt["appid"], "scan")
    redis.hset(key, "issued_at", "1")
    scanned = developer.poll(attempt["id"])
    assert scanned["status"] == 1
    assert developer.poll(attempt["id"])["uuid"] == fresh["uuid"]  # a scanned code is kept


def test_submit_qr_code_proxy_is_remembered_for_reconnects(stack: Stack, redis: Redis) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    uuid = stack.api(key, "login/getQr", {"appid": appid, "proxy": "http://first:1"}).json()["data"]["uuid"]
    stack.client.post(f"{stack.sim}/_sim/qr", json={"appid": appid, "action": "code", "code": CODE})
    assert (
        stack.api(key, "login/checkQr", {"appid": appid, "proxy": "http://first:1", "uuid": uuid}).json()["data"][
            "status"
        ]
        == 10
    )
    body = {"appid": appid, "proxy": "http://second:2", "uuid": uuid, "code": CODE}
    assert stack.api(key, "login/submitQrCode", body).json()["code"] == 0
    assert redis.hget(keys.instance(appid), "proxy") == b"http://second:2"


def test_the_device_quota_refusal_is_shown_with_its_code(stack: Stack) -> None:
    full = Developer(stack, devices=0)
    try:
        answer = full.post("/instances/new", {"callback_url": "http://127.0.0.1:9/hook"})
        assert answer.status_code in (402, 403)
        assert answer.json()["code"] == -40402 and answer.json()["data"] is None
        page = full.console.http.post(
            "/console/instances/new", data={"csrf_token": full.console.csrf, "callback_url": "http://127.0.0.1:9/h"}
        )
        assert page.status_code in (402, 403)
        assert "-40402" in page.text and "device quota" in page.text
    finally:
        full.close()


def test_without_any_address_nothing_is_created(developer: Developer, redis: Redis) -> None:
    answer = developer.post("/instances/new", {})
    assert (answer.status_code, answer.json()["code"]) == (400, -40011)
    assert redis.scard(keys.account_instances(developer.account)) == 0


def test_the_account_default_is_used_and_stays_inherited(
    stack: Stack, developer: Developer, sink: Sink, redis: Redis
) -> None:
    async def set_default(store: Store) -> None:
        await store.set_callback(Scope(account=developer.account), sink.url)

    stack.store(set_default)
    attempt = developer.post("/instances/new", {}).json()["data"]
    developer.phone(attempt["appid"], "confirm")
    assert developer.poll(attempt["id"])["stage"] == "done"
    shown = developer.console.get(f"/instances/{attempt['appid']}").json()["data"]
    assert (shown["forward_url"], shown["forward_source"]) == (sink.url, "account")
    # Never the instance's own, not even for a moment: no address, secret or token of its own was made.
    assert redis.hgetall(keys.callback_instance(attempt["appid"])) == {}


def test_a_controlled_operation_is_refused_as_through_the_gateway(developer: Developer, redis: Redis) -> None:
    redis.sadd(keys.account_denied(developer.account), "device/create")  # as svcgw accounts deny does
    answer = developer.post("/instances/new", {"callback_url": "http://127.0.0.1:9/hook"})
    assert (answer.status_code, answer.json()["code"]) == (403, -40300)


def test_the_rate_limit_is_the_gateways(env: dict[str, str], sim: str) -> None:
    limited = start_stack(env, sim, SVCGW_RATE_LIMIT="3/minute")
    try:
        limited.client.post(f"{sim}/_sim/config", json={"qr_auto": False})
        developer = Developer(limited)
        attempt = developer.post("/instances/new", {"callback_url": "http://127.0.0.1:9/hook"}).json()["data"]
        developer.poll(attempt["id"])  # device/create, getQr, checkQr: the three calls of the minute
        answer = developer.console.get(f"/logins/{attempt['id']}")
        assert (answer.status_code, answer.json()["code"]) == (429, -42900)
        assert int(answer.headers["Retry-After"]) >= 1
        developer.close()
    finally:
        limited.client.post(f"{sim}/_sim/config", json={"qr_auto": True})
        limited.stop()


# --- instance actions ---------------------------------------------------------------------------------
def test_relogin_recovers_with_one_instance_recovered(
    stack: Stack, developer: Developer, sink: Sink, redis: Redis, settings: Settings
) -> None:
    appid = developer.online(sink, proxy="http://egress:3128")
    stack.sim_faults(appid=appid, drop=True)
    go_offline(settings, appid)
    assert status_of(redis, appid) == "offline"

    answer = developer.post(f"/instances/{appid}/relogin")
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == {"recovered": True, "login": None}
    assert status_of(redis, appid) == "online"
    assert service_events(redis, appid, "InstanceRecovered") == 1
    calls = [c for c in stack.client.get(f"{stack.sim}/_sim/calls").json() if c["body"].get("appid") == appid]
    reconnect = [c for c in calls if c["path"].endswith("login/reconnect")][-1]
    assert reconnect["body"]["proxy"] == "http://egress:3128"  # the remembered egress
    # A second one changes nothing and owes nothing.
    assert developer.post(f"/instances/{appid}/relogin").json()["data"]["recovered"] is True
    assert service_events(redis, appid, "InstanceRecovered") == 1


def test_a_failed_relogin_stops_waits_for_gap_closed_then_shows_a_code(
    stack: Stack, developer: Developer, sink: Sink, redis: Redis
) -> None:
    appid = developer.online(sink)
    stack.sim_faults(appid=appid, drop=True, reconnect_fails=True)
    answer = developer.post(f"/instances/{appid}/relogin")
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert data["recovered"] is False and data["login"]["appid"] == appid
    login = data["login"]
    if login["stage"] == "closing":
        login = wait_for(
            lambda: (polled := developer.poll(login["id"]))["stage"] == "qr" and polled,
            timeout=15,
            what="the QR code after GapClosed",
        )
    assert login["image"].startswith("data:image/png;base64,")
    assert status_of(redis, appid) == "stopped"
    log = redis.xrevrange(keys.callback_log(appid), count=5)
    assert any(b'"GapClosed"' in fields[b"body"] for _, fields in log)
    stack.sim_faults(appid=appid, reconnect_fails=False)
    developer.phone(appid, "confirm")
    assert developer.poll(login["id"])["stage"] == "done"
    assert status_of(redis, appid) == "online"


def test_stop_start_and_logout(stack: Stack, developer: Developer, sink: Sink, redis: Redis) -> None:
    appid = developer.online(sink)
    assert developer.post(f"/instances/{appid}/stop").json()["data"] == {"appid": appid, "stopped": True}
    assert status_of(redis, appid) == "stopped"
    assert developer.post(f"/instances/{appid}/start").json()["data"] == {"appid": appid, "started": True}
    assert status_of(redis, appid) == "online"
    assert stack.forward_address(appid) == sink.url  # the instance's own address, kept
    assert developer.post(f"/instances/{appid}/logout").json()["data"]["logged_out"] is True
    assert status_of(redis, appid) == "logged_out"
    refused = developer.post(f"/instances/{appid}/start")
    assert refused.status_code == 200 and refused.json()["code"] == -1
    assert "long/start was refused" in refused.json()["message"]


NEW_ROUTES = [
    "/instances/new",
    "/logins/{attempt}/code",
    "/logins/{attempt}/renew",
    "/instances/{appid}/relogin",
    "/instances/{appid}/qr-login",
    "/instances/{appid}/stop",
    "/instances/{appid}/start",
    "/instances/{appid}/logout",
]


def test_every_change_needs_the_csrf_token(developer: Developer, sink: Sink, redis: Redis) -> None:
    appid = developer.online(sink)
    attempt = developer.post("/instances/new", {"callback_url": sink.url}).json()["data"]["id"]
    instances = redis.scard(keys.account_instances(developer.account))
    for route in NEW_ROUTES:
        path = route.format(appid=appid, attempt=attempt)
        answer = developer.post(path, {"code": CODE}, csrf=False)
        assert (answer.status_code, answer.json()["code"]) == (403, -40310), path
        page = developer.console.http.post("/console" + path, data={"code": CODE})
        assert page.status_code == 403 and "security token" in page.text, path
    assert status_of(redis, appid) == "online"
    assert redis.scard(keys.account_instances(developer.account)) == instances


def test_another_accounts_instance_and_login_are_not_there(
    stack: Stack, developer: Developer, stranger: Developer, sink: Sink, redis: Redis
) -> None:
    appid = developer.online(sink)
    attempt = developer.post("/instances/new", {"callback_url": sink.url}).json()["data"]["id"]
    calls_before = len(stack.client.get(f"{stack.sim}/_sim/calls").json())
    for route in NEW_ROUTES[1:]:
        path = route.format(appid=appid, attempt=attempt)
        answer = stranger.post(path, {"code": CODE})
        assert (answer.status_code, answer.json()["code"]) == (404, -40404), path
        page = stranger.console.http.post("/console" + path, data={"csrf_token": stranger.console.csrf, "code": CODE})
        assert page.status_code == 404, path
    assert stranger.console.get(f"/logins/{attempt}").status_code == 404
    assert stranger.console.http.get(f"/console/logins/{attempt}").status_code == 404
    assert stranger.console.http.get(f"/console/instances/{appid}/logout").status_code == 404
    assert len(stack.client.get(f"{stack.sim}/_sim/calls").json()) == calls_before  # nothing reached the layer
    assert status_of(redis, appid) == "online"


def test_without_a_session_nothing_is_done(stack: Stack, developer: Developer) -> None:
    answer = stack.client.post(stack.base + "/console/api/instances/new", json={})
    assert (answer.status_code, answer.json()["code"]) == (401, 401)
    page = stack.client.get(stack.base + "/console/instances/new")
    assert page.status_code == 303 and "/console/login" in page.headers["location"]


# --- the pages, without script -----------------------------------------------------------------------
def test_the_pages_walk_the_flow_with_plain_refreshes(stack: Stack, developer: Developer, sink: Sink) -> None:
    http = developer.console.http
    form = http.get("/console/instances/new")
    assert form.status_code == 200 and 'id="new-instance-form"' in form.text
    started = http.post("/console/instances/new", data={"csrf_token": developer.console.csrf, "callback_url": sink.url})
    assert started.status_code == 303
    login_path = started.headers["location"]
    assert re.fullmatch(r"/console/logins/[\w-]+", login_path)

    page = http.get(login_path)
    assert page.status_code == 200
    assert '<meta http-equiv="refresh" content="2">' in page.text
    assert re.search(r'<img id="qr-image" src="data:image/png;base64,[A-Za-z0-9+/=]+"', page.text)
    assert "script" not in page.text.lower()
    appid = re.search(r'id="login-appid">(we_\w+)<', page.text).group(1)

    developer.phone(appid, "scan")
    developer.phone(appid, "code", code=CODE)
    page = http.get(login_path)
    assert 'id="code-form"' in page.text and "http-equiv" not in page.text  # no reload while typing
    sent = http.post(login_path + "/code", data={"csrf_token": developer.console.csrf, "code": CODE})
    assert sent.status_code == 303 and sent.headers["location"] == login_path
    done = http.get(login_path)
    assert done.status_code == 303 and done.headers["location"] == f"/console/instances/{appid}"
    instance = http.get(done.headers["location"])
    assert "events of this instance flow" in instance.text and 'class="badge ok">online' in instance.text

    confirm = http.get(f"/console/instances/{appid}/logout")
    assert confirm.status_code == 200 and 'id="confirm-logout"' in confirm.text
    assert stack.sim_instance(appid)["loggedIn"] is True  # asking is not doing
    csrf = {"csrf_token": developer.console.csrf}
    out = http.post(f"/console/instances/{appid}/logout", data=csrf)
    assert out.status_code == 303 and stack.sim_instance(appid)["loggedIn"] is False
    page = http.get(f"/console/instances/{appid}")
    assert "logged out" in page.text and "Log in again with a QR scan" in page.text
    refused = http.post(f"/console/instances/{appid}/start", data=csrf)
    assert refused.status_code == 502 and "long/start was refused: -1 not logged in" in refused.text
    # Re-login cannot reconnect a logged-out instance: it goes on to a QR login of it.
    relogin = http.post(f"/console/instances/{appid}/relogin", data=csrf)
    assert relogin.status_code == 303 and relogin.headers["location"].startswith("/console/logins/")
    login = http.get(relogin.headers["location"])
    assert "Reconnecting did not bring the connection back" in login.text
    assert re.search(r'data-stage="(closing|qr)"', login.text)
