"""The console's JSON API over HTTP against the app served in-process, a real Redis and a real sink."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import httpx
import orjson
from redis import Redis

from svcgw.callbacks.signing import verify
from svcgw.config.settings import Settings
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.queue import Finish
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import exc_info_field
from tests.conftest import with_store
from tests.receiver.console.conftest import ConsoleClient, Developer, gateway_call, serve
from tests.support import Sink, wait_for
from tests.worker.support import claim, finish

NOT_FOUND = {"code": -40404, "message": "appid does not exist or is not the caller's", "data": None}


def nothing_queued_or_logged(redis: Redis, appids: list[str]) -> None:
    assert redis.llen(keys.rq.queue("svcgw")) == 0
    assert redis.zcard(keys.rq.scheduled("svcgw")) == 0
    assert not list(redis.scan_iter(match=keys.delivery("*")))
    for appid in appids:
        assert redis.xlen(keys.callback_log(appid)) == 0


# --- session -------------------------------------------------------------------------
def test_sign_in_cookie_session_and_sign_out(server: str, developer: Developer, settings: Settings) -> None:
    with httpx.Client(base_url=server, timeout=10) as http:
        assert http.post("/console/api/session", json={"api_key": "sk_wrong"}).status_code == 401
        assert http.post("/console/api/session", data={"api_key": developer.key}).status_code == 415
        assert http.get("/console/api/instances").json()["code"] == 401

        answer = http.post("/console/api/session", json={"api_key": developer.key})
        assert answer.status_code == 200
        data = answer.json()["data"]
        assert data["account"] == developer.account and len(data["csrf_token"]) >= 32
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
        assert developer.key not in cookie
        who = http.get("/console/api/session").json()["data"]
        assert who == {"account": developer.account, "csrf_token": data["csrf_token"]}

        # Signing out is a change: the CSRF header is required.
        assert http.delete("/console/api/session").status_code == 403
        assert http.get("/console/api/session").status_code == 200
        out = http.delete("/console/api/session", headers={"X-CSRF-Token": data["csrf_token"]})
        assert out.status_code == 200
        assert http.get("/console/api/session").status_code == 401

        # A stolen cookie is useless after sign-out: the session is gone server-side.
        http.cookies.set("svcgw_console", cookie.split(";")[0].split("=", 1)[1], path="/console")
        assert http.get("/console/api/session").status_code == 401
        http.cookies.clear()
        http.cookies.set("svcgw_console", "forged", path="/console")
        assert http.get("/console/api/session").status_code == 401


def test_revoking_the_key_ends_its_sessions(server: str, developer: Developer, settings: Settings) -> None:
    client = ConsoleClient(server, developer.key)
    assert client.get("/instances").status_code == 200
    with_store(settings, lambda store: store.revoke_key(developer.key_id))
    assert client.get("/instances").status_code == 401
    assert client.http.post("/console/api/session", json={"api_key": developer.key}).status_code == 401
    client.close()


def test_api_key_header_needs_no_csrf(server: str, developer: Developer) -> None:
    headers = {"Svc-Key": developer.key}
    listed = httpx.get(server + "/console/api/instances", headers=headers, timeout=10)
    assert listed.status_code == 200
    denied = httpx.post(
        server + "/console/api/operations/deny", json={"operations": ["message/sendText"]}, headers=headers, timeout=10
    )
    assert denied.status_code == 200 and denied.json()["data"]["denied"] == ["message/sendText"]
    wrong = httpx.get(server + "/console/api/instances", headers={"Svc-Key": "sk_nope"}, timeout=10)
    assert wrong.status_code == 401


# --- instances ---------------------------------------------------------------------------
def test_instances_are_scoped_to_the_account(
    console: ConsoleClient, developer: Developer, stranger: Developer, sink: Sink, server: str
) -> None:
    httpx.post(
        developer.receiver_url(server), content=b'{"event_type":"Msg","events":[{"id":"x1"}]}', timeout=10
    ).raise_for_status()
    rows = console.get("/instances").json()["data"]
    assert sorted(r["appid"] for r in rows) == sorted(developer.appids)
    first = next(r for r in rows if r["appid"] == developer.appids[0])
    assert first["status"] == "not_started"
    assert first["forward_url"] is None and first["forward_source"] is None
    assert first["last_event_at"] is not None and abs(first["last_event_at"] - time.time()) < 60

    # Account default first: both instances forward there.
    console.change("PUT", "/callback", {"url": sink.url}).raise_for_status()
    console.change("PUT", f"/instances/{developer.appids[1]}/callback", {"url": sink.url + "/own"}).raise_for_status()
    by_appid = {r["appid"]: r for r in console.get("/instances").json()["data"]}
    assert (by_appid[developer.appids[0]]["forward_url"], by_appid[developer.appids[0]]["forward_source"]) == (
        sink.url,
        "account",
    )
    assert (by_appid[developer.appids[1]]["forward_url"], by_appid[developer.appids[1]]["forward_source"]) == (
        sink.url + "/own",
        "instance",
    )

    one = console.get(f"/instances/{developer.appids[0]}")
    assert one.status_code == 200 and one.json()["data"]["appid"] == developer.appids[0]
    theirs = console.get(f"/instances/{stranger.appids[0]}")
    unknown = console.get("/instances/we_doesnotexist00")
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == unknown.json() == NOT_FOUND


# --- callback settings and the SvcCallbackTest POST -----------------------------------------
def test_saving_an_instance_address_sends_one_signed_test(
    console: ConsoleClient, developer: Developer, sink: Sink, redis: Redis
) -> None:
    appid = developer.appids[0]
    token = "tok_" + "s3cr3t" * 4
    answer = console.change("PUT", f"/instances/{appid}/callback", {"url": sink.url, "bearer_token": token})
    assert answer.status_code == 200, answer.text
    assert token not in answer.text
    data = answer.json()["data"]
    callback, test = data["callback"], data["test"]
    assert callback["url"] == sink.url and callback["bearer"] is True and callback["secret"].startswith("whsec_")
    assert test["ok"] is True and test["status"] == 200 and test["error"] is None

    (post,) = wait_for(lambda: sink.posts(), what="the test POST")
    assert post.headers["authorization"] == f"Bearer {token}"
    assert post.headers["content-type"] == "application/json"
    assert verify(callback["secret"], post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])
    assert abs(int(post.headers["x-svc-timestamp"]) - time.time()) < 60
    body = orjson.loads(post.body)
    assert list(body) == ["appid", "event_type", "test", "events"]
    assert body["appid"] == appid and body["event_type"] == "SvcCallbackTest" and body["test"] is True
    (event,) = body["events"]
    assert set(event) == {"id", "content", "created_at"}
    assert event["id"] == test["event_id"] and re.fullmatch(r"cbtest_[0-9a-f]{24}", event["id"])
    assert isinstance(event["content"], str) and event["content"]
    created = datetime.fromisoformat(event["created_at"].replace("Z", "+00:00"))
    assert created.tzinfo is not None and created.utcoffset() == UTC.utcoffset(None)
    assert abs(created.timestamp() - time.time()) < 60

    # Not queued, not retried, not in the callback log.
    nothing_queued_or_logged(redis, developer.appids)

    shown = console.get(f"/instances/{appid}/callback")
    assert shown.json()["data"]["bearer"] is True and token not in shown.text

    # Blank token keeps the old one; a second test goes out with it.
    kept = console.change("PUT", f"/instances/{appid}/callback", {"url": sink.url, "bearer_token": ""})
    assert kept.json()["data"]["callback"]["bearer"] is True
    second = wait_for(lambda: sink.posts()[1:], what="the second test POST")[0]
    assert second.headers["authorization"] == f"Bearer {token}"
    assert orjson.loads(second.body)["events"][0]["id"] != event["id"]

    # The switch turns it off and deletes it.
    off = console.change("PUT", f"/instances/{appid}/callback", {"url": sink.url, "bearer": False})
    assert off.json()["data"]["callback"]["bearer"] is False
    third = wait_for(lambda: sink.posts()[2:], what="the third test POST")[0]
    assert "authorization" not in third.headers
    assert not redis.hexists(keys.callback_instance(appid), "token")

    # Clearing the address deletes the token too, and sends nothing.
    console.change("PUT", f"/instances/{appid}/callback", {"url": sink.url, "bearer_token": "again"})
    cleared = console.change("PUT", f"/instances/{appid}/callback", {"url": ""})
    assert cleared.json()["data"] == {
        "callback": {"scope": "instance", "appid": appid, "url": None, "secret": callback["secret"], "bearer": False},
        "test": None,
    }
    assert not redis.hexists(keys.callback_instance(appid), "token")
    assert len(sink.posts()) == 4
    nothing_queued_or_logged(redis, developer.appids)


def test_account_default_test_has_no_appid(console: ConsoleClient, developer: Developer, sink: Sink) -> None:
    answer = console.change("PUT", "/callback", {"url": sink.url})
    assert answer.status_code == 200
    assert answer.json()["data"]["callback"]["scope"] == "account"
    assert answer.json()["data"]["test"]["ok"] is True
    (post,) = wait_for(lambda: sink.posts(), what="the test POST")
    body = orjson.loads(post.body)
    assert list(body) == ["event_type", "test", "events"]
    assert "authorization" not in post.headers
    secret = console.get("/callback").json()["data"]["secret"]
    assert verify(secret, post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])


def test_the_setting_is_saved_when_the_test_fails(
    console: ConsoleClient, developer: Developer, sink: Sink, redis: Redis
) -> None:
    appid = developer.appids[0]
    sink.set(status=500)
    failed = console.change("PUT", f"/instances/{appid}/callback", {"url": sink.url}).json()["data"]
    assert failed["test"]["ok"] is False and failed["test"]["status"] == 500 and "500" in failed["test"]["error"]
    assert console.get(f"/instances/{appid}/callback").json()["data"]["url"] == sink.url
    assert len(sink.posts()) == 1  # not retried

    sink.set(status=302, location="http://127.0.0.1:9/elsewhere")
    redirected = console.change("PUT", f"/instances/{appid}/callback", {"url": sink.url}).json()["data"]["test"]
    assert redirected["ok"] is False and redirected["status"] == 302

    closed = "http://127.0.0.1:9/nothing-listens"
    refused = console.change("PUT", f"/instances/{appid}/callback", {"url": closed}).json()["data"]
    assert refused["test"]["ok"] is False and refused["test"]["status"] is None and refused["test"]["error"]
    assert refused["callback"]["url"] == closed
    nothing_queued_or_logged(redis, developer.appids)


def test_address_rules_are_enforced_and_nothing_is_saved(
    console: ConsoleClient, developer: Developer, server: str, sink: Sink
) -> None:
    appid = developer.appids[0]
    cases = {
        "ftp://example.com/hook": -40011,
        "not a url": -40011,
        "http://127.0.0.1:8080/hook": -40012,  # SVCGW_PUBLIC_URL's host and port
        "http://10.1.2.3/hook": -40013,
        "http://[fe80::1]/hook": -40013,
    }
    for url, code in cases.items():
        answer = console.change("PUT", f"/instances/{appid}/callback", {"url": url})
        assert answer.status_code == 400, url
        assert answer.json()["code"] == code, (url, answer.json())
        assert answer.json()["message"]
    assert console.get(f"/instances/{appid}/callback").json()["data"]["url"] is None
    assert sink.posts() == []
    bad = console.change("PUT", f"/instances/{appid}/callback", {"url": 5})
    assert bad.status_code == 400 and bad.json()["code"] == -40000


def test_rotate_secret(console: ConsoleClient, developer: Developer, stranger: Developer, sink: Sink) -> None:
    appid = developer.appids[0]
    before = console.change("PUT", f"/instances/{appid}/callback", {"url": sink.url}).json()["data"]["callback"]
    rotated = console.change("POST", f"/instances/{appid}/callback/rotate-secret")
    assert rotated.status_code == 200
    after = rotated.json()["data"]
    assert after["secret"] != before["secret"] and after["url"] == sink.url
    assert console.get(f"/instances/{appid}/callback").json()["data"]["secret"] == after["secret"]
    account = console.change("POST", "/callback/rotate-secret")
    assert account.status_code == 200 and account.json()["data"]["scope"] == "account"


# --- cross-account refusals and CSRF on every route ---------------------------------------------
def test_other_accounts_appids_are_refused_like_unknown_ones(
    console: ConsoleClient, stranger: Developer, settings: Settings, sink: Sink, redis: Redis
) -> None:
    theirs = stranger.appids[0]

    async def configure(store: Store) -> None:
        from svcgw.registry.store import Scope

        await store.set_callback(Scope(appid=theirs), "http://127.0.0.1:9/theirs", bearer_token="their-token")

    with_store(settings, configure)
    before = redis.hgetall(keys.callback_instance(theirs))
    for appid in (theirs, "we_unknown0000000"):
        for method, path, body in (
            ("GET", f"/instances/{appid}", None),
            ("GET", f"/instances/{appid}/callback", None),
            ("PUT", f"/instances/{appid}/callback", {"url": sink.url}),
            ("POST", f"/instances/{appid}/callback/rotate-secret", None),
            ("GET", f"/instances/{appid}/log", None),
            ("GET", f"/dead-letters?appid={appid}", None),
            ("POST", "/dead-letters/replay", {"appid": appid}),
        ):
            answer = console.change(method, path, body) if method != "GET" else console.get(path)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json() == NOT_FOUND, (method, path)
    assert redis.hgetall(keys.callback_instance(theirs)) == before
    assert sink.posts() == []


def test_changes_need_the_csrf_token(console: ConsoleClient, developer: Developer, redis: Redis) -> None:
    appid = developer.appids[0]
    changes = (
        ("PUT", "/callback", {"url": "http://127.0.0.1:9/x"}),
        ("POST", "/callback/rotate-secret", None),
        ("PUT", f"/instances/{appid}/callback", {"url": "http://127.0.0.1:9/x"}),
        ("POST", f"/instances/{appid}/callback/rotate-secret", None),
        ("POST", "/dead-letters/replay", {"appid": appid}),
        ("POST", "/operations/deny", {"operations": ["message/sendText"]}),
        ("POST", "/operations/allow", {"operations": ["message/sendText"]}),
        ("DELETE", "/session", None),
    )
    for method, path, body in changes:
        missing = console.change(method, path, body, csrf=False)
        assert missing.status_code == 403 and missing.json()["code"] == -40310, (method, path)
        wrong = console.http.request(
            method, "/console/api" + path, json=body, headers={"X-CSRF-Token": console.csrf[:-2] + "xx"}
        )
        assert wrong.status_code == 403, (method, path)
    assert not redis.exists(keys.callback_account(developer.account))
    assert not redis.exists(keys.callback_instance(appid))
    assert not redis.exists(keys.account_denied(developer.account))
    assert not redis.exists(keys.account_own_denied(developer.account))
    assert console.get("/session").status_code == 200


# --- callback log ------------------------------------------------------------------------------
def test_callback_log_is_raw_newest_first_paged_with_status(
    console: ConsoleClient, developer: Developer, server: str, sink: Sink
) -> None:
    appid = developer.appids[0]
    bodies = [
        b'{"event_type":"Msg","events":[{"id":"a1","roomId":1688850000000000001234}]}',
        b'{"event_type":"Msg","events":[{"id":"a2"}]}',
        b'{"event_type" : "Msg", "events" : [ {"id":"a2"} ]}',
    ]
    for body in bodies:
        httpx.post(developer.receiver_url(server, appid), content=body, timeout=10).raise_for_status()
    first = console.get(f"/instances/{appid}/log?limit=2").json()["data"]
    assert [e["body"] for e in first["entries"]] == [bodies[2].decode(), bodies[1].decode()]
    assert first["entries"][0]["delivery_id"] is None and first["entries"][0]["duplicates"] == 1
    assert first["entries"][1]["state"] == "queued"
    assert first["next_before"] == first["entries"][1]["id"]
    second = console.get(f"/instances/{appid}/log?limit=2&before={first['next_before']}").json()["data"]
    assert [e["body"] for e in second["entries"]] == [bodies[0].decode()]
    assert second["next_before"] is None
    assert console.get(f"/instances/{appid}/log?before=nope").status_code == 400
    assert console.get(f"/instances/{appid}/log?limit=0").status_code == 400
    assert console.get(f"/instances/{developer.appids[1]}/log").json()["data"]["entries"] == []


# --- dead letters ------------------------------------------------------------------------------
def make_dead_letter(redis: Redis, settings: Settings, developer: Developer, server: str, event_id: str) -> str:
    """A post received for real, then failed for good through the queue's own scripts."""
    appid = developer.appids[0]
    body = b'{"event_type":"Msg","events":[{"id":"' + event_id.encode() + b'"}]}'
    httpx.post(developer.receiver_url(server, appid), content=body, timeout=10).raise_for_status()
    (delivery_id,) = claim(settings, 1)
    now = time.time()
    attempt = Attempt(ok=False, at=now, duration=0.01, status=500, error="HTTP 500", destination="x")
    assert finish(
        settings,
        Finish(
            delivery_id,
            appid,
            "dead",
            attempt.record(1),
            due=now + settings.dead_letter_retention,
            retention=settings.dead_letter_retention,
            error=exc_info_field("HTTP 500"),
        ),
    )
    return delivery_id


