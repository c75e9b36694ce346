"""Steps of the developer's journey through the console, for browser tests (Playwright, sync API).

Each step is a small function over a page so that a longer end-to-end
journey can chain them: ``accept_invitation``, ``sign_in``,
``sign_in_with_key``, ``create_api_key``, ``new_instance_by_qr``,
``relogin``. Each drives the page the way a person does, by its fields and
buttons, and waits for the page it leads to. The phone is the simulator's
control API (:class:`Phone`). ``shots`` (optional) saves a screenshot of
each step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

Shot = Callable[[str], None]


def _no_shot(name: str) -> None:
    return None


class Phone:
    """The person holding the phone: scans, confirms, cancels, receives a six-digit code (``/_sim/qr``)."""

    def __init__(self, sim: str) -> None:
        self.sim = sim

    def act(self, appid: str, action: str, **extra: Any) -> dict[str, Any]:
        answer = httpx.post(
            f"{self.sim}/_sim/qr", json={"appid": appid, "action": action, **extra}, timeout=10, trust_env=False
        )
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]


def sign_in_with_key(page: Any, base: str, key: str) -> None:
    page.goto(base + "/console/")
    page.fill("#api_key", key)
    page.click("button[type=submit]")
    page.wait_for_url(base + "/console/instances")


def accept_invitation(page: Any, url: str, password: str) -> None:
    """Open an invitation link, choose ``password``, and land signed in on the instances page."""
    page.goto(url)
    page.fill("#password", password)
    page.fill("#password_confirm", password)
    page.click("#invitation button[type=submit]")
    page.wait_for_url("**/console/instances")


def sign_in(page: Any, base: str, login: str, password: str) -> None:
    """Sign in on the sign-in page with a login and password."""
    page.goto(base + "/console/login")
    page.fill("#login", login)
    page.fill("#password", password)
    page.click("#sign-in-password")
    page.wait_for_url(base + "/console/instances")


def sign_out(page: Any) -> None:
    page.click("text=Sign out")
    page.wait_for_url("**/console/login")


def open_api_keys(page: Any) -> None:
    page.click("nav >> text=API keys")
    page.wait_for_url("**/console/keys")


def create_api_key(page: Any, label: str) -> str:
    """Create a key on the API keys page; the key, as the page shows it this once."""
    open_api_keys(page)
    page.fill("#label", label)
    page.click("#create-key button[type=submit]")
    field = page.locator("#new-key")
    field.wait_for()
    return str(field.input_value())


def revoke_api_key(page: Any, label: str) -> None:
    """Revoke the key with this label on the API keys page."""
    open_api_keys(page)
    page.locator("#keys tr.active", has_text=label).locator("button.revoke").click()
    page.locator("#flash").wait_for()


def login_status(page: Any, status: int, timeout: float = 15_000) -> None:
    """Wait until the login page (reloading itself) shows ``status``."""
    page.wait_for_selector(f"#qr-login[data-status='{status}']", timeout=timeout)


def new_instance_by_qr(
    page: Any, base: str, phone: Phone, *, callback_url: str, code: str, shots: Shot = _no_shot
) -> str:
    """New instance: QR shown; the phone scans (1) and asks for a code (10); the code is entered; online.

    Returns the new instance's appid.
    """
    page.goto(base + "/console/instances")
    page.click("#new-instance")
    page.wait_for_url(base + "/console/instances/new")
    page.fill("#callback_url", callback_url)
    shots("new-instance")
    page.click("#create-instance")
    page.wait_for_url(f"{base}/console/logins/**")
    image = page.locator("#qr-image")
    image.wait_for()
    assert image.get_attribute("src").startswith("data:image/png;base64,")
    assert page.evaluate("document.getElementById('qr-image').naturalWidth") > 50  # the browser decoded it
    appid = str(page.inner_text("#login-appid"))
    assert "Waiting for a scan" in page.inner_text("#login-status")
    shots("qr")

    phone.act(appid, "scan")
    login_status(page, 1)
    assert "Confirm the login on the phone" in page.inner_text("#login-status")
    shots("qr-scanned")

    phone.act(appid, "code", code=code)
    login_status(page, 10)
    page.fill("#code", code)
    shots("qr-code")
    page.click("#code-form button[type=submit]")
    page.wait_for_url(f"{base}/console/instances/{appid}")
    assert "events of this instance flow" in page.inner_text("#flash")
    assert page.locator("#status .badge.ok").inner_text() == "online"
    shots("instance-online")
    return appid


def relogin(page: Any, base: str, appid: str, *, shots: Shot = _no_shot) -> None:
    """An instance offline with ``relogin``: the page says so, and Re-login brings it back without a scan."""
    page.goto(f"{base}/console/instances/{appid}")
    assert "Re-login" in page.inner_text("#action-needed")
    assert page.locator("#status .badge.bad").inner_text() == "offline"
    shots("instance-offline")
    page.click("#relogin")
    page.wait_for_url(f"{base}/console/instances/{appid}")
    assert "Re-logged in without a scan" in page.inner_text("#flash")
    assert page.locator("#status .badge.ok").inner_text() == "online"
    shots("instance-recovered")
