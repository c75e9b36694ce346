"""Steps of a developer's way through the console in a real browser (Playwright's sync API).

Each step drives one page the way a person does, by its labels and buttons,
and waits for the page it leads to; a longer end-to-end journey strings them
together (``test_browser_onboarding`` does: invitation, password, API key,
a gateway call).
"""

from __future__ import annotations

from typing import Any

Page = Any  # playwright.sync_api.Page; Playwright is a test dependency only


def accept_invitation(page: Page, url: str, password: str) -> None:
    """Open an invitation link, choose ``password``, and land signed in on the instances page."""
    page.goto(url)
    page.fill("#password", password)
    page.fill("#password_confirm", password)
    page.click("#invitation button[type=submit]")
    page.wait_for_url("**/console/instances")


def sign_in(page: Page, base: str, login: str, password: str) -> None:
    """Sign in on the sign-in page with a login and password."""
    page.goto(base + "/console/login")
    page.fill("#login", login)
    page.fill("#password", password)
    page.click("#sign-in-password")
    page.wait_for_url("**/console/instances")


def sign_out(page: Page) -> None:
    page.click("text=Sign out")
    page.wait_for_url("**/console/login")


def open_api_keys(page: Page) -> None:
    page.click("nav >> text=API keys")
    page.wait_for_url("**/console/keys")


def create_api_key(page: Page, label: str) -> str:
    """Create a key on the API keys page; the key, as the page shows it this once."""
    open_api_keys(page)
    page.fill("#label", label)
    page.click("#create-key button[type=submit]")
    field = page.locator("#new-key")
    field.wait_for()
    return str(field.input_value())


def revoke_api_key(page: Page, label: str) -> None:
    """Revoke the key with this label on the API keys page."""
    open_api_keys(page)
    page.locator("#keys tr.active", has_text=label).locator("button.revoke").click()
    page.locator("#flash").wait_for()