def test_dead_letters_list_show_and_replay(
    console: ConsoleClient, developer: Developer, stranger: Developer, server: str, settings: Settings, redis: Redis
) -> None:
    mine = [make_dead_letter(redis, settings, developer, server, f"d{i}") for i in range(3)]
    theirs = make_dead_letter(redis, settings, stranger, server, "t1")

    listed = console.get("/dead-letters").json()["data"]
    assert listed["total"] == 3 and {d["id"] for d in listed["dead_letters"]} == set(mine)
    assert all(d["last_error"] == "HTTP 500" and d["attempts"] == 1 for d in listed["dead_letters"])
    by_appid = console.get(f"/dead-letters?appid={developer.appids[0]}&limit=2").json()["data"]
    assert by_appid["total"] == 3 and len(by_appid["dead_letters"]) == 2

    detail = console.get(f"/dead-letters/{mine[0]}").json()["data"]
    assert orjson.loads(detail["body"])["events"] == [{"id": "d0"}]
    assert [(a["status"], a["error"]) for a in detail["attempts"]] == [(500, "HTTP 500")]
    assert detail["attempts"][0]["at"] > 0

    other = console.get(f"/dead-letters/{theirs}")
    unknown = console.get("/dead-letters/dlv_unknown")
    assert other.status_code == unknown.status_code == 404 and other.json() == unknown.json()

    one = console.change("POST", "/dead-letters/replay", {"ids": [mine[0], theirs]}).json()["data"]
    assert one["replayed"] == 1
    assert one["results"] == [
        {"id": mine[0], "appid": developer.appids[0], "status": "replayed"},
        {"id": theirs, "appid": None, "status": "not_found"},
    ]
    assert redis.zscore(keys.rq.failed("svcgw"), theirs) is not None  # untouched
    rest = console.change("POST", "/dead-letters/replay", {"appid": developer.appids[0]}).json()["data"]
    assert rest["replayed"] == 2
    assert console.get("/dead-letters").json()["data"]["total"] == 0
    assert set(x.decode() for x in redis.lrange(keys.rq.queue("svcgw"), 0, -1)) >= set(mine)
    assert console.change("POST", "/dead-letters/replay", {}).status_code == 400
    both = console.change("POST", "/dead-letters/replay", {"ids": [mine[0]], "appid": developer.appids[0]})
    assert both.status_code == 400


