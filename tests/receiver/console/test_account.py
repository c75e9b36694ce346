"""Signing in with a password, the failure limits, invitations, changing the password, signing out everywhere.

The JSON API and the pages over real HTTP, against the app served in-process and a real Redis.
"""

from __future__ import annotations

import threading

import httpx
from redis import Redis

from receiver.console import codes as console_codes
from svcgw.config.settings import Settings
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import with_store
from tests.receiver.console.conftest import ConsoleClient, Developer, serve
from tests.receiver.console.members import PASSWORD, PasswordClient, invite, make_member, sign_in
from tests.receiver.console.test_pages import csrf_of
from tests.support import wait_for

GENERIC = {"code": 401, "message": console_codes.SIGN_IN_MESSAGE, "data": None}


def limited(env: dict[str, str], **extra: str) -> Settings:
    return Settings.from_env({**env, **extra})


# --- signing in ------------------------------------------------------------------------------
def test_password_sign_in_and_one_message_for_every_failure(server: str, settings: Settings) -> None:
    member = make_member(settings, login="Dev.One@Example.com")
    # The login is the same login whatever its case.
    answer = sign_in(server, "dev.one@EXAMPLE.com", PASSWORD)
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert data["account"] == member.account and len(data["csrf_token"]) >= 32
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and PASSWORD not in cookie

    wrong = sign_in(server, member.login, PASSWORD + "!")
    unknown = sign_in(server, "nobody@example.com", PASSWORD)
    no_password = sign_in(server, make_member(settings, password=None).login, "")
    malformed = sign_in(server, "not a login", PASSWORD)
    for refused in (wrong, unknown, no_password, malformed):
        assert refused.status_code == 401 and refused.json() == GENERIC, refused.text
        assert "set-cookie" not in refused.headers

    # The body must be JSON: a cross-site form cannot sign anyone in.
    form = httpx.post(server + "/console/api/session", data={"login": member.login, "password": PASSWORD})
    assert form.status_code == 415
    assert httpx.post(server + "/console/api/session", json={"login": member.login}).status_code == 400


def test_a_password_session_reads_and_changes_like_a_key_session(server: str, settings: Settings) -> None:
    member = make_member(settings)
    client = PasswordClient(server, member.login, PASSWORD)
    who = client.get("/session").json()["data"]
    assert who == {"account": member.account, "csrf_token": client.csrf}
    assert client.get("/instances").json()["data"] == []
    # A change needs the CSRF header.
    assert (
        client.change("POST", "/operations/deny", {"operations": ["message/sendText"]}, csrf=False).status_code == 403
    )
    assert client.change("POST", "/operations/deny", {"operations": ["message/sendText"]}).status_code == 200
    assert client.change("DELETE", "/session").status_code == 200
    assert client.get("/session").status_code == 401
    client.close()


def test_failures_per_login_are_limited_even_for_the_right_password(env: dict[str, str]) -> None:
    settings = limited(env, SVCGW_SIGNIN_FAILURES_PER_LOGIN="3/15minutes")
    member = make_member(settings)
    other = make_member(settings)
    with serve(settings) as base:
        # A success clears the login's failures.
        for _ in range(2):
            assert sign_in(base, member.login, "wrong password!").status_code == 401
        assert sign_in(base, member.login, PASSWORD).status_code == 200
        for _ in range(3):
            assert sign_in(base, member.login.upper(), "wrong password!").status_code == 401
        refused = sign_in(base, member.login, PASSWORD)
        assert refused.status_code == 429
        assert refused.json() == {"code": -42900, "message": console_codes.SIGN_IN_MESSAGE, "data": None}
        assert 1 <= int(refused.headers["retry-after"]) <= 900
        # Another login from the same address is not affected by this login's limit.
        assert sign_in(base, other.login, PASSWORD).status_code == 200
        # A login nobody has is limited the same way: the limit tells nothing about which logins exist.
        for _ in range(3):
            assert sign_in(base, "ghost@example.com", "wrong password!").status_code == 401
        assert sign_in(base, "ghost@example.com", "wrong password!").status_code == 429


