"""Further destinations through the console's JSON API: the app served in-process, a real Redis, a real sink."""

from __future__ import annotations

import re

import httpx
import orjson
from redis import Redis

from svcgw.callbacks.destinationrules import MAX_DESTINATIONS
from svcgw.callbacks.signing import verify
from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import Tenant
from tests.receiver.console.conftest import ConsoleClient, Developer
from tests.receiver.console.test_api import nothing_queued_or_logged
from tests.receiver.console.test_pages import signed_in
from tests.support import Sink
from tests.svcgw.delivery.fanout import fan_out, kill_among
from tests.svcgw.delivery.test_deadletters import ingest

TOKEN = "tok_destination_" + "s3cr3t" * 4
NOT_FOUND = {"code": -40404, "message": "no such destination", "data": None}
NOT_THE_CALLERS = {"code": -40404, "message": "appid does not exist or is not the caller's", "data": None}


def add(console: ConsoleClient, body: dict[str, object], appid: str | None = None) -> httpx.Response:
    path = f"/instances/{appid}/destinations" if appid else "/destinations"
    return console.change("POST", path, body)


def test_saving_one_sends_a_test_signed_with_its_own_secret_and_token(
    console: ConsoleClient, developer: Developer, sink: Sink, redis: Redis, settings: Settings
) -> None:
    # The primary address first: the destination's secret is not its secret.
    primary = console.change("PUT", "/callback", {"url": sink.url}).json()["data"]["callback"]
    answer = add(
        console,
        {"url": sink.url + "/crm", "label": "CRM", "event_types": ["Msg"], "rate": 20, "bearer_token": TOKEN},
    )
    assert answer.status_code == 201, answer.text
    assert TOKEN not in answer.text
    data = answer.json()["data"]
    dest, test = data["destination"], data["test"]
    assert re.fullmatch(r"dst_[0-9a-f]{16}", dest["id"])
    assert {k: dest[k] for k in ("scope", "account", "appid", "label", "url", "event_types", "rate", "enabled")} == {
        "scope": "account",
        "account": developer.account,
        "appid": None,
        "label": "CRM",
        "url": sink.url + "/crm",
        "event_types": ["Msg"],
        "rate": 20.0,
        "enabled": True,
    }
    assert dest["bearer"] is True and dest["failing_since"] is None and "token" not in dest
    assert dest["secret"].startswith("whsec_") and dest["secret"] != primary["secret"]
    assert test["ok"] is True and test["status"] == 200 and test["error"] is None

    posts = [p for p in sink.posts() if p.path == "/hook/crm"]
    assert len(posts) == 1
    post = posts[0]
    assert verify(dest["secret"], post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])
    assert not verify(primary["secret"], post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])
    assert post.headers["authorization"] == f"Bearer {TOKEN}"
    body = orjson.loads(post.body)
    assert list(body) == ["event_type", "test", "events"]  # an account's: no appid, as the account default's
    assert body["event_type"] == "SvcCallbackTest" and body["events"][0]["id"] == test["event_id"]
    nothing_queued_or_logged(redis, developer.appids)

    # An instance's: the body names the instance.
    appid = developer.appids[0]
    own = add(console, {"url": sink.url + "/own"}, appid)
    assert own.status_code == 201, own.text
    assert own.json()["data"]["destination"]["scope"] == "instance"
    assert own.json()["data"]["destination"]["appid"] == appid
    (own_post,) = [p for p in sink.posts() if p.path == "/hook/own"]
    assert orjson.loads(own_post.body)["appid"] == appid and "authorization" not in own_post.headers

    # At rest: the secret and the token are sealed.
    stored = redis.hgetall(keys.destination(dest["id"]))
    vault = TokenVault.from_settings(settings)
    assert TOKEN.encode() not in b"".join(stored.values()) and dest["secret"].encode() not in b"".join(stored.values())
    assert vault.open(stored[b"token"]) == TOKEN and vault.open(stored[b"secret"]) == dest["secret"]


