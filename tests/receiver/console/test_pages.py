"""The console's HTML pages over plain HTTP: sign-in, CSRF on forms, scoping, no token on any page."""

from __future__ import annotations

import re

import httpx
import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import with_store
from tests.receiver.console.conftest import Developer, gateway_call, serve
from tests.support import Sink

TOKEN = "tok_never_shown_" + "x" * 16


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, html[:500]
    return match.group(1)


def signed_in(server: str, key: str) -> tuple[httpx.Client, str]:
    http = httpx.Client(base_url=server, timeout=15)
    login = http.get("/console/login")
    assert login.status_code == 200 and "svcgw_console_login" in login.headers["set-cookie"]
    answer = http.post("/console/login", data={"api_key": key, "csrf_token": csrf_of(login.text)})
    assert answer.status_code == 303 and answer.headers["location"] == "/console/instances"
    page = http.get("/console/instances")
    assert page.status_code == 200
    return http, csrf_of(page.text)


@pytest.mark.parametrize(
    ("schedule", "said"), [("1,2,3", "first attempt and 3 retries"), ("5", "first attempt and 1 retry")]
)
def test_the_dead_letters_page_counts_this_deployments_retries(
    env: dict[str, str], developer: Developer, schedule: str, said: str
) -> None:
    with serve(Settings.from_env(dict(env, SVCGW_RETRY_SCHEDULE=schedule))) as server:
        http, _ = signed_in(server, developer.key)
        page = http.get("/console/dead-letters")
    http.close()
    assert page.status_code == 200
    note = re.search(r'id="dead-letters-note">([^<]*)<', page.text)
    assert note and said in note.group(1) and "six" not in note.group(1)


def test_every_page_names_an_icon_and_favicon_ico_answers(server: str, developer: Developer) -> None:
    http, _ = signed_in(server, developer.key)
    for page in ("/console/login", "/console/instances", "/console/dead-letters"):
        link = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)"', http.get(page).text)
        assert link, page
        icon = http.get(link.group(1))
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml"), page
    asked = http.get("/favicon.ico")  # what a browser asks on a page that names no icon
    http.close()
    assert asked.status_code == 200 and asked.headers["content-type"].startswith("image/svg+xml")
    assert asked.content.startswith(b"<svg")


def test_sign_in_form_and_its_csrf(server: str, developer: Developer) -> None:
    with httpx.Client(base_url=server, timeout=15) as http:
        first = http.get("/console/instances")
        assert first.status_code == 303 and first.headers["location"].startswith("/console/login")
        login = http.get("/console/login")
        token = csrf_of(login.text)
        assert http.post("/console/login", data={"api_key": developer.key}).status_code == 403
        assert (
            http.post("/console/login", data={"api_key": developer.key, "csrf_token": "x" + token}).status_code == 403
        )
        wrong = http.post("/console/login", data={"api_key": "sk_wrong", "csrf_token": token})
        assert wrong.status_code == 401 and "not valid" in wrong.text
        # Where to go after signing in: only a path inside the console.
        evil = http.post(
            "/console/login", data={"api_key": developer.key, "csrf_token": token, "next": "//evil.example/"}
        )
        assert evil.status_code == 303 and evil.headers["location"] == "/console/instances"
        cookie = evil.headers["set-cookie"]
        assert "svcgw_console=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "Path=/console" in cookie
        page = http.get("/console/instances")
        assert page.status_code == 200 and developer.appids[0] in page.text
        assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"

        out_token = csrf_of(page.text)
        assert http.post("/console/logout", data={}).status_code == 403
        assert http.post("/console/logout", data={"csrf_token": out_token}).status_code == 303
        assert http.get("/console/instances").status_code == 303


