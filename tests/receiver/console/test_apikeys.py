"""The API keys page and its JSON API: create with a label (shown once), list, revoke; the gateway obeys at once."""

from __future__ import annotations

import re
import time

import httpx
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.receiver.console.conftest import ConsoleClient, Developer, serve
from tests.receiver.console.members import PASSWORD, PasswordClient, make_member
from tests.receiver.console.test_pages import csrf_of
from tests.receiver.gateway.stack import Stack, error
from tests.receiver.gateway.stack import sim as sim  # the simulator fixture, shared with this module
from tests.receiver.gateway.stack import stack as stack  # the gateway with the simulator upstream

NO_KEY = {"code": -40404, "message": "no such API key", "data": None}


def test_create_list_and_revoke_through_the_api(server: str, settings: Settings, redis: Redis) -> None:
    member = make_member(settings)
    client = PasswordClient(server, member.login, PASSWORD)
    assert client.get("/keys").json()["data"] == {"keys": []}

    created = client.change("POST", "/keys", {"label": "  production server  "})
    assert created.status_code == 201, created.text
    data = created.json()["data"]
    assert data["key"].startswith("sk_") and data["key"].startswith(data["prefix"])
    assert data["label"] == "production server" and data["revoked"] is False and data["last_used"] is None
    assert abs(data["created_at"] - time.time()) < 60
    assert "account" not in data and "hash" not in data

    listed = client.get("/keys").json()["data"]["keys"]
    assert [k["id"] for k in listed] == [data["id"]]
    assert data["key"] not in client.get("/keys").text  # shown once: never listed
    stored = redis.hgetall(keys.api_key(data["id"]))
    assert data["key"].encode() not in b"".join(stored.values())  # only its digest is kept

    revoked = client.change("DELETE", f"/keys/{data['id']}")
    assert revoked.status_code == 200 and revoked.json()["data"]["revoked"] is True
    assert client.get("/keys").json()["data"]["keys"][0]["revoked_at"] is not None
    assert httpx.get(server + "/console/api/instances", headers={"Svc-Key": data["key"]}).status_code == 401
    client.close()


def test_changes_need_the_csrf_token_and_a_sane_label(server: str, settings: Settings) -> None:
    member = make_member(settings)
    client = PasswordClient(server, member.login, PASSWORD)
    assert client.change("POST", "/keys", {"label": "x"}, csrf=False).status_code == 403
    assert client.get("/keys").json()["data"]["keys"] == []
    assert client.change("POST", "/keys", {"label": "x" * 101}).status_code == 400
    assert client.change("POST", "/keys", {"label": "a\nb"}).status_code == 400
    assert client.change("POST", "/keys", {"label": 5}).status_code == 400
    assert client.change("POST", "/keys", {}).status_code == 201  # a label is optional
    key_id = client.get("/keys").json()["data"]["keys"][0]["id"]
    assert client.change("DELETE", f"/keys/{key_id}", csrf=False).status_code == 403
    assert client.get("/keys").json()["data"]["keys"][0]["revoked"] is False
    assert httpx.get(server + "/console/api/keys").status_code == 401
    client.close()


def test_another_accounts_keys_are_neither_listed_nor_revoked(
    server: str, settings: Settings, developer: Developer, stranger: Developer
) -> None:
    mine = ConsoleClient(server, developer.key)
    listed = mine.get("/keys").json()["data"]["keys"]
    assert [k["id"] for k in listed] == [developer.key_id]
    for target in (stranger.key_id, "key_doesnotexist", "x" * 500):
        refused = mine.change("DELETE", f"/keys/{target}")
        assert refused.status_code == 404 and refused.json() == NO_KEY
    # The stranger's key still works; so does its own revocation through its own session.
    assert httpx.get(server + "/console/api/instances", headers={"Svc-Key": stranger.key}).status_code == 200
    # A key used in Svc-Key may manage its own account's keys (scripts), never another's.
    scripted = httpx.delete(server + f"/console/api/keys/{developer.key_id}", headers={"Svc-Key": stranger.key})
    assert scripted.status_code == 404
    assert mine.get("/session").status_code == 200
    mine.close()