# --- controlled operations -----------------------------------------------------------------------
NO_DENIALS: dict[str, list[str]] = {"denied": [], "own": [], "by_operator": []}


def test_controlled_operations(console: ConsoleClient, developer: Developer, stranger: Developer, redis: Redis) -> None:
    assert console.get("/operations").json()["data"] == NO_DENIALS
    denied = console.change("POST", "/operations/deny", {"operations": ["message/sendText", "/svc/api/login/getQr"]})
    assert denied.json()["data"] == {
        "denied": ["login/getQr", "message/sendText"],
        "own": ["login/getQr", "message/sendText"],
        "by_operator": [],
    }
    allowed = console.change("POST", "/operations/allow", {"operations": ["message/SENDTEXT"]})
    assert allowed.json()["data"]["denied"] == ["login/getQr"]
    # The console writes the account's own list, never the operator's.
    assert redis.smembers(keys.account_own_denied(developer.account)) == {b"login/getQr"}
    assert not redis.exists(keys.account_denied(developer.account))
    assert not redis.exists(keys.account_own_denied(stranger.account))
    for bad in (["nope"], ["a/b/c"], [""], [], "message/sendText", ["<script>/x"]):
        answer = console.change("POST", "/operations/deny", {"operations": bad})
        assert answer.status_code == 400 and answer.json()["code"] == -40000, bad


