"""The destination pages in real headless Chromium (Debian's package) driven by Playwright.

Add the customer's three destinations (the CRM takes ``Msg``, the on-call tool ``InstanceOffline``
and ``InstanceRecovered``, the archive everything at 20 a second), each test POST arriving at a sink
signed with the destination's own secret; disable one; see the instance's page list the account's:
against a real ``svcgw serve`` and a real Redis.
"""

from __future__ import annotations

import re
from typing import Any

from redis import Redis

from svcgw.callbacks.signing import verify
from svcgw.storage.keys import PLAIN as keys
from tests.receiver.console import test_browser
from tests.receiver.console.conftest import Developer
from tests.receiver.console.test_browser import Shots
from tests.support import Sink

pytestmark = test_browser.pytestmark
# The same real server process and Chromium as the console's other browser test.
server = test_browser.server
browser = test_browser.browser

TOKEN = "tok_browser_destination_" + "k" * 12


def test_destinations_in_a_browser(server: str, sink: Sink, developer: Developer, redis: Redis, browser: Any) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(15_000)
    shots = Shots(page)
    page.goto(server + "/console/login")
    page.fill("#api_key", developer.key)
    page.click("button[type=submit]")
    page.wait_for_url(server + "/console/instances")

    page.click("nav a[href='/console/destinations']")
    page.wait_for_url(server + "/console/destinations")
    assert page.locator("#no-destinations").count() == 1
    secrets: dict[str, str] = {}
    for label, path, types, rate, token in (
        ("CRM", "/crm", ["Msg"], "", ""),
        ("on-call", "/oncall", ["InstanceOffline", "InstanceRecovered"], "", TOKEN),
        ("archive", "/archive", [], "20", ""),
    ):
        page.goto(server + "/console/destinations")
        page.fill("#url", sink.url + path)
        page.fill("#label", label)
        for name in types:
            page.check(f"input[name=event_type][value={name}]")
        page.fill("#rate", rate)
        page.fill("#bearer_token", token)
        page.click("#add-destination-form button[type=submit]")
        page.wait_for_url(re.compile(r".*/console/destinations/dst_[0-9a-f]{16}$"))
        assert "Test POST succeeded" in page.locator("#test-result").inner_text()
        secrets[path] = page.locator("#signing-secret").inner_text()
        if label == "on-call":
            shots("destination")
        assert TOKEN not in page.content()

    for path, secret in secrets.items():
        (post,) = [p for p in sink.posts() if p.path == "/hook" + path]
        assert verify(secret, post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])
    assert [p.headers.get("authorization") for p in sink.posts()] == [None, f"Bearer {TOKEN}", None]

    # Disable the archive; the list says so.
    page.click("#disable")
    assert "Destination disabled" in page.locator("#flash").inner_text()
    page.goto(server + "/console/destinations")
    rows = page.locator("#destinations tbody tr")
    assert rows.count() == 3
    assert page.locator("#destinations tr.disabled").count() == 1
    shots("destinations")
    routes = {k.decode(): v.decode() for k, v in redis.hgetall(keys.routes_account(developer.account)).items()}
    assert set(routes) == {"Msg", "InstanceOffline", "InstanceRecovered"}

    # An instance's page lists the account's it takes too.
    appid = developer.appids[0]
    page.goto(f"{server}/console/instances/{appid}")
    page.click("#destinations-link")
    page.wait_for_url(f"{server}/console/instances/{appid}/destinations")
    assert page.locator("#account-destinations tbody tr").count() == 3
    context.close()