def test_list_show_update_disable_rotate_remove(console: ConsoleClient, developer: Developer, sink: Sink) -> None:
    appid = developer.appids[0]
    first = add(console, {"url": sink.url + "/a", "bearer_token": TOKEN}).json()["data"]["destination"]
    second = add(console, {"url": sink.url + "/b", "event_types": ["InstanceOffline", "InstanceRecovered"]})
    second_id = second.json()["data"]["destination"]["id"]
    own = add(console, {"url": sink.url + "/c", "enabled": False}, appid).json()["data"]["destination"]
    assert own["enabled"] is False

    listed = console.get("/destinations")
    assert listed.status_code == 200 and TOKEN not in listed.text
    rows = listed.json()["data"]["destinations"]
    assert [r["id"] for r in rows] == [first["id"], second_id]
    assert all("secret" not in r for r in rows) and rows[0]["bearer"] is True
    instance = console.get(f"/instances/{appid}/destinations").json()["data"]
    assert [r["id"] for r in instance["destinations"]] == [own["id"]]
    assert [r["id"] for r in instance["account_destinations"]] == [first["id"], second_id]

    shown = console.get(f"/destinations/{first['id']}")
    assert shown.status_code == 200 and shown.json()["data"]["secret"] == first["secret"] and TOKEN not in shown.text

    # Filters and the rate change, and send no test; the token stays (same origin).
    before = len(sink.posts())
    changed = console.change("PATCH", f"/destinations/{first['id']}", {"event_types": ["Msg"], "rate": 0.5})
    assert changed.status_code == 200, changed.text
    data = changed.json()["data"]
    assert data["test"] is None and data["destination"]["event_types"] == ["Msg"] and data["destination"]["rate"] == 0.5
    assert data["destination"]["bearer"] is True and len(sink.posts()) == before
    # A new address sends a test; on the same origin the token goes with it.
    moved = console.change("PATCH", f"/destinations/{first['id']}", {"url": sink.url + "/moved"}).json()["data"]
    assert moved["test"]["ok"] is True and moved["destination"]["bearer"] is True
    assert sink.posts()[-1].path == "/hook/moved" and sink.posts()[-1].headers["authorization"] == f"Bearer {TOKEN}"
    # null removes the limit, [] takes every type.
    cleared = console.change("PATCH", f"/destinations/{first['id']}", {"rate": None, "event_types": []})
    assert cleared.json()["data"]["destination"]["rate"] is None
    assert cleared.json()["data"]["destination"]["event_types"] == []

    disabled = console.change("PATCH", f"/destinations/{first['id']}", {"enabled": False}).json()["data"]
    assert disabled["destination"]["enabled"] is False and disabled["test"] is None
    enabled = console.change("PATCH", f"/destinations/{first['id']}", {"enabled": True}).json()["data"]
    assert enabled["destination"]["enabled"] is True and enabled["test"]["ok"] is True
    no_bearer = console.change("PATCH", f"/destinations/{first['id']}", {"bearer": False}).json()["data"]
    assert no_bearer["destination"]["bearer"] is False and "authorization" not in sink.posts()[-1].headers

    rotated = console.change("POST", f"/destinations/{first['id']}/rotate-secret")
    assert rotated.status_code == 200 and rotated.json()["data"]["secret"] != first["secret"]
    tested = console.change("POST", f"/destinations/{first['id']}/test")
    assert tested.status_code == 200 and tested.json()["data"]["ok"] is True
    last = sink.posts()[-1]
    new_secret = rotated.json()["data"]["secret"]
    assert verify(new_secret, last.headers["x-svc-timestamp"], last.body, last.headers["x-svc-signature"])

    removed = console.change("DELETE", f"/destinations/{first['id']}")
    assert removed.status_code == 200 and removed.json()["data"]["id"] == first["id"]
    assert console.get(f"/destinations/{first['id']}").json() == NOT_FOUND
    assert [r["id"] for r in console.get("/destinations").json()["data"]["destinations"]] == [second_id]