def test_creating_and_revoking_count_against_the_rate_limit(env: dict[str, str]) -> None:
    settings = Settings.from_env({**env, "SVCGW_RATE_LIMIT": "2/minute"})
    member = make_member(settings)
    with serve(settings) as base:
        client = PasswordClient(base, member.login, PASSWORD)
        first = client.change("POST", "/keys", {"label": "one"}).json()["data"]
        assert client.change("DELETE", f"/keys/{first['id']}").status_code == 200
        over = client.change("POST", "/keys", {"label": "three"})
        assert over.status_code == 429 and int(over.headers["retry-after"]) >= 1
        assert len(client.get("/keys").json()["data"]["keys"]) == 1  # nothing created over the limit
        client.close()


def test_the_keys_page_shows_a_new_key_once_with_a_copy_script_allowed_by_nonce(
    server: str, settings: Settings
) -> None:
    member = make_member(settings)
    with httpx.Client(base_url=server, timeout=15) as http:
        csrf = csrf_of(http.get("/console/login").text)
        http.post("/console/login", data={"login": member.login, "password": PASSWORD, "csrf_token": csrf})
        page = http.get("/console/keys")
        assert page.status_code == 200 and 'id="no-keys"' in page.text and "<script" not in page.text
        csrf = csrf_of(page.text)
        assert http.post("/console/keys", data={"label": "ci"}).status_code == 403

        created = http.post("/console/keys", data={"label": "ci runner", "csrf_token": csrf})
        assert created.status_code == 201
        key = re.search(r'id="new-key" type="text" readonly value="(sk_[^"]+)"', created.text)
        assert key, created.text[:2000]
        # The one script is allowed by this answer's nonce, and nothing else is.
        policy = created.headers["content-security-policy"]
        nonce = re.search(r"script-src 'nonce-([^']+)'", policy)
        assert nonce and f'<script nonce="{nonce.group(1)}">' in created.text
        assert "default-src 'none'" in policy and created.headers["cache-control"] == "no-store"
        assert 'data-copy="new-key" hidden' in created.text  # without the script, the button stays hidden

        listing = http.get("/console/keys")
        assert key.group(1) not in listing.text and "ci runner" in listing.text
        assert key.group(1)[:7] + "…" in listing.text and "never" in listing.text
        assert httpx.get(server + "/console/api/session", headers={"Svc-Key": key.group(1)}).status_code == 200

        key_id = re.search(r'data-key-id="(key_[0-9a-f]+)"', listing.text)
        assert key_id
        assert http.post(f"/console/keys/{key_id.group(1)}/revoke", data={}).status_code == 403
        revoked = http.post(f"/console/keys/{key_id.group(1)}/revoke", data={"csrf_token": csrf})
        assert revoked.status_code == 303
        after = http.get("/console/keys")
        assert "revoked" in after.text and "gateway refuses it" in after.text
        assert httpx.get(server + "/console/api/session", headers={"Svc-Key": key.group(1)}).status_code == 401
        assert http.post("/console/keys/key_0000000000000000/revoke", data={"csrf_token": csrf}).status_code == 404


def test_a_key_made_in_the_console_works_at_the_gateway_until_revoked(stack: Stack) -> None:
    member = make_member(stack.settings)
    client = PasswordClient(stack.base, member.login, PASSWORD)
    created = client.change("POST", "/keys", {"label": "gateway"}).json()["data"]
    appid = stack.create_device(created["key"])  # a real call through the gateway to the capability layer
    assert appid
    listed = client.get("/keys").json()["data"]["keys"][0]
    assert listed["last_used"] is not None and abs(listed["last_used"] - time.time()) < 60

    client.change("DELETE", f"/keys/{created['id']}").raise_for_status()
    # The very next call is refused: nothing is cached anywhere.
    refused = stack.api(created["key"], "device/create", {"appid": "", "type": "iPad", "name": "t", "version": 0})
    assert error(refused) == (401, 401)
    client.close()