def test_every_page_renders_and_forms_need_the_token(
    server: str, developer: Developer, stranger: Developer, sink: Sink, redis: Redis, settings: Settings
) -> None:
    http, csrf = signed_in(server, developer.key)
    appid = developer.appids[0]
    httpx.post(developer.receiver_url(server), content=b'{"event_type":"Msg","events":[{"id":"p1"}]}', timeout=10)

    refused = http.post(f"/console/instances/{appid}/callback", data={"url": sink.url, "bearer": "on"})
    assert refused.status_code == 403 and sink.posts() == []
    saved = http.post(
        f"/console/instances/{appid}/callback",
        data={"url": sink.url, "bearer": "on", "bearer_token": TOKEN, "csrf_token": csrf},
    )
    assert saved.status_code == 303 and saved.headers["location"] == f"/console/instances/{appid}"
    shown = http.get(saved.headers["location"])
    assert "Test POST succeeded" in shown.text and "HTTP 200" in shown.text
    assert f'value="{sink.url}"' in shown.text
    assert len(sink.posts()) == 1 and sink.posts()[0].headers["authorization"] == f"Bearer {TOKEN}"
    # The message is shown once.
    assert "Test POST succeeded" not in http.get(f"/console/instances/{appid}").text

    bad = http.post(f"/console/instances/{appid}/callback", data={"url": "http://10.0.0.1/x", "csrf_token": csrf})
    assert bad.status_code == 400 and "-40013" in bad.text and "Nothing was saved" in bad.text

    for path in (
        "/console/instances",
        f"/console/instances/{appid}",
        f"/console/instances/{appid}/log",
        "/console/settings",
        "/console/dead-letters",
        f"/console/dead-letters?appid={appid}",
        "/console/operations",
    ):
        page = http.get(path)
        assert page.status_code == 200, path
        assert TOKEN not in page.text, path
        assert "<html" in page.text and "console.css" in page.text
    log = http.get(f"/console/instances/{appid}/log").text
    assert "{&#34;id&#34;:&#34;p1&#34;}" in log
    httpx.post(
        developer.receiver_url(server),
        content=b'{"event_type":"Msg","events":[{"id":"<script>alert(1)</script>"}]}',
        timeout=10,
    ).raise_for_status()
    log = http.get(f"/console/instances/{appid}/log").text
    assert "<script>alert" not in log and "&lt;script&gt;alert(1)&lt;/script&gt;" in log

    for path in (
        f"/console/instances/{stranger.appids[0]}",
        f"/console/instances/{stranger.appids[0]}/log",
        "/console/instances/we_unknown",
        "/console/dead-letters/dlv_unknown",
    ):
        assert http.get(path).status_code == 404, path
    other = http.post(f"/console/instances/{stranger.appids[0]}/callback", data={"url": sink.url, "csrf_token": csrf})
    assert other.status_code == 404 and not redis.exists(keys.callback_instance(stranger.appids[0]))

    assert http.post("/console/operations/deny", data={"operations": "message/sendText"}).status_code == 403
    assert (
        http.post(
            "/console/operations/deny", data={"operations": "message/sendText\nlogin/getQr", "csrf_token": csrf}
        ).status_code
        == 303
    )
    assert redis.smembers(keys.account_own_denied(developer.account)) == {b"message/sendText", b"login/getQr"}
    assert http.post("/console/operations/allow", data={"operation": "login/getQr"}).status_code == 403
    assert (
        http.post("/console/operations/allow", data={"operation": "login/getQr", "csrf_token": csrf}).status_code == 303
    )
    assert redis.smembers(keys.account_own_denied(developer.account)) == {b"message/sendText"}
    assert not redis.exists(keys.account_denied(developer.account))
    invalid = http.post("/console/operations/deny", data={"operations": "bogus", "csrf_token": csrf})
    assert invalid.status_code == 400

    vault = TokenVault.from_settings(settings)

    def secret() -> str:
        stored = redis.hget(keys.callback_instance(appid), "secret")
        assert stored is not None and not stored.startswith(b"whsec_")  # sealed at rest
        return vault.open(stored)

    before = secret()
    assert http.post(f"/console/instances/{appid}/rotate-secret", data={}).status_code == 403
    assert secret() == before
    assert http.post(f"/console/instances/{appid}/rotate-secret", data={"csrf_token": csrf}).status_code == 303
    assert secret() != before
    assert http.post("/console/dead-letters/replay", data={"scope": "all", "appid": appid}).status_code == 403
    http.close()


CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def test_every_page_sends_the_policy_and_no_sniffing(server: str, developer: Developer) -> None:
    with httpx.Client(base_url=server, timeout=15) as http:
        login = http.get("/console/login")
        refused = http.post("/console/login", data={"api_key": developer.key})
        for answer in (login, refused):
            assert answer.headers["content-security-policy"] == CSP
            assert answer.headers["x-frame-options"] == "DENY" and answer.headers["cache-control"] == "no-store"
            assert answer.headers.get_list("x-content-type-options") == ["nosniff"]
    http, _csrf = signed_in(server, developer.key)
    appid = developer.appids[0]
    for path in ("/console/instances", f"/console/instances/{appid}", "/console/settings", "/console/nope/x"):
        answer = http.get(path)
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"], path
        if answer.headers["content-type"].startswith("text/html") and answer.status_code != 404:
            assert answer.headers["content-security-policy"] == CSP, path
            assert answer.headers["x-frame-options"] == "DENY", path
    missing = http.get("/console/instances/we_nosuchinstance0")
    assert missing.status_code == 404 and missing.headers["content-security-policy"] == CSP
    http.close()