def test_the_address_rules_and_the_values_are_checked_at_save_and_nothing_is_saved(
    console: ConsoleClient, developer: Developer, sink: Sink, redis: Redis
) -> None:
    for url, code in {
        "ftp://example.com/hook": -40011,
        "http://user:pw@example.com/hook": -40011,
        "http://127.0.0.1:8080/hook": -40012,  # SVCGW_PUBLIC_URL's host and port
        "http://10.1.2.3/hook": -40013,
        "http://[fe80::1]/hook": -40013,
    }.items():
        refused = add(console, {"url": url})
        assert refused.status_code == 400 and refused.json()["code"] == code, (url, refused.text)
    for body, status, code, said in (
        ({"url": sink.url, "event_types": ["msg"]}, 400, -40020, "spelled 'Msg'"),
        ({"url": sink.url, "event_types": ["SvcCallbackTest"]}, 400, -40020, "only as a test"),
        ({"url": sink.url, "event_types": [f"T{i}" for i in range(21)]}, 400, -40020, "at most 20"),
        ({"url": sink.url, "rate": 0}, 400, -40021, "more than 0"),
        ({"url": sink.url, "rate": 5000}, 400, -40021, "at most 1000"),
        ({"url": sink.url, "rate": "fast"}, 400, -40000, "rate must be a number or null"),
        ({"url": sink.url, "label": "x" * 101}, 400, -40000, "label is longer than 100"),
        ({"url": sink.url, "enabled": "yes"}, 400, -40000, "enabled must be true or false"),
        ({}, 400, -40000, "url"),
    ):
        refused = add(console, body)
        assert (refused.status_code, refused.json()["code"]) == (status, code), (body, refused.text)
        assert said in refused.json()["message"], refused.json()
    assert not redis.exists(keys.destinations_account(developer.account))
    assert sink.posts() == []

    saved = add(console, {"url": sink.url}).json()["data"]["destination"]
    before = redis.hgetall(keys.destination(saved["id"]))
    changes: tuple[tuple[dict[str, object], int], ...] = (
        ({"url": "http://10.0.0.1/x"}, -40013),
        ({"rate": -1}, -40021),
        ({"event_types": ["a b"]}, -40020),
    )
    for change, code in changes:
        refused = console.change("PATCH", f"/destinations/{saved['id']}", change)
        assert refused.status_code == 400 and refused.json()["code"] == code, (change, refused.text)
    assert redis.hgetall(keys.destination(saved["id"])) == before


def test_a_scope_holds_at_most_ten(console: ConsoleClient, developer: Developer, sink: Sink) -> None:
    appid = developer.appids[0]
    for _ in range(MAX_DESTINATIONS):
        assert add(console, {"url": sink.url}, appid).status_code == 201
    full = add(console, {"url": sink.url}, appid)
    assert full.status_code == 409 and full.json()["code"] == -40920 and "remove one first" in full.json()["message"]
    assert len(console.get(f"/instances/{appid}/destinations").json()["data"]["destinations"]) == MAX_DESTINATIONS
    # The account and the other instance have bounds of their own.
    assert add(console, {"url": sink.url}).status_code == 201
    assert add(console, {"url": sink.url}, developer.appids[1]).status_code == 201


def test_another_accounts_destinations_and_instances_answer_404_like_unknown_ones(
    console: ConsoleClient, server: str, stranger: Developer, sink: Sink, redis: Redis
) -> None:
    theirs = ConsoleClient(server, stranger.key)
    try:
        account_one = add(theirs, {"url": sink.url + "/theirs", "bearer_token": TOKEN}).json()["data"]["destination"]
        instance_one = add(theirs, {"url": sink.url + "/theirs"}, stranger.appids[0]).json()["data"]["destination"]
    finally:
        theirs.close()
    posts = len(sink.posts())
    before = {d["id"]: redis.hgetall(keys.destination(d["id"])) for d in (account_one, instance_one)}
    for destination_id in (account_one["id"], instance_one["id"], "dst_0000000000000000", "not-an-id"):
        for method, path, body in (
            ("GET", f"/destinations/{destination_id}", None),
            ("PATCH", f"/destinations/{destination_id}", {"enabled": False}),
            ("PATCH", f"/destinations/{destination_id}", {"url": sink.url + "/mine"}),
            ("DELETE", f"/destinations/{destination_id}", None),
            ("POST", f"/destinations/{destination_id}/rotate-secret", None),
            ("POST", f"/destinations/{destination_id}/test", None),
            ("GET", f"/destinations/{destination_id}/deliveries", None),
        ):
            answer = console.change(method, path, body) if method != "GET" else console.get(path)
            assert answer.status_code == 404 and answer.json() == NOT_FOUND, (method, path, answer.text)
    for appid in (stranger.appids[0], "we_unknown0000000"):
        for method, path, body in (
            ("GET", f"/instances/{appid}/destinations", None),
            ("POST", f"/instances/{appid}/destinations", {"url": sink.url}),
        ):
            answer = console.change(method, path, body) if method != "GET" else console.get(path)
            assert answer.status_code == 404 and answer.json() == NOT_THE_CALLERS, (method, path, answer.text)
    # Theirs are not in the lists, unchanged, and nothing was sent.
    assert console.get("/destinations").json()["data"]["destinations"] == []
    assert {d: redis.hgetall(keys.destination(d)) for d in before} == before
    assert len(sink.posts()) == posts


