"""``/docs``: Swagger UI from the packaged bundle, no outside asset, a strict CSP, and it renders /openapi.json."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from receiver.docs import ASSETS
from tests.support import start_server

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[str]:
    process, base = start_server(env)
    yield base
    process.stop()


def test_the_page_and_its_assets_come_from_the_service_under_a_strict_policy(server: str) -> None:
    answer = httpx.get(server + "/docs", timeout=10)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert "connect-src 'self'" in policy
    # Every script and stylesheet is a file of this origin; no inline script.
    sources = re.findall(r'(?:src|href)="([^"]+)"', answer.text)
    assert sources and all(source.startswith("/docs/") for source in sources)
    assert not re.search(r"<script>(?!</script>)", answer.text.replace("\n", ""))
    for source in [*sources, "/docs/start.js"]:
        fetched = httpx.get(server + source, timeout=10)
        assert fetched.status_code == 200, source
        assert len(fetched.content) > 100
    assert "/openapi.json" in httpx.get(server + "/docs/start.js", timeout=10).text
    assert set(ASSETS) >= {"swagger-ui.css", "swagger-ui-bundle.js"}
    assert httpx.get(server + "/docs/swagger-ui.js.map", timeout=10).status_code == 404
    assert httpx.get(server + "/docs/..%2Fpyproject.toml", timeout=10).status_code in (400, 404)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None and not os.path.exists(CHROMIUM),
    reason="Debian's chromium is not installed (.ci/run installs it: apt-get install chromium)",
)
def test_a_browser_renders_the_operations_without_a_policy_violation_or_an_outside_request(server: str) -> None:
    from playwright.sync_api import sync_playwright

    from tests.receiver.console.test_browser import ARGS

    requested: list[str] = []
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page: Any = browser.new_page()
            page.on("request", lambda request: requested.append(request.url))
            page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.goto(server + "/docs")
            page.wait_for_selector(".opblock", timeout=20_000)
            assert page.locator(".opblock").count() >= 5
            assert "/svc/receiver/{appid}/{token}" in page.inner_text("#swagger-ui")
        finally:
            browser.close()
    assert requested and all(url.startswith(server) for url in requested), requested
    assert not problems, problems