def test_form_changes_count_against_the_accounts_rate_limit(
    env: dict[str, str], developer: Developer, redis: Redis
) -> None:
    limited = Settings.from_env({**env, "SVCGW_RATE_LIMIT": "3/minute"})
    with serve(limited) as base:
        http, csrf = signed_in(base, developer.key)  # signing in does not count
        for operation in ("message/sendText", "login/getQr"):
            denied = http.post("/console/operations/deny", data={"operations": operation, "csrf_token": csrf})
            assert denied.status_code == 303
        assert gateway_call(limited, developer.account)  # the third of three, in the gateway's window
        appid = developer.appids[0]
        before = redis.hget(keys.callback_instance(appid), "secret")

        refused = http.post(f"/console/instances/{appid}/rotate-secret", data={"csrf_token": csrf})
        assert refused.status_code == 429
        wait = int(refused.headers["retry-after"])
        assert 1 <= wait <= 60
        assert "Too many changes" in refused.text and f"Try again in {wait} second" in refused.text
        assert refused.headers["content-security-policy"] == CSP
        assert redis.hget(keys.callback_instance(appid), "secret") == before
        again = http.post("/console/operations/deny", data={"operations": "contact/list", "csrf_token": csrf})
        assert again.status_code == 429
        assert redis.smembers(keys.account_own_denied(developer.account)) == {b"message/sendText", b"login/getQr"}
        # Pages are reads, and signing out always works.
        assert http.get("/console/operations").status_code == 200
        assert http.post("/console/logout", data={"csrf_token": csrf}).status_code == 303
        http.close()


def test_the_page_keeps_the_token_on_a_new_origin_only_when_asked(
    server: str, developer: Developer, sink: Sink, redis: Redis
) -> None:
    http, csrf = signed_in(server, developer.key)
    try:
        appid = developer.appids[0]
        path = f"/console/instances/{appid}/callback"
        elsewhere = sink.url.replace("127.0.0.1", "localhost")

        def save(**fields: str) -> None:
            answer = http.post(path, data={"bearer": "on", "csrf_token": csrf, **fields})
            assert answer.status_code == 303, answer.text

        save(url=sink.url, bearer_token=TOKEN)
        page = http.get(f"/console/instances/{appid}").text
        assert 'name="keep_token"' in page
        save(url=elsewhere)
        assert not redis.hexists(keys.callback_instance(appid), "token")
        save(url=sink.url, bearer_token=TOKEN)
        save(url=elsewhere, keep_token="on")
        assert redis.hexists(keys.callback_instance(appid), "token")
    finally:
        http.close()


def test_the_operations_page_shows_the_operators_denials_read_only(
    server: str, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    with_store(settings, lambda store: store.deny(developer.account, ["message/sendText"]))
    with_store(settings, lambda store: store.deny(stranger.account, ["login/getQr"]))
    http, csrf = signed_in(server, developer.key)
    try:
        assert (
            http.post("/console/operations/deny", data={"operations": "contact/list", "csrf_token": csrf}).status_code
            == 303
        )
        page = http.get("/console/operations")
        assert page.status_code == 200
        operator = page.text[page.text.index('id="denied-by-operator"') :]
        operator = operator[: operator.index("</table>")]
        assert "message/sendText" in operator and "denied by the operator" in operator
        assert "<form" not in operator and "Allow" not in operator  # read-only
        own = page.text[page.text.index('id="denied"') :]
        own = own[: own.index("</table>")]
        assert "contact/list" in own and "message/sendText" not in own and "<form" in own
        assert "login/getQr" not in page.text  # another account's denial

        before = (
            redis.smembers(keys.account_denied(developer.account)),
            redis.smembers(keys.account_own_denied(developer.account)),
        )
        # A forged form cannot even try; a real one is refused with the reason, and nothing changes.
        assert http.post("/console/operations/allow", data={"operation": "message/sendText"}).status_code == 403
        refused = http.post("/console/operations/allow", data={"operation": "message/sendText", "csrf_token": csrf})
        assert refused.status_code == 403
        assert 'role="alert"' in refused.text and "denied by the operator" in refused.text
        assert "only the operator can allow it again" in refused.text
        after = (
            redis.smembers(keys.account_denied(developer.account)),
            redis.smembers(keys.account_own_denied(developer.account)),
        )
        assert after == before == ({b"message/sendText"}, {b"contact/list"})
    finally:
        http.close()