def test_changes_need_the_csrf_token(console: ConsoleClient, developer: Developer, sink: Sink, redis: Redis) -> None:
    saved = add(console, {"url": sink.url}).json()["data"]["destination"]
    stored = redis.hgetall(keys.destination(saved["id"]))
    posts = len(sink.posts())
    for method, path, body in (
        ("POST", "/destinations", {"url": sink.url}),
        ("POST", f"/instances/{developer.appids[0]}/destinations", {"url": sink.url}),
        ("PATCH", f"/destinations/{saved['id']}", {"enabled": False}),
        ("DELETE", f"/destinations/{saved['id']}", None),
        ("POST", f"/destinations/{saved['id']}/rotate-secret", None),
        ("POST", f"/destinations/{saved['id']}/test", None),
    ):
        missing = console.change(method, path, body, csrf=False)
        assert missing.status_code == 403 and missing.json()["code"] == -40310, (method, path)
    assert redis.hgetall(keys.destination(saved["id"])) == stored
    assert len(sink.posts()) == posts
    assert not redis.exists(keys.destinations_instance(developer.appids[0]))


def test_the_test_fails_and_the_destination_stays_saved(console: ConsoleClient, sink: Sink) -> None:
    sink.set(status=500)
    failed = add(console, {"url": sink.url})
    assert failed.status_code == 201
    test = failed.json()["data"]["test"]
    assert test["ok"] is False and test["status"] == 500 and "500" in test["error"]
    closed = add(console, {"url": "http://127.0.0.1:9/nothing-listens"}).json()["data"]
    assert closed["test"]["ok"] is False and closed["test"]["status"] is None and closed["test"]["error"]
    assert len(console.get("/destinations").json()["data"]["destinations"]) == 2
    assert len(sink.posts()) == 1  # not retried


def test_openapi_describes_the_destination_operations(server: str) -> None:
    doc = httpx.get(server + "/openapi.json", timeout=10).json()
    paths = doc["paths"]
    assert set(paths["/console/api/destinations"]) == {"get", "post"}
    assert set(paths["/console/api/instances/{appid}/destinations"]) == {"get", "post"}
    assert set(paths["/console/api/destinations/{destination_id}"]) == {"get", "patch", "delete"}
    assert "post" in paths["/console/api/destinations/{destination_id}/rotate-secret"]
    assert "post" in paths["/console/api/destinations/{destination_id}/test"]
    add_op = paths["/console/api/destinations"]["post"]
    assert {"201", "400", "403", "409", "415"} <= set(add_op["responses"])
    text = orjson.dumps(doc).decode()
    for code in ("-40020", "-40021", "-40920", "-40011", "-40012", "-40013"):
        assert code in text
    schema = doc["components"]["schemas"]["ConsoleDestination"]
    assert "token" not in schema["properties"] and "bearer" in schema["properties"]
    deliveries = paths["/console/api/destinations/{destination_id}/deliveries"]["get"]
    assert {p["name"] for p in deliveries["parameters"]} == {"destination_id", "limit", "before"}
    assert {"200", "400", "404"} <= set(deliveries["responses"])
    assert "destination" in doc["components"]["schemas"]["ConsoleDelivery"]["properties"]
    for listed in ("/console/api/instances/{appid}/deliveries", "/console/api/dead-letters"):
        assert "destination" in {p["name"] for p in paths[listed]["get"]["parameters"]}


