"""The whole onboarding journey in real headless Chromium, as the spec orders it.

The operator's invitation link, a password chosen (signed in), an API key
created, a new instance by QR login (a scan, a six-digit code), a signed
``Msg`` at the developer's sink, then a connection loss: ``InstanceOffline``
with ``relogin``, the console's Re-login, ``InstanceRecovered``.

Everything is real and on loopback: ``svcgw serve``, ``svcgw worker`` (with
the liveness prober at a short ``SVCGW_PROBE_INTERVAL``), ``svcgw sim`` as
the capability layer (its QR codes wait for the phone, ``/_sim/qr``), a Redis
database and an HTTP sink that checks every post's signature.

With ``SVCGW_TEST_SCREENSHOTS=<dir>`` each step is saved there as a PNG
(the ones in ``docs/`` were made that way).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from svcgw.callbacks.signing import verify
from tests.receiver.console import test_browser
from tests.receiver.console.conftest import ConsoleClient
from tests.receiver.console.journey import Phone, accept_invitation, create_api_key, new_instance_by_qr, relogin
from tests.receiver.console.members import invite, make_member
from tests.receiver.console.test_browser import Shots
from tests.receiver.gateway.stack import Stack, start_stack
from tests.support import Process, Sink, start_sim, wait_for

# The browser test's marks (slow; skipped without Debian's chromium) and its browser fixture.
pytestmark = test_browser.pytestmark
browser = test_browser.browser

PROBE_INTERVAL = 8
CODE = "731902"
PASSWORD = "a password of my own choosing"


@pytest.fixture
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, base = start_sim(str(tmp_path_factory.mktemp("sim")))
    answer = httpx.post(base + "/_sim/config", json={"qr_auto": False}, timeout=10, trust_env=False)
    assert answer.status_code == 200, answer.text
    yield base
    process.stop()


@pytest.fixture
def service(env: dict[str, str], sim: str) -> Iterator[tuple[Stack, Process]]:
    stack = start_stack(env, sim, subprocess=True, SVCGW_PROBE_INTERVAL=str(PROBE_INTERVAL))
    worker_env = dict(
        env, SVCGW_UPSTREAM_URL=sim, SVCGW_PUBLIC_URL=stack.base, SVCGW_PROBE_INTERVAL=str(PROBE_INTERVAL)
    )
    worker = Process(["worker"], worker_env, "worker").start()
    yield stack, worker
    worker.stop()
    stack.stop()


@pytest.fixture
def invitation(service: tuple[Stack, Process]) -> str:
    """A new account's invitation link, made before the browser starts (Playwright then runs an event loop here)."""
    stack = service[0]
    member = make_member(stack.settings, login="journey@example.com", password=None)
    return stack.base + "/console/invitation/" + invite(stack.settings, member.account)


def envelopes(sink: Sink, appid: str, event_type: str) -> list[tuple[Any, dict[str, Any]]]:
    found = []
    for post in sink.posts():
        envelope = orjson.loads(post.body)
        if envelope.get("appid") == appid and envelope.get("event_type") == event_type:
            found.append((post, envelope))
    return found


def test_onboarding_by_qr_events_and_a_relogin(
    service: tuple[Stack, Process], sim: str, sink: Sink, invitation: str, browser: Any
) -> None:
    stack, worker = service
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(20_000)
    shots = Shots(page)

    accept_invitation(page, invitation, PASSWORD)
    key = create_api_key(page, "journey")
    appid = new_instance_by_qr(page, stack.base, Phone(sim), callback_url=sink.url, code=CODE, shots=shots)

    console = ConsoleClient(stack.base, key)
    try:
        secret = console.get(f"/instances/{appid}/callback").json()["data"]["secret"]
    finally:
        console.close()

    def signed(post: Any) -> bool:
        return verify(secret, post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])

    # A simulated Msg arrives at the sink, signed with the instance's secret.
    run = httpx.post(f"{sim}/_sim/traffic", json={"appid": appid, "rate": 5, "count": 1, "kinds": ["text"]}, timeout=10)
    assert run.status_code == 202, run.text
    ((msg_post, msg),) = wait_for(lambda: envelopes(sink, appid, "Msg"), timeout=20, what="the Msg at the sink")
    assert signed(msg_post) and msg["events"][0]["messageType"] in (0, 1, 3)

    # A connection lost without a GapClosed, and reconnects that fail: the prober reports it once.
    httpx.post(f"{sim}/_sim/faults", json={"appid": appid, "drop": True, "reconnect_fails": True}, timeout=10)
    ((offline_post, offline),) = wait_for(
        lambda: envelopes(sink, appid, "InstanceOffline"), timeout=4 * PROBE_INTERVAL, what="InstanceOffline"
    )
    assert offline["events"][0]["action_required"] == "relogin" and signed(offline_post)

    # The login is alive: the phone's side heals, and the console's Re-login brings the connection back.
    # The worker (and its prober) is stopped meanwhile, so that the prober's next probe cannot heal the
    # instance first however slow the machine; started again, it delivers the console's InstanceRecovered.
    worker.stop()
    httpx.post(f"{sim}/_sim/faults", json={"appid": appid, "reconnect_fails": False}, timeout=10)
    relogin(page, stack.base, appid, shots=shots)
    worker.start()
    ((recovered_post, recovered),) = wait_for(
        lambda: envelopes(sink, appid, "InstanceRecovered"), timeout=20, what="InstanceRecovered"
    )
    assert signed(recovered_post)
    assert recovered["events"][0]["auto_reconnected"] is False  # the console did it, not the prober
    assert len(envelopes(sink, appid, "InstanceOffline")) == 1
    context.close()
