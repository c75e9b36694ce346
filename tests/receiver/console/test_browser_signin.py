"""Signing in and API keys in real headless Chromium (Debian's package) driven by Playwright.

An operator's invitation link, a password chosen, signed in, the API keys
page, a key created and shown once, and that key calling the gateway: a real
``svcgw serve`` process with the simulator as its capability layer, and a
real Redis.

With ``SVCGW_TEST_SCREENSHOTS=<dir>`` each step is also saved there as a
PNG file (the ones in ``docs/`` were made that way).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.receiver.console import test_browser
from tests.receiver.console.journey import accept_invitation, create_api_key, open_api_keys, sign_in, sign_out
from tests.receiver.console.members import Member, invite, make_member
from tests.receiver.console.test_browser import Shots
from tests.receiver.gateway.stack import Stack, start_stack
from tests.receiver.gateway.stack import sim as sim  # the simulator, in-process behind a real HTTP server

pytestmark = test_browser.pytestmark
browser = test_browser.browser  # the same Chromium as the console's other browser tests

PASSWORD = "my own onboarding password"
DEVICE = {"appid": "", "type": "iPad", "name": "laptop", "version": 0}


@pytest.fixture
def gateway(env: dict[str, str], sim: str) -> Iterator[Stack]:
    """A real ``svcgw serve`` process whose capability layer is the simulator."""
    stack = start_stack(env, sim, subprocess=True)
    yield stack
    stack.stop()


@pytest.fixture
def invited(gateway: Stack) -> tuple[Member, str]:
    """An account with a login and no password yet, and its invitation link (made before the browser starts)."""
    member = make_member(gateway.settings, login="new.developer@example.com", password=None)
    return member, gateway.base + "/console/invitation/" + invite(gateway.settings, member.account)


def test_invitation_password_api_key_and_a_gateway_call(
    gateway: Stack, invited: tuple[Member, str], browser: Any
) -> None:
    member, link = invited
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gateway.base)
    page = context.new_page()
    page.set_default_timeout(15_000)
    shots = Shots(page)

    # The link names the login; choosing a password signs the developer in.
    page.goto(link)
    assert page.inner_text("#invited-login") == member.login
    shots("invitation")
    accept_invitation(page, link, PASSWORD)
    assert "Your password is set" in page.inner_text("#flash")
    assert member.account in page.inner_text("header")

    # No key yet; create one: it is shown once, with a Copy button the page's one script drives.
    open_api_keys(page)
    assert page.locator("#no-keys").count() == 1
    key = create_api_key(page, "my laptop")
    assert key.startswith("sk_")
    copy = page.locator("#copy-key")
    assert copy.is_visible()
    copy.click()
    page.wait_for_function("document.getElementById('copy-key').textContent === 'Copied'")
    shots("api-key-created")

    # The key calls the gateway: a device is created at the capability layer.
    answer = gateway.api(key, "device/create", DEVICE)
    assert answer.status_code == 200 and answer.json()["code"] == 0, answer.text
    appid = answer.json()["data"]["appid"]
    assert appid

    # Shown once: the list has its label and prefix, and when it was last used, never the key.
    open_api_keys(page)
    row = page.locator("#keys tr.active", has_text="my laptop")
    assert row.count() == 1 and key[:7] in row.inner_text() and "never" not in row.inner_text()
    assert key not in page.content()
    shots("api-keys")

    # The invitation was used up.
    page.goto(link)
    assert page.locator("#invitation-gone").count() == 1
    page.goto(gateway.base + "/console/account")
    shots("account")

    # From now on the developer signs in with the login and password; the instance is there.
    page.goto(gateway.base + "/console/instances")
    sign_out(page)
    shots("sign-in")
    sign_in(page, gateway.base, member.login, PASSWORD)
    assert page.locator(f"tr[data-appid='{appid}']").count() == 1
    context.close()