def operator_denies(settings: Settings, account: str, *operations: str) -> None:
    """What ``svcgw accounts deny`` does."""
    with_store(settings, lambda store: store.deny(account, operations))


def test_the_console_cannot_allow_what_the_operator_denied(
    console: ConsoleClient, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    operator_denies(settings, developer.account, "message/sendText")
    operator_denies(settings, stranger.account, "login/getQr")
    console.change("POST", "/operations/deny", {"operations": ["contact/list", "message/sendText"]})
    shown = console.get("/operations").json()["data"]
    assert shown == {
        "denied": ["contact/list", "message/sendText"],
        "own": ["contact/list", "message/sendText"],
        "by_operator": ["message/sendText"],
    }
    operator = redis.smembers(keys.account_denied(developer.account))
    own = redis.smembers(keys.account_own_denied(developer.account))
    for operations in (["message/sendText"], ["message/sendtext"], ["contact/list", "/svc/api/message/sendText"]):
        refused = console.change("POST", "/operations/allow", {"operations": operations})
        assert refused.status_code == 403, operations
        body = refused.json()
        assert body["code"] == -40320 and body["data"] is None
        assert "message/sendText" in body["message"] and "denied by the operator" in body["message"]
        # Nothing changed, not even the other operation named in the same call.
        assert redis.smembers(keys.account_denied(developer.account)) == operator
        assert redis.smembers(keys.account_own_denied(developer.account)) == own
    # Another account's operator denial is neither shown nor anything this account can touch.
    assert "login/getQr" not in console.get("/operations").json()["data"]["denied"]
    assert console.change("POST", "/operations/allow", {"operations": ["login/getQr"]}).status_code == 200
    assert redis.smembers(keys.account_denied(stranger.account)) == {b"login/getQr"}
    # The own denial of the same operation is lifted once the operator lifts theirs.
    with_store(settings, lambda store: store.allow(developer.account, ["message/sendText"]))
    allowed = console.change("POST", "/operations/allow", {"operations": ["message/sendText"]})
    assert allowed.status_code == 200 and allowed.json()["data"] == {
        "denied": ["contact/list"],
        "own": ["contact/list"],
        "by_operator": [],
    }


def test_both_lists_answer_40300_at_the_gateway(
    server: str, developer: Developer, stranger: Developer, settings: Settings, redis: Redis
) -> None:
    console = ConsoleClient(server, developer.key)
    try:
        operator_denies(settings, developer.account, "message/sendText")
        assert console.change("POST", "/operations/deny", {"operations": ["message/sendImage"]}).status_code == 200
    finally:
        console.close()
    assert redis.smembers(keys.account_denied(developer.account)) == {b"message/sendText"}
    assert redis.smembers(keys.account_own_denied(developer.account)) == {b"message/sendImage"}
    appid = developer.appids[0]
    with httpx.Client(base_url=server, timeout=10) as http:

        def call(key: str, operation: str, appid: str) -> httpx.Response:
            return http.post(f"/svc/api/{operation}", json={"appid": appid}, headers={"Svc-Key": key})

        for operation in ("message/sendText", "message/SendText", "message/sendImage", "MESSAGE/sendimage"):
            answer = call(developer.key, operation, appid)
            assert answer.status_code == 403 and answer.json()["code"] == -40300, operation
        assert call(developer.key, "message/sendVoice", appid).json()["code"] != -40300
        # Neither list of one account reaches another.
        for operation in ("message/sendText", "message/sendImage"):
            assert call(stranger.key, operation, stranger.appids[0]).json()["code"] != -40300, operation


def test_openapi_describes_the_console_api(server: str) -> None:
    document = httpx.get(server + "/openapi.json", timeout=10).json()
    paths = document["paths"]
    for path in (
        "/console/api/session",
        "/console/api/instances",
        "/console/api/instances/{appid}",
        "/console/api/callback",
        "/console/api/instances/{appid}/callback",
        "/console/api/instances/{appid}/callback/rotate-secret",
        "/console/api/instances/{appid}/log",
        "/console/api/dead-letters",
        "/console/api/dead-letters/{delivery_id}",
        "/console/api/dead-letters/replay",
        "/console/api/operations",
        "/console/api/operations/deny",
        "/console/api/operations/allow",
        "/metrics",
    ):
        assert path in paths, path
    assert "ConsoleCallback" in document["components"]["schemas"]
    assert "ConsoleSession" in document["components"]["securitySchemes"]


# --- rate limit ------------------------------------------------------------------------------


def test_changes_count_against_the_accounts_rate_limit(env: dict[str, str], developer: Developer) -> None:
    limited = Settings.from_env({**env, "SVCGW_RATE_LIMIT": "4/minute"})
    with serve(limited) as base:
        console = ConsoleClient(base, developer.key)  # signing in does not count
        try:
            # Reads do not count.
            for _ in range(6):
                assert console.get("/operations").status_code == 200
            for operation in ("message/sendText", "login/getQr", "contact/list"):
                answer = console.change("POST", "/operations/deny", {"operations": [operation]})
                assert answer.status_code == 200, answer.text
            # The gateway's window: its call is the fourth of four.
            assert gateway_call(limited, developer.account)

            refused = console.change("PUT", "/callback", {"url": "http://127.0.0.1:9/hook"})
            assert refused.status_code == 429
            assert refused.json() == {
                "code": -42900,
                "message": "rate limit exceeded; retry after the time in Retry-After",
                "data": None,
            }
            assert 1 <= int(refused.headers["retry-after"]) <= 60
            assert console.get("/callback").json()["data"]["url"] is None  # nothing saved
            # The same account's key, in a header, shares the budget; so does the gateway.
            by_key = httpx.post(
                base + "/console/api/operations/deny",
                json={"operations": ["message/sendImage"]},
                headers={"Svc-Key": developer.key},
                timeout=10,
            )
            assert by_key.status_code == 429 and "retry-after" in by_key.headers
            assert not gateway_call(limited, developer.account)
            assert console.get("/operations").json()["data"]["denied"] == [
                "contact/list",
                "login/getQr",
                "message/sendText",
            ]
            # A forged change (no CSRF token) is refused before it could spend the budget.
            assert console.change("POST", "/callback/rotate-secret", csrf=False).status_code == 403
            # Signing out always works.
            assert console.change("DELETE", "/session").status_code == 200
        finally:
            console.close()


def test_a_new_origin_drops_the_token_unless_keeping_it_is_chosen(
    console: ConsoleClient, developer: Developer, sink: Sink, redis: Redis
) -> None:
    appid = developer.appids[0]
    path = f"/instances/{appid}/callback"
    elsewhere = sink.url.replace("127.0.0.1", "localhost")
    assert elsewhere != sink.url
    console.change("PUT", path, {"url": sink.url, "bearer_token": "tok-for-the-first-host"})

    moved = console.change("PUT", path, {"url": elsewhere})
    assert moved.status_code == 200, moved.text
    assert moved.json()["data"]["callback"]["bearer"] is False
    assert not redis.hexists(keys.callback_instance(appid), "token")

    console.change("PUT", path, {"url": sink.url, "bearer_token": "tok-for-the-first-host"})
    kept = console.change("PUT", path, {"url": elsewhere, "keep_token": True})
    assert kept.json()["data"]["callback"]["bearer"] is True
    same = console.change("PUT", path, {"url": elsewhere + "?again=1"})
    assert same.json()["data"]["callback"]["bearer"] is True

    wrong = console.change("PUT", path, {"url": sink.url, "keep_token": "yes"})
    assert wrong.status_code == 400 and "keep_token" in wrong.text