def test_a_destinations_deliveries_newest_first_paged_with_states_and_attempts(
    console: ConsoleClient, developer: Developer, sink: Sink, settings: Settings
) -> None:
    appid = developer.appids[0]
    tenant = Tenant(developer.account, appid, developer.receiver_tokens[appid])
    crm = add(console, {"url": sink.url + "/crm"}).json()["data"]["destination"]["id"]
    own = add(console, {"url": sink.url + "/own"}, appid).json()["data"]["destination"]["id"]

    def post(event_id: str) -> str:
        return ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"' + event_id.encode() + b'"}]}')

    (first,) = fan_out(settings, post("e1"), [crm])
    second, to_own = fan_out(settings, post("e2"), [crm, own])
    (third,) = fan_out(settings, post("e3"), [crm])
    kill_among(settings, second, appid, 7)

    answer = console.get(f"/destinations/{crm}/deliveries")
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    page = answer.json()["data"]
    assert [(d["id"], d["destination"], d["state"]) for d in page["deliveries"]] == [
        (third, crm, "pending"),
        (second, crm, "dead"),
        (first, crm, "pending"),
    ]
    assert page["next_before"] is None
    dead = page["deliveries"][1]
    assert dead["appid"] == appid and dead["event_ids"] == ["e2"] and dead["attempts"][0]["status"] == 500
    assert console.get(f"/deliveries/{second}").json()["data"] == dead

    one = console.get(f"/destinations/{crm}/deliveries?limit=2").json()["data"]
    assert [d["id"] for d in one["deliveries"]] == [third, second] and one["next_before"]
    rest = console.get(f"/destinations/{crm}/deliveries?limit=2&before={one['next_before']}").json()["data"]
    assert [d["id"] for d in rest["deliveries"]] == [first] and rest["next_before"] is None
    assert [d["id"] for d in console.get(f"/destinations/{own}/deliveries").json()["data"]["deliveries"]] == [to_own]
    for bad in ("limit=0", "limit=201", "before=garbage"):
        refused = console.get(f"/destinations/{crm}/deliveries?{bad}")
        assert refused.status_code == 400 and refused.json()["code"] == -40000, bad

    # Its dead letters, and the instance's list, name the destination too.
    letters = console.get(f"/dead-letters?destination={crm}").json()["data"]
    assert [(d["id"], d["destination"]) for d in letters["dead_letters"]] == [(second, crm)] and letters["total"] == 1
    assert console.get("/dead-letters?destination=primary").json()["data"]["total"] == 0
    assert console.get("/dead-letters?destination=nowhere").json()["code"] == -40000
    listed = console.get(f"/instances/{appid}/deliveries").json()["data"]["deliveries"]
    assert [(d["id"], d["destination"]) for d in listed][:3] == [
        (listed[0]["id"], None),
        (third, crm),
        (listed[2]["id"], None),
    ]
    only = console.get(f"/instances/{appid}/deliveries?destination={own}").json()["data"]["deliveries"]
    assert [d["id"] for d in only] == [to_own]
    assert all(
        d["destination"] is None
        for d in console.get(f"/instances/{appid}/deliveries?destination=primary").json()["data"]["deliveries"]
    )


BAD_TOKENS = ["tok\r\nX-Injected: 1", "tok\x00en", "tok\nen"]


def test_a_token_with_control_characters_is_refused_at_save_through_every_console_route(
    server: str, console: ConsoleClient, developer: Developer, sink: Sink, redis: Redis
) -> None:
    appid = developer.appids[0]
    kept = add(console, {"url": sink.url + "/kept", "bearer_token": TOKEN}).json()["data"]["destination"]
    sealed = redis.hget(keys.destination(kept["id"]), "token")
    primary = dict(redis.hgetall(keys.callback_instance(appid)))
    posts = len(sink.posts())
    for token in BAD_TOKENS:
        own = {"url": sink.url, "bearer_token": token}
        answers = {
            "add": add(console, {"url": sink.url + "/new", "bearer_token": token}),
            "add to an instance": add(console, {"url": sink.url + "/new", "bearer_token": token}, appid),
            "patch": console.change("PATCH", f"/destinations/{kept['id']}", {"bearer_token": token}),
            "put callback": console.change("PUT", f"/instances/{appid}/callback", own),
            "put account callback": console.change("PUT", "/callback", own),
        }
        for route, answer in answers.items():
            assert answer.status_code == 400, (route, answer.text)
            assert answer.json()["code"] == -40022 and "control characters" in answer.json()["message"], route
            assert token not in answer.text, route
    # The pages' forms: the primary address's and a new destination's.
    http, csrf = signed_in(server, developer.key)
    for path, form in (
        (f"/console/instances/{appid}/callback", {"url": sink.url, "bearer": "on", "bearer_token": BAD_TOKENS[0]}),
        ("/console/settings/callback", {"url": sink.url, "bearer": "on", "bearer_token": BAD_TOKENS[1]}),
        ("/console/destinations", {"url": sink.url + "/form", "bearer_token": BAD_TOKENS[2]}),
    ):
        answer = http.post(path, data={**form, "csrf_token": csrf})
        assert answer.status_code == 400 and "control characters" in answer.text, (path, answer.status_code)
    http.close()
    # Nothing saved, nothing sent: the destinations, the primary address and its token as they were.
    assert [d["id"] for d in console.get("/destinations").json()["data"]["destinations"]] == [kept["id"]]
    assert not redis.exists(keys.destinations_instance(appid))
    assert redis.hget(keys.destination(kept["id"]), "token") == sealed
    assert dict(redis.hgetall(keys.callback_instance(appid))) == primary
    assert len(sink.posts()) == posts