def test_failures_per_address_are_limited_across_logins(env: dict[str, str], redis: Redis) -> None:
    settings = limited(env, SVCGW_SIGNIN_FAILURES_PER_ADDRESS="4/15minutes")
    member = make_member(settings)
    with serve(settings) as base:
        for number in range(4):
            assert sign_in(base, f"guess{number}@example.com", "wrong password!").status_code == 401
        refused = sign_in(base, member.login, PASSWORD)
        assert refused.status_code == 429 and refused.json()["message"] == console_codes.SIGN_IN_MESSAGE
        # The form says the same, with 429 and Retry-After.
        with httpx.Client(base_url=base, timeout=15) as http:
            token = csrf_of(http.get("/console/login").text)
            page = http.post("/console/login", data={"login": member.login, "password": PASSWORD, "csrf_token": token})
            assert page.status_code == 429 and int(page.headers["retry-after"]) >= 1
            assert console_codes.SIGN_IN_MESSAGE in page.text
            assert "svcgw_console=" not in page.headers.get("set-cookie", "")
    # The windows are Redis keys of their own, named by the login's digest: no login or password in them.
    names = [name.decode() for name in redis.scan_iter(match=keys.signin_failures + "*")]
    assert names and not any("@" in name or "wrong" in name for name in names)


def test_sign_in_does_not_spend_the_accounts_rate_limit(env: dict[str, str]) -> None:
    settings = limited(env, SVCGW_RATE_LIMIT="2/minute")
    member = make_member(settings)
    with serve(settings) as base:
        for _ in range(4):
            assert sign_in(base, member.login, PASSWORD).status_code == 200
        client = PasswordClient(base, member.login, PASSWORD)
        assert client.change("POST", "/operations/deny", {"operations": ["a/b"]}).status_code == 200
        assert client.change("POST", "/operations/deny", {"operations": ["a/c"]}).status_code == 200
        # Changing the password is a change like any other: over the limit, refused before any check.
        over = client.change("PUT", "/password", {"current_password": PASSWORD, "new_password": "another password"})
        assert over.status_code == 429 and over.json()["code"] == -42900
        # Signing out everywhere always works.
        assert client.change("DELETE", "/sessions").status_code == 200
        client.close()


def test_the_sign_in_page_leads_with_the_password_and_still_takes_a_key(
    server: str, settings: Settings, developer: Developer
) -> None:
    member = make_member(settings)
    with httpx.Client(base_url=server, timeout=15) as http:
        page = http.get("/console/login")
        assert page.text.index('id="password"') < page.text.index('id="api_key"')
        token = csrf_of(page.text)
        assert http.post("/console/login", data={"login": member.login, "password": PASSWORD}).status_code == 403
        wrong = http.post("/console/login", data={"login": member.login, "password": "nope", "csrf_token": token})
        assert wrong.status_code == 401 and console_codes.SIGN_IN_MESSAGE in wrong.text
        assert member.login in wrong.text and "nope" not in wrong.text  # the login is kept, the password not
        right = http.post(
            "/console/login",
            data={"login": member.login, "password": PASSWORD, "csrf_token": token, "next": "/console/keys"},
        )
        assert right.status_code == 303 and right.headers["location"] == "/console/keys"
        assert http.get("/console/keys").status_code == 200
    with httpx.Client(base_url=server, timeout=15) as http:
        token = csrf_of(http.get("/console/login").text)
        by_key = http.post("/console/login", data={"api_key": developer.key, "login": "", "csrf_token": token})
        assert by_key.status_code == 303
        assert developer.account in http.get("/console/account").text


# --- invitations -----------------------------------------------------------------------------------
def test_an_invitation_sets_the_password_once_and_signs_in(server: str, settings: Settings, redis: Redis) -> None:
    member = make_member(settings, password=None)
    token = invite(settings, member.account)
    stored = [name.decode() for name in redis.scan_iter(match=keys.invitation("*"))]
    assert len(stored) == 1 and token not in stored[0]  # only the digest is stored
    assert 0 < redis.ttl(stored[0]) <= 3600

    # A password that breaks a rule is refused and the invitation stays usable.
    short = httpx.post(server + "/console/api/invitation", json={"token": token, "password": "short"})
    assert short.status_code == 400 and "at least 10" in short.json()["message"]
    assert redis.exists(stored[0])

    accepted = httpx.post(server + "/console/api/invitation", json={"token": token, "password": PASSWORD})
    assert accepted.status_code == 200 and accepted.json()["data"]["account"] == member.account
    assert "svcgw_console=" in accepted.headers["set-cookie"]
    assert sign_in(server, member.login, PASSWORD).status_code == 200

    again = httpx.post(server + "/console/api/invitation", json={"token": token, "password": "yet another one"})
    assert again.status_code == 410 and again.json()["code"] == -41000
    assert sign_in(server, member.login, "yet another one").status_code == 401
    page = httpx.get(server + f"/console/invitation/{token}")
    assert page.status_code == 410 and "expired or has already been used" in page.text
    unknown = httpx.post(server + "/console/api/invitation", json={"token": "inv_" + "x" * 43, "password": PASSWORD})
    assert unknown.status_code == 410


