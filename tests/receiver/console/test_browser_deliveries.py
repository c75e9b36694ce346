"""The deliveries page in real headless Chromium (Debian's package) driven by Playwright.

A delivery fails at a sink, shows as retrying with its attempts, the
address is flagged as failing, and retry now delivers it: against a real
``svcgw serve``, a real ``svcgw worker`` and a real Redis.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import with_store
from tests.receiver.console import test_browser
from tests.receiver.console.conftest import Developer
from tests.receiver.console.test_browser import Shots
from tests.support import Sink, ThreadedWorker, is_delivered, wait_for

pytestmark = test_browser.pytestmark
# The same real server process and Chromium as the console's other browser test.
server = test_browser.server
browser = test_browser.browser


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    # Retries an hour apart (only retry now makes a second attempt), flagged as failing after a second.
    return dict(env, SVCGW_RETRY_SCHEDULE="3600,3600", SVCGW_FAILING_AFTER="1")


@pytest.fixture
def addressed(developer: Developer, settings: Settings, sink: Sink) -> str:
    """The first instance's address is the sink's (set before the browser's event loop starts)."""
    appid = developer.appids[0]

    async def set_address(store: Store) -> None:
        await store.set_callback(Scope(appid=appid), sink.url)

    with_store(settings, set_address)
    return appid


def test_deliveries_page_in_a_browser(
    server: str, worker: ThreadedWorker, sink: Sink, developer: Developer, redis: Redis, addressed: str, browser: Any
) -> None:
    appid = addressed
    sink.set(status=500)
    receiver = f"{server}/svc/receiver/{appid}/{developer.receiver_tokens[appid]}"
    httpx.post(receiver, content=b'{"event_type":"Msg","events":[{"id":"br1"}]}', timeout=10).raise_for_status()
    wait_for(lambda: len(sink.posts()) == 1, timeout=20, what="the first attempt")
    wait_for(lambda: redis.hlen(keys.failing_origins) == 1, timeout=10, what="the failure recorded")

    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(15_000)
    shots = Shots(page)
    page.goto(server + "/console/")
    page.fill("#api_key", developer.key)
    page.click("button[type=submit]")
    page.wait_for_url(server + "/console/instances")

    # A second post a second later fails too: the address is now failing, on every page.
    def banner_shown() -> bool:
        page.reload()
        return bool(page.locator("#failing-banner").count() == 1)

    wait_for(lambda: time.time() - sink.posts()[0].at > 1.2, timeout=5, what="a second to pass")
    httpx.post(receiver, content=b'{"event_type":"Ping","events":[{"id":"br2"}]}', timeout=10).raise_for_status()
    wait_for(lambda: len(sink.posts()) == 2, timeout=20, what="the second delivery's attempt")
    wait_for(banner_shown, timeout=10, interval=0.3, what="the failing banner")
    assert "127.0.0.1" in page.inner_text("#failing-banner")
    page.click(f"a[href='/console/instances/{appid}']")
    assert "including this instance" in page.inner_text("#failing-banner")

    page.click("#deliveries-link")
    page.wait_for_url(f"{server}/console/instances/{appid}/deliveries")
    first = page.locator("li.delivery", has_text="br1")
    assert first.count() == 1 and first.get_attribute("data-state") == "retrying"
    delivery_id = first.get_attribute("data-id") or ""
    assert "HTTP 500" in first.inner_text() and "next attempt" in first.inner_text()
    first.locator("summary").click()
    assert first.locator("table.attempts tbody tr").count() == 1
    assert '{"ok":true}' in first.inner_text()  # the answer's body
    shots("deliveries")

    # Filters are a plain GET form.
    page.fill("#event_id", "br2")
    page.click("#delivery-filter button[type=submit]")
    page.wait_for_url("**/deliveries?*event_id=br2*")
    assert page.locator("li.delivery").count() == 1 and "br2" in page.inner_text("#deliveries")
    page.select_option("#state", "delivered")
    page.fill("#event_id", "")
    page.click("#delivery-filter button[type=submit]")
    page.locator("#no-deliveries").wait_for()

    # Retry now delivers it; the schedule would have waited an hour.
    page.goto(f"{server}/console/instances/{appid}/deliveries?state=retrying")
    sink.set(status=200)
    page.locator("li.delivery", has_text="br1").locator("button", has_text="Retry now").click()
    page.locator("#flash").wait_for()
    assert "Queued for its next attempt now" in page.inner_text("#flash")
    wait_for(lambda: is_delivered(redis, delivery_id), timeout=15, what="delivery")
    page.goto(f"{server}/console/instances/{appid}/deliveries")
    delivered = page.locator("li.delivery", has_text="br1")
    assert delivered.get_attribute("data-state") == "delivered"
    assert page.locator("#failing-banner").count() == 0  # the address answered: no longer failing
    delivered.locator("a").first.click()
    page.wait_for_url(f"{server}/console/deliveries/*")
    assert page.locator("table.attempts tbody tr").count() == 2
    assert "delivered" in page.inner_text("#state")
    context.close()
