"""Accounts that sign in to the console with a login and password, and a JSON API client signed in that way."""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from svcgw.config.settings import Settings
from svcgw.registry import passwords
from svcgw.registry.credentials import Credentials
from svcgw.registry.invitations import Invitations
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import with_store
from tests.receiver.console.conftest import ConsoleClient

PASSWORD = "correct horse battery staple"


@dataclass
class Member:
    account: str
    login: str
    password: str


def make_member(settings: Settings, login: str | None = None, password: str | None = PASSWORD) -> Member:
    """An account with a login and (unless ``password`` is None) that password."""
    login = login or f"dev-{os.urandom(4).hex()}@example.com"

    async def action(store: Store) -> Member:
        account = await store.create_account("password test", devices=10, login=login)
        if password is not None:
            await Credentials(store.redis, keys).set_password(account.id, passwords.hash_password(password))
        return Member(account.id, login, password or "")

    return with_store(settings, action)


def invite(settings: Settings, account: str, seconds: int = 3600) -> str:
    """A new invitation's token, as ``svcgw accounts invite`` makes it."""

    async def action(store: Store) -> str:
        return (await Invitations(store.redis, keys).issue(account, seconds)).token

    return with_store(settings, action)


class PasswordClient(ConsoleClient):
    """A JSON API client signed in with a login and password."""

    def __init__(self, base: str, login: str, password: str) -> None:
        self.base = base
        self.http = httpx.Client(base_url=base, timeout=15)
        answer = self.http.post("/console/api/session", json={"login": login, "password": password})
        assert answer.status_code == 200, answer.text
        self.csrf = answer.json()["data"]["csrf_token"]
        self.account = answer.json()["data"]["account"]


def sign_in(base: str, login: str, password: str) -> httpx.Response:
    """One JSON sign-in attempt, in a client of its own."""
    return httpx.post(base + "/console/api/session", json={"login": login, "password": password}, timeout=15)
