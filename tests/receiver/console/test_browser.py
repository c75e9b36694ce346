"""The console in real headless Chromium (Debian's package) driven by Playwright.

Sign in, set an address and see the test result, rotate the secret, read the
log, replay a dead letter and see it delivered at a sink: against a real
server, a real worker process and a real Redis.

With ``SVCGW_TEST_SCREENSHOTS=<dir>`` the main pages are also saved there as
PNG files (the ones in ``docs/`` were made that way).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.receiver.console.conftest import Developer
from tests.support import Sink, ThreadedWorker, missing_tool, start_server, tools_required, wait_for

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
TOKEN = "tok_browser_" + "q" * 20

NO_CHROMIUM = "Debian's chromium is not installed (.ci/run installs it: apt-get install chromium)"
HAS_CHROMIUM = shutil.which("chromium") is not None or os.path.exists(CHROMIUM)

pytestmark = [
    pytest.mark.slow,
    # Where the tools are required (CI), the ``browser`` fixture fails instead.
    pytest.mark.skipif(not HAS_CHROMIUM and not tools_required(), reason=NO_CHROMIUM),
]


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[str]:
    """A real ``svcgw serve`` process, as a browser meets it (not the in-process app of the other tests)."""
    process, base = start_server(env)
    yield base
    process.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    """Request it after the fixtures that use asyncio: Playwright runs an event loop in this thread."""
    from playwright.sync_api import sync_playwright

    if not HAS_CHROMIUM:
        missing_tool(NO_CHROMIUM)

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield launched
        launched.close()


class Shots:
    def __init__(self, page: Any) -> None:
        target = os.environ.get("SVCGW_TEST_SCREENSHOTS")
        self.dir = Path(target) if target else None
        self.page = page
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str) -> None:
        if self.dir is not None:
            self.page.screenshot(path=str(self.dir / f"console-{name}.png"), full_page=True)


def posts_with(sink: Sink, event_id: str) -> list[Any]:
    needle = f'"id":"{event_id}"'.encode()
    return [p for p in sink.posts() if needle in p.body]


def test_console_in_a_browser(
    server: str,
    worker: ThreadedWorker,
    sink: Sink,
    developer: Developer,
    redis: Redis,
    browser: Any,
    settings: Settings,
) -> None:
    appid = developer.appids[0]
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(15_000)
    shots = Shots(page)

    # Sign in.
    page.goto(server + "/console/")
    assert page.url.startswith(server + "/console/login")
    shots("sign-in")
    page.fill("#api_key", developer.key)
    page.click("button[type=submit]")
    page.wait_for_url(server + "/console/instances")
    assert page.locator(f"tr[data-appid='{appid}']").count() == 1

    # Set an address with a Bearer token; the test POST's result is shown.
    page.click(f"a[href='/console/instances/{appid}']")
    page.fill("#url", sink.url)
    page.check("#bearer")
    page.fill("#bearer_token", TOKEN)
    page.click("#callback-form button[type=submit]")
    result = page.locator("#test-result")
    result.wait_for()
    assert "succeeded" in result.inner_text() and "HTTP 200" in result.inner_text()
    (test_post,) = sink.posts()
    assert orjson.loads(test_post.body)["event_type"] == "SvcCallbackTest"
    assert test_post.headers["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in page.content()
    shots("instance")

    # Rotate the signing secret.
    old_secret = page.inner_text("#signing-secret")
    page.click("#rotate")
    page.locator("#flash").wait_for()
    new_secret = page.inner_text("#signing-secret")
    assert new_secret != old_secret and new_secret.startswith("whsec_")
    stored = redis.hget(keys.callback_instance(appid), "secret")
    assert stored is not None and new_secret.encode() not in stored  # sealed at rest
    assert TokenVault.from_settings(settings).open(stored) == new_secret

    # Events flow; the log shows the raw body and its delivery status.
    body = b'{"event_type":"Msg","events":[{"id":"b1","roomId":1688850000000000001234}]}'
    httpx.post(developer.receiver_url(server), content=body, timeout=10).raise_for_status()
    wait_for(lambda: posts_with(sink, "b1"), timeout=20, what="the event at the sink")
    httpx.post(developer.receiver_url(server), content=body, timeout=10).raise_for_status()  # a duplicate
    page.click("text=Callback log")
    page.wait_for_url(f"{server}/console/instances/{appid}/log")

    def delivered_shown() -> bool:
        page.reload()
        return bool(page.locator("#log .badge.state-delivered").count() == 1)

    wait_for(delivered_shown, timeout=15, interval=0.2, what="the log to show the delivery")
    assert page.locator("#log li.entry").count() == 2
    assert "1688850000000000001234" in page.inner_text("#log li.entry >> nth=1")
    shots("callback-log")

    # A delivery that keeps failing becomes a dead letter; replay it from the page.
    sink.set(status=500)
    httpx.post(
        developer.receiver_url(server), content=b'{"event_type":"Msg","events":[{"id":"dead1"}]}', timeout=10
    ).raise_for_status()
    wait_for(lambda: redis.zcard(keys.rq.failed("svcgw")) == 1, timeout=30, what="a dead letter")
    attempts = len(posts_with(sink, "dead1"))
    assert attempts == 7  # first attempt and six retries
    page.click("nav >> text=Dead letters")
    letter = page.locator("#dead-letters li.letter")
    assert letter.count() == 1
    letter.locator("summary").click()
    assert "HTTP 500" in letter.inner_text()
    shots("dead-letters")
    sink.set(status=200)
    letter.locator("button.replay-one").click()
    page.locator("#flash").wait_for()
    assert "1 dead letter queued" in page.inner_text("#flash")
    wait_for(lambda: len(posts_with(sink, "dead1")) == attempts + 1, timeout=20, what="the replayed delivery")
    wait_for(lambda: redis.zcard(keys.rq.failed("svcgw")) == 0, timeout=10, what="the dead letter to be gone")

    redis.sadd(keys.account_denied(developer.account), "login/logout")  # as svcgw accounts deny does
    page.click("nav >> text=Controlled operations")
    page.fill("#operations", "message/sendText")
    page.click("form[action$='/operations/deny'] button[type=submit]")
    page.locator("#denied").wait_for()
    assert "login/logout" in page.inner_text("#denied-by-operator")
    shots("operations")
    page.click("nav >> text=Instances")
    shots("instances")
    page.click("nav >> text=Callback settings")
    shots("settings")

    page.click("text=Sign out")
    page.wait_for_url(server + "/console/login")
    page.goto(server + "/console/instances")
    assert page.url.startswith(server + "/console/login")
    context.close()