def test_an_expired_invitation_is_refused(server: str, settings: Settings, redis: Redis) -> None:
    member = make_member(settings, password=None)
    token = invite(settings, member.account)
    (name,) = list(redis.scan_iter(match=keys.invitation("*")))
    redis.pexpire(name, 1)  # its lifetime ends now, as it would after --expires
    wait_for(lambda: not redis.exists(name), timeout=5, what="the invitation to expire")
    page = httpx.get(server + f"/console/invitation/{token}")
    assert page.status_code == 410 and "expired" in page.text
    answer = httpx.post(server + "/console/api/invitation", json={"token": token, "password": PASSWORD})
    assert answer.status_code == 410
    assert sign_in(server, member.login, PASSWORD).status_code == 401


def test_two_racing_acceptances_of_one_invitation_set_one_password(server: str, settings: Settings) -> None:
    member = make_member(settings, password=None)
    token = invite(settings, member.account)
    answers: dict[str, int] = {}

    def accept(password: str) -> None:
        answer = httpx.post(server + "/console/api/invitation", json={"token": token, "password": password}, timeout=30)
        answers[password] = answer.status_code

    threads = [threading.Thread(target=accept, args=(f"racing password {n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(answers.values()) == [200, 410, 410, 410]
    (winner,) = [password for password, status in answers.items() if status == 200]
    assert sign_in(server, member.login, winner).status_code == 200


def test_the_invitation_page_form(server: str, settings: Settings) -> None:
    member = make_member(settings, password=None)
    token = invite(settings, member.account)
    with httpx.Client(base_url=server, timeout=15) as http:
        page = http.get(f"/console/invitation/{token}")
        assert page.status_code == 200 and member.login in page.text
        assert (
            page.headers["referrer-policy"] == "no-referrer"
            and "script-src" not in page.headers["content-security-policy"]
        )
        csrf = csrf_of(page.text)
        fields = {"password": PASSWORD, "password_confirm": PASSWORD}
        assert http.post(f"/console/invitation/{token}", data=fields).status_code == 403  # no CSRF token
        mismatch = http.post(
            f"/console/invitation/{token}", data={**fields, "password_confirm": PASSWORD + "x", "csrf_token": csrf}
        )
        assert mismatch.status_code == 400 and "not the same" in mismatch.text
        done = http.post(f"/console/invitation/{token}", data={**fields, "csrf_token": csrf})
        assert done.status_code == 303 and done.headers["location"] == "/console/instances"
        signed_in = http.get("/console/instances")
        assert signed_in.status_code == 200 and "Your password is set" in signed_in.text
        assert http.get(f"/console/invitation/{token}").status_code == 410


# --- changing the password, signing out everywhere ---------------------------------------------------
def test_changing_the_password_ends_the_other_sessions_and_keeps_this_one(
    server: str, settings: Settings, developer: Developer
) -> None:
    member = make_member(settings)
    here = PasswordClient(server, member.login, PASSWORD)
    elsewhere = PasswordClient(server, member.login, PASSWORD)
    change = {"current_password": PASSWORD, "new_password": "a brand new password"}

    assert here.change("PUT", "/password", change, csrf=False).status_code == 403
    wrong = here.change("PUT", "/password", {**change, "current_password": "not it at all"})
    assert wrong.status_code == 403 and wrong.json()["code"] == -40330
    weak = here.change("PUT", "/password", {**change, "new_password": "short"})
    assert weak.status_code == 400 and "at least 10" in weak.json()["message"]
    same = here.change("PUT", "/password", {**change, "new_password": PASSWORD})
    assert same.status_code == 400
    assert elsewhere.get("/session").status_code == 200  # nothing changed yet

    done = here.change("PUT", "/password", change)
    assert done.status_code == 200 and done.json()["data"]["other_sessions_ended"] is True
    assert here.get("/session").status_code == 200
    assert here.change("POST", "/operations/deny", {"operations": ["a/b"]}).status_code == 200
    assert elsewhere.get("/session").status_code == 401
    assert sign_in(server, member.login, PASSWORD).status_code == 401
    assert sign_in(server, member.login, "a brand new password").status_code == 200

    # Another account's sessions are untouched.
    theirs = ConsoleClient(server, developer.key)
    here.change("DELETE", "/sessions").raise_for_status()
    assert theirs.get("/session").status_code == 200
    for client in (here, elsewhere, theirs):
        client.close()


def test_sign_out_everywhere_ends_every_session_of_the_account(server: str, settings: Settings, redis: Redis) -> None:
    member = make_member(settings)
    key_id, key = _key(settings, member.account)
    by_password = PasswordClient(server, member.login, PASSWORD)
    by_key = ConsoleClient(server, key)
    other = PasswordClient(server, member.login, PASSWORD)
    assert by_password.change("DELETE", "/sessions", csrf=False).status_code == 403
    out = by_password.change("DELETE", "/sessions")
    assert out.status_code == 200 and "svcgw_console=" in out.headers["set-cookie"]
    for client in (by_password, by_key, other):
        assert client.get("/session").status_code == 401
        client.close()
    # The API key itself still works (sessions end, keys do not) and a new session can be made.
    assert httpx.get(server + "/console/api/instances", headers={"Svc-Key": key}).status_code == 200
    assert sign_in(server, member.login, PASSWORD).status_code == 200
    assert redis.hget(keys.api_key(key_id), "revoked_at") is None


def test_the_account_page_changes_the_password_and_signs_out_everywhere(server: str, settings: Settings) -> None:
    member = make_member(settings)
    elsewhere = PasswordClient(server, member.login, PASSWORD)
    with httpx.Client(base_url=server, timeout=15) as http:
        csrf = csrf_of(http.get("/console/login").text)
        http.post("/console/login", data={"login": member.login, "password": PASSWORD, "csrf_token": csrf})
        page = http.get("/console/account")
        assert page.status_code == 200 and member.login in page.text and 'id="password-form"' in page.text
        csrf = csrf_of(page.text)
        fields = {
            "current_password": PASSWORD,
            "new_password": "page password 1",
            "new_password_confirm": "page password 1",
        }
        assert http.post("/console/account/password", data=fields).status_code == 403
        wrong = http.post(
            "/console/account/password", data={**fields, "current_password": "nope nope", "csrf_token": csrf}
        )
        assert wrong.status_code == 403 and "current password is wrong" in wrong.text
        device_before = {c.name: c.value for c in http.cookies.jar if c.name.startswith("svcgw_device_")}
        assert len(device_before) == 1
        done = http.post("/console/account/password", data={**fields, "csrf_token": csrf})
        assert done.status_code == 303
        # The new password retired the browser's device cookie; having just proved it, it gets a new one.
        ((name, renewed),) = [(c.name, c.value) for c in http.cookies.jar if c.name.startswith("svcgw_device_")]
        assert name in device_before and renewed != device_before[name]
        assert "Password changed" in http.get("/console/account").text
        assert elsewhere.get("/session").status_code == 401
        assert http.post("/console/account/sign-out-everywhere", data={}).status_code == 403
        assert elsewhere.get("/session").status_code == 401  # ended by the password change already
        out = http.post("/console/account/sign-out-everywhere", data={"csrf_token": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/console/login"
        assert http.get("/console/account").status_code == 303
    elsewhere.close()


def _key(settings: Settings, account: str) -> tuple[str, str]:
    async def action(store: Store) -> tuple[str, str]:
        key, clear = await store.create_key(account, "test")
        return key.id, clear

    return with_store(settings, action)


def test_the_new_routes_are_in_the_openapi_document(server: str) -> None:
    doc = httpx.get(server + "/openapi.json", timeout=10).json()
    paths = doc["paths"]
    assert set(paths["/console/api/session"]) == {"post", "get", "delete"}
    forms = paths["/console/api/session"]["post"]["requestBody"]["content"]["application/json"]["schema"]["oneOf"]
    assert "login" in str([doc["components"]["schemas"][form["$ref"].rsplit("/", 1)[-1]] for form in forms])
    assert "429" in paths["/console/api/session"]["post"]["responses"]
    assert "410" in paths["/console/api/invitation"]["post"]["responses"]
    assert "put" in paths["/console/api/password"] and "delete" in paths["/console/api/sessions"]
    assert (
        set(paths["/console/api/keys"]) == {"get", "post"} and "201" in paths["/console/api/keys"]["post"]["responses"]
    )
    assert "404" in paths["/console/api/keys/{key_id}"]["delete"]["responses"]
