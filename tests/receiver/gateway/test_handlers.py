"""The gateway API in-process against the simulator and a real Redis; two end-to-end cases over ``svcgw serve``."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from urllib.parse import quote, unquote

import httpx
import pytest
from redis import Redis

from svcgw.callbacks.signing import verify
from svcgw.config.settings import Settings
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import with_store
from tests.support import Sink, ThreadedWorker, wait_for

from .stack import BIG, JSON_HEADERS, Stack, error, raw_post, start_stack, without_time
from .stack import sim as sim
from .stack import stack as stack

# --- pass-through ----------------------------------------------------------------


def test_device_create_registers_the_new_appid_under_the_account(stack: Stack) -> None:
    account, key = stack.account()
    appid = stack.create_device(key)

    async def owned(store: Store) -> list[str]:
        return await store.instances_of(account)

    assert stack.store(owned) == [appid]
    assert stack.sim_instance(appid)["appid"] == appid
    # The new appid now passes the ownership check.
    answer = stack.api(key, "long/check", {"appid": appid})
    assert answer.status_code == 200 and answer.json()["code"] == -1


def test_answers_are_passed_on_byte_for_byte(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    body = (
        b'{ "appid" : "' + appid.encode() + b'",  "big": 12345678901234567890123,'
        b' "n": 1e2, "s": "\\u00e9\xc3\xa9", "nested": {"roomId": 1688850000000001234} }'
    )
    through = stack.post("/svc/api/contact/listTags", body, key)
    direct = httpx.post(stack.sim + "/svc/api/contact/listTags", content=body, headers=JSON_HEADERS)
    assert through.status_code == direct.status_code == 200
    assert through.headers["content-type"] == "application/json"
    # The simulator echoes the body as it received it: the request went upstream unchanged too.
    assert without_time(through.content) == without_time(direct.content)
    assert b'"big": 12345678901234567890123' in through.content


def test_send_text_keeps_19_digit_integers_exact(stack: Stack) -> None:
    account, key = stack.account()
    appid = "we_" + os.urandom(8).hex()[:15]
    stack.sim_seed(appid)
    stack.own(account, appid)

    sent = stack.api(key, "message/sendText", {"appid": appid, "conversationId": BIG, "content": "hi"})
    assert sent.status_code == 200
    assert f'"roomId":{BIG}'.encode() in sent.content
    assert json.loads(sent.content)["data"]["roomId"] == BIG

    # The record in the send answer is byte for byte the one the simulator serves to sync.
    data = re.search(rb'"data":(\{.*\}),"detail"', sent.content)
    assert data is not None
    synced = httpx.post(stack.sim + "/svc/api/message/sync", json={"appid": appid, "limit": 10, "syncKey": 0})
    assert data.group(1) in synced.content


def test_unlisted_operation_is_forwarded(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    answer = stack.api(key, "future/brandNewThing", {"appid": appid, "x": 1})
    assert answer.status_code == 200
    assert answer.json()["data"] == {"module": "future", "action": "brandNewThing", "echo": {"appid": appid, "x": 1}}
    assert stack.sim_instance(appid)["calls"]["future/brandNewThing"] == 1


# --- authentication ------------------------------------------------------------------


def test_api_key_headers_rotation_and_revocation(stack: Stack) -> None:
    account, key = stack.account()
    appid = stack.create_device(key)
    body = {"appid": appid}

    def status(**headers: str) -> int:
        return stack.post("/svc/api/long/check", body, **headers).status_code

    assert status(Svc_Key=key) == 200
    assert status(X_Svc_Key=key) == 200
    assert status(Authorization=f"Bearer {key}") == 200
    assert status(Authorization=f"bearer {key}") == 200

    async def rotate(store: Store) -> tuple[str, str]:
        new_key, clear = await store.create_key(account)
        return new_key.id, clear

    new_id, new_key = stack.store(rotate)
    assert status(Svc_Key=new_key) == 200
    assert status(Svc_Key=key) == 200  # both keys work until one is revoked

    async def key_id_of_first(store: Store) -> str:
        ids = {k.id for k in await store.list_keys(account)} - {new_id}
        return ids.pop()

    old_id = stack.store(key_id_of_first)

    async def revoke(store: Store) -> None:
        await store.revoke_key(old_id)

    stack.store(revoke)
    assert error(stack.post("/svc/api/long/check", body, Svc_Key=key)) == (401, 401)
    assert status(Svc_Key=new_key) == 200


def test_missing_invalid_or_conflicting_keys_are_401(stack: Stack) -> None:
    _, key = stack.account()
    cases: list[dict[str, str]] = [
        {},
        {"Svc_Key": "sk_wrong"},
        {"Svc_Key": ""},
        {"Authorization": f"Basic {key}"},
        {"Svc_Key": key, "X_Svc_Key": "sk_other"},
    ]
    for headers in cases:
        answer = stack.post("/svc/api/long/check", {"appid": "x"}, **headers)
        assert error(answer) == (401, 401), headers
        assert answer.json()["message"] == "API key missing, invalid or revoked"


# --- request errors --------------------------------------------------------------------


AMBIGUOUS = [
    "/svc/api/long/check/",
    "/svc/api//long/check",
    "//svc/api/long/check",
    "/svc/api/long/./check",
    "/svc/api/long/../long/check",
    "/svc/api/long%2Fcheck/x",
    "/svc/api/long%2fcheck",
    "/svc/api/long/%2e%2E",
    "/svc/api/long/ch%2Eck",
    "/svc/api/long",
    "/svc/api/long/check/more",
    "/svc/instances/set-callback/",
    "/svc/instances//set-callback",
]


def test_ambiguous_paths_are_40004(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    for target in AMBIGUOUS:
        status, body = raw_post(stack.base, target, key, b'{"appid":"' + appid.encode() + b'"}')
        assert (status, body["code"], body["data"]) == (400, -40004, None), target
    # Checked before the key: an ambiguous path is refused whoever asks.
    assert raw_post(stack.base, "/svc/api/long/check/", "sk_wrong")[1]["code"] == -40004
    assert stack.sim_instance(appid)["calls"] == {}
    # The canonical path, and other percent-encodings, are fine.
    assert raw_post(stack.base, "/svc/api/long/check", key, b'{"appid":"' + appid.encode() + b'"}')[0] == 200
    assert raw_post(stack.base, "/svc/api/long/ch%65ck", key, b'{"appid":"' + appid.encode() + b'"}')[0] == 200


def test_body_errors_are_40001(stack: Stack) -> None:
    _, key = stack.account()
    for body in (b"", b"not json", b"[1,2]", b'"appid"', b'{"appid":"x"} trailing', b"\xff\xfe", b'{"a":NaN}'):
        assert error(stack.post("/svc/api/long/check", body, key)) == (400, -40001), body
    for document in ({}, {"appid": None}, {"appid": 7}, {"ql_appid": ["x"]}):
        assert error(stack.api(key, "long/check", document)) == (400, -40001), document


def test_text_that_is_not_strict_utf8_is_40001(stack: Stack) -> None:
    _, key = stack.account()
    for body in (
        b'{"appid":"\\ud800"}',
        b'{"appid":"we_1","x":"\\udfff"}',
        '{"appid":"we_1"}'.encode("utf-16"),
        '{"appid":"we_1"}'.encode("utf-32"),
    ):
        answer = stack.post("/svc/api/long/check", body, key)
        assert error(answer) == (400, -40001), body
        assert answer.json()["message"] == "the body is not UTF-8 JSON"


def test_instance_field_rules(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    for document in (
        {"appId": appid},
        {"app_id": appid},
        {"APPID": appid},
        {"appid": appid, "AppId": appid},
        {"qlAppid": appid},
        {"appid": appid, "ql_appid": "we_someoneelse00000"},
    ):
        assert error(stack.api(key, "long/check", document)) == (400, -40002), document
    duplicated = b'{"appid":"' + appid.encode() + b'","appid":"we_other"}'
    assert error(stack.post("/svc/api/long/check", duplicated, key)) == (400, -40002)

    # ql_appid alone, or with the same value as appid, is one field.
    for document in ({"ql_appid": appid}, {"appid": appid, "ql_appid": appid}):
        sent = {**document, "sid": 1, "commentId": 2}
        answer = stack.api(key, "friend/deleteSnsComment", sent)
        assert answer.status_code == 200, answer.text
        last = stack.client.get(stack.sim + "/_sim/calls").json()[-1]
        assert last == {"path": "/svc/api/friend/deleteSnsComment", "body": sent}


def test_foreign_and_unknown_appid_get_the_same_answer(stack: Stack) -> None:
    _, mine = stack.account()
    _, theirs = stack.account()
    their_appid = stack.create_device(theirs)
    foreign = stack.api(mine, "message/sendText", {"appid": their_appid, "conversationId": 1, "content": "x"})
    unknown = stack.api(mine, "message/sendText", {"appid": "we_doesnotexist000", "conversationId": 1, "content": "x"})
    empty = stack.api(mine, "message/sendText", {"appid": "", "conversationId": 1, "content": "x"})
    assert error(foreign) == (404, -40404)
    assert foreign.content == unknown.content == empty.content
    assert stack.sim_instance(their_appid)["calls"] == {}


def test_denied_operation_is_403(stack: Stack) -> None:
    account, key = stack.account()
    appid = stack.create_device(key)

    async def deny(store: Store) -> None:
        await store.deny(account, ["message/sendText", "instances/set-callback"])

    stack.store(deny)
    answer = stack.api(key, "message/sendText", {"appid": appid, "conversationId": 1, "content": "x"})
    assert error(answer) == (403, -40300)
    assert error(stack.api(key, "message/SENDTEXT", {"appid": appid})) == (403, -40300)
    answer = stack.post("/svc/instances/set-callback", {"appid": appid, "callbackUrl": "http://127.0.0.1:1/x"}, key)
    assert error(answer) == (403, -40300)
    assert stack.api(key, "message/sendRichText", {"appid": appid, "content": []}).status_code == 200
    assert "message/sendText" not in stack.sim_instance(appid)["calls"]


def test_the_accounts_own_denials_are_403_too(stack: Stack) -> None:
    account, key = stack.account()
    appid = stack.create_device(key)
    other, other_key = stack.account()
    other_appid = stack.create_device(other_key)

    async def deny(store: Store) -> None:
        await store.deny(account, ["message/sendText"])  # the operator's list
        await store.deny_own(account, ["message/sendRichText"])  # the account's own (console)
        await store.deny_own(other, ["message/sendText"])

    stack.store(deny)
    for operation in ("message/sendText", "message/sendRichText", "MESSAGE/SENDRICHTEXT"):
        assert error(stack.api(key, operation, {"appid": appid, "content": []})) == (403, -40300), operation
    assert stack.api(other_key, "message/sendRichText", {"appid": other_appid, "content": []}).status_code == 200
    assert stack.sim_instance(appid)["calls"] == {}


def test_callback_fields_on_other_operations_are_40403(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    for operation, extra in (
        ("message/sendText", {"callbackUrl": "http://127.0.0.1:1/x"}),
        ("long/stop", {"pushHistory": True}),
        ("device/create", {"callbackUrl": "http://127.0.0.1:1/x", "type": "iPad", "version": 0}),
        ("long/start", {"callbackURL": "http://127.0.0.1:1/x"}),
    ):
        answer = stack.api(key, operation, {"appid": appid, **extra})
        assert error(answer) == (403, -40403), operation
    assert stack.sim_instance(appid)["calls"] == {}


def test_callback_address_errors(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    own_receiver = stack.receiver_url(appid)
    cases = [
        ({"callbackUrl": "http://127.0.0.1:1/x"}, -40010),
        ({"appid": appid}, -40011),
        ({"appid": appid, "callbackUrl": "ftp://example.com/x"}, -40011),
        ({"appid": appid, "callbackUrl": 42}, -40011),
        ({"appid": appid, "callbackUrl": stack.base + "/hook"}, -40012),
        ({"appid": appid, "callbackUrl": own_receiver}, -40012),
        ({"appid": appid, "callbackUrl": "http://10.1.2.3/hook"}, -40013),
        ({"appid": appid, "callbackUrl": "http://no-such-host.invalid/hook"}, -40013),
    ]
    for path in ("/svc/api/long/start", "/svc/api/long/updateCallbackURL", "/svc/instances/set-callback"):
        for body, code in cases:
            assert error(stack.post(path, body, key)) == (400, code), (path, body)
    assert error(stack.post("/svc/api/long/start", b"[]", key)) == (400, -40001)
    assert stack.sim_instance(appid)["calls"] == {}
    assert stack.forward_address(appid) is None


# --- device quota ------------------------------------------------------------------------


def test_quota_full_is_402_and_expired_entitlement_is_403(stack: Stack) -> None:
    _, key = stack.account(devices=1)
    stack.create_device(key)
    body = {"appid": "", "type": "iPad", "version": 0}
    assert error(stack.api(key, "device/create", body)) == (402, -40402)

    _, expired = stack.account(devices=5, valid_until="2020-01-01")
    assert error(stack.api(expired, "device/create", body)) == (403, -40402)

    _, unlimited = stack.account(devices=None)
    for _ in range(3):
        stack.create_device(unlimited)


def test_concurrent_creates_never_exceed_the_quota(stack: Stack) -> None:
    account, key = stack.account(devices=3)
    stack.sim_faults(slow={"device/create": 0.3})  # every create is in flight at once
    try:
        answers: list[httpx.Response] = []
        lock = threading.Lock()

        def create() -> None:
            with httpx.Client(timeout=15, trust_env=False) as client:
                answer = client.post(
                    stack.base + "/svc/api/device/create",
                    json={"appid": "", "type": "iPad", "version": 0},
                    headers={"Svc-Key": key},
                )
            with lock:
                answers.append(answer)

        threads = [threading.Thread(target=create) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
    finally:
        stack.sim_faults(slow=None)

    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * 3 + [402] * 7
    created = {answer.json()["data"]["appid"] for answer in answers if answer.status_code == 200}

    async def owned(store: Store) -> set[str]:
        return set(await store.instances_of(account))

    assert stack.store(owned) == created and len(created) == 3


def test_failed_create_registers_nothing_and_frees_the_slot(stack: Stack, redis: Redis) -> None:
    account, key = stack.account(devices=1)
    body = {"appid": "", "type": "iPad", "version": 0}

    # The capability layer refuses: its answer is passed on, nothing is registered.
    refused = stack.api(key, "device/create", {"appid": "", "type": "", "version": 0})
    assert refused.status_code == 200 and refused.json()["code"] == -1
    assert refused.json()["message"] == "type cannot be empty"

    # The capability layer fails: -50002, nothing registered.
    stack.sim_faults(http_error={"device/create": 500})
    try:
        assert error(stack.api(key, "device/create", body)) == (502, -50002)
    finally:
        stack.sim_faults(http_error=None)
    assert redis.scard(keys.account_instances(account)) == 0
    assert redis.zcard(f"svcgw:account:{account}:reservations") == 0

    # The one slot is still free.
    stack.create_device(key)
    assert redis.scard(keys.account_instances(account)) == 1


# --- upstream failures -----------------------------------------------------------------------


@pytest.mark.slow
def test_upstream_down_is_50002(settings: Settings, server: str) -> None:
    """The ``server`` fixture's upstream is a closed port."""

    async def tenant(store: Store) -> tuple[str, str]:
        account = await store.create_account("down", devices=5)
        await store.register_instance("we_down0000000000", account.id)
        _, key = await store.create_key(account.id)
        return account.id, key

    _, key = with_store(settings, tenant)
    headers = {"Svc-Key": key}
    for operation, body in (
        ("message/sendText", {"appid": "we_down0000000000", "conversationId": 1, "content": "x"}),
        ("device/create", {"appid": "", "type": "iPad", "version": 0}),
    ):
        answer = httpx.post(f"{server}/svc/api/{operation}", json=body, headers=headers, timeout=10)
        assert error(answer) == (502, -50002)
        assert answer.json()["message"] == "service temporarily unavailable; back off and retry"
    answer = httpx.post(
        f"{server}/svc/api/long/start",
        json={"appid": "we_down0000000000", "callbackUrl": "http://127.0.0.1:1/x", "pushHistory": False},
        headers=headers,
        timeout=10,
    )
    assert error(answer) == (502, -50000)


@pytest.mark.parametrize("fault", [500, 404, "close"])
def test_unusable_upstream_answer_is_50002(stack: Stack, fault: int | str) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    stack.sim_faults(appid=appid, http_error={"long/check": fault})
    assert error(stack.api(key, "long/check", {"appid": appid})) == (502, -50002)


# --- callbacks ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_long_start_gives_upstream_the_receiver_and_events_reach_the_caller_signed(
    env: dict[str, str], sim: str, sink: Sink, worker: ThreadedWorker, redis: Redis
) -> None:
    stack = start_stack(env, sim, subprocess=True)
    try:
        _, key = stack.account()
        appid = stack.create_device(key)
        stack.login(key, appid, proxy="socks5://10.0.0.9:1080")
        assert redis.hget(keys.instance(appid), "proxy") == b"socks5://10.0.0.9:1080"

        body = {"appid": appid, "callbackUrl": sink.url, "pushHistory": False}
        answer = stack.api(key, "long/start", body)
        assert answer.status_code == 200 and answer.json()["code"] == 0, answer.text
        assert b"/svc/receiver/" not in answer.content

        instance = stack.sim_instance(appid)
        assert instance["callbackUrl"] == stack.receiver_url(appid)
        assert instance["connected"] is True
        assert stack.forward_address(appid) == sink.url
        fields = redis.hgetall(keys.instance(appid))
        assert fields[b"status"] == b"online" and fields[b"maintained"] == b"1"

        posts = wait_for(lambda: len(sink.posts()) >= 2 and sink.posts(), timeout=15, what="GapConnected + GapSucceed")
        # Two posts, two deliveries: the worker may hand them over in either order.
        assert sorted(json.loads(p.body)["event_type"] for p in posts[:2]) == ["GapConnected", "GapSucceed"]

        async def secret(store: Store) -> str:
            config = await store.get_callback(Scope(appid=appid))
            assert config.secret
            return config.secret

        signing_secret = stack.store(secret)
        for post in posts[:2]:
            assert json.loads(post.body)["appid"] == appid
            assert verify(signing_secret, post.headers["x-svc-timestamp"], post.body, post.headers["x-svc-signature"])

        # Already running: -1 "started" is passed on, and the new address is recorded all the same.
        second = Sink().start()
        try:
            again = stack.api(key, "long/start", {**body, "callbackUrl": second.url})
            assert again.status_code == 200 and again.json()["code"] == -1 and again.json()["message"] == "started"
            assert stack.forward_address(appid) == second.url
        finally:
            second.stop()
    finally:
        stack.stop()


def test_long_start_refused_or_failed_leaves_the_address_unchanged(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)  # not logged in: the simulator refuses long/start
    body = {"appid": appid, "callbackUrl": "http://127.0.0.1:1/first", "pushHistory": True}
    refused = stack.api(key, "long/start", body)
    assert refused.status_code == 200
    assert (refused.json()["code"], refused.json()["message"]) == (-1, "not logged in")
    assert stack.forward_address(appid) is None

    stack.sim_faults(appid=appid, http_error={"long/updateCallbackURL": 503})
    failed = stack.api(key, "long/updateCallbackURL", {"appid": appid, "callbackUrl": "http://127.0.0.1:1/x"})
    assert error(failed) == (502, -50000)
    assert stack.forward_address(appid) is None
    stack.sim_faults(appid=appid, http_error=None)


def test_update_callback_url_echo_shows_the_callers_address(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    url = "http://127.0.0.1:7/hook/é?x=1&y=\u00e9"
    answer = stack.api(key, "long/updateCallbackURL", {"appid": appid, "callbackUrl": url})
    assert answer.status_code == 200
    assert answer.json()["code"] == 0 and answer.json()["data"] == {"appid": appid, "callbackUrl": url}
    assert b"/svc/receiver/" not in answer.content
    assert stack.sim_instance(appid)["callbackUrl"] == stack.receiver_url(appid)
    assert stack.forward_address(appid) == url


def test_answers_holding_the_receiver_token_in_any_form_are_scrubbed(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    url = "http://127.0.0.1:7/hook"
    assert stack.api(key, "long/updateCallbackURL", {"appid": appid, "callbackUrl": url}).json()["code"] == 0
    receiver = stack.receiver_url(appid)
    token = receiver.rsplit("/", 1)[1]
    encoded = quote(receiver, safe="")
    # The simulator echoes an unlisted operation's body: the answer holds what the body held.
    body = (
        b'{"appid":"' + appid.encode() + b'","link":"https://x/?cb=' + encoded.encode() + b'",'
        b'"bare":"' + token.encode() + b'","big":1688850000000001234,"n":1e2}'
    )
    answer = stack.api(key, "future/echoThis", body)
    assert answer.status_code == 200
    assert token not in answer.text and token not in unquote(answer.text)
    echo = answer.json()["data"]["echo"]
    assert echo["link"] == "https://x/?cb=" + quote(url, safe="")
    assert echo["bare"] == "[redacted]"
    assert b'"big":1688850000000001234,"n":1e2' in answer.content
    # Every character percent-encoded: found too (the answer is re-serialized, integers still exact).
    spelled = "".join(f"%{ord(c):02x}" for c in token)
    answer = stack.api(key, "future/echoThis", {"appid": appid, "spelled": spelled, "big": 1688850000000001234})
    assert token not in unquote(answer.text) and answer.json()["data"]["echo"]["spelled"] == "[redacted]"
    assert b"1688850000000001234" in answer.content
    # Without the token, an answer is passed on byte for byte.
    plain = b'{"appid":"' + appid.encode() + b'","big":1688850000000001234,"n":1e2, "s":"%2Fsvc%2Freceiver%2F"}'
    assert plain in stack.api(key, "future/echoThis", plain).content


def test_set_callback_stores_the_address_without_calling_upstream(stack: Stack) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    url = "http://127.0.0.1:7/mine"
    answer = stack.post("/svc/instances/set-callback", {"appid": appid, "callbackUrl": url}, key)
    assert answer.status_code == 200
    document = answer.json()
    assert document["code"] == 0 and document["message"] == "ok"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", document["time"])
    assert document["data"] == {"appid": appid, "callbackUrl": url}
    assert stack.forward_address(appid) == url
    assert stack.sim_instance(appid)["calls"] == {}

    _, other = stack.account()
    assert error(stack.post("/svc/instances/set-callback", {"appid": appid, "callbackUrl": url}, other)) == (
        404,
        -40404,
    )


def _bearer(stack: Stack, appid: str, url: str | None = None) -> bool:
    """Whether the instance has a Bearer token; with ``url``, first set that address and a token."""

    async def action(store: Store) -> bool:
        if url is not None:
            await store.set_callback(Scope(appid=appid), url, bearer_token="bearer-for-the-first-host")
        return (await store.get_callback(Scope(appid=appid))).bearer

    return stack.store(action)  # type: ignore[no-any-return]


@pytest.mark.parametrize("route", ["long/start", "long/updateCallbackURL", "set-callback"])
def test_the_bearer_token_follows_the_origin_on_every_route(stack: Stack, route: str) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    stack.login(key, appid)

    def move(url: str) -> None:
        body = {"appid": appid, "callbackUrl": url}
        if route == "set-callback":
            answer = stack.post("/svc/instances/set-callback", body, key)
        else:
            answer = stack.api(key, route, body)
        assert answer.json()["code"] in (0, -1), answer.text  # -1 "started": long/start again
        assert stack.forward_address(appid) == url

    assert _bearer(stack, appid, "http://127.0.0.1:7/first")
    move("http://127.0.0.1:7/second?x=1")  # same origin: the token stays
    assert _bearer(stack, appid)
    move("http://localhost:7/second")  # another host: the token goes
    assert not _bearer(stack, appid)
    assert _bearer(stack, appid, "http://127.0.0.1:7/first")
    move("http://127.0.0.1:8/first")  # another port: the token goes
    assert not _bearer(stack, appid)


def test_stop_and_logout_update_liveness(stack: Stack, redis: Redis) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    stack.login(key, appid)
    assert stack.api(key, "long/start", {"appid": appid, "callbackUrl": "http://127.0.0.1:1/x"}).json()["code"] == 0
    assert redis.zscore(keys.probe_schedule, appid) is not None

    assert stack.api(key, "long/stop", {"appid": appid}).json()["code"] == 0
    fields = redis.hgetall(keys.instance(appid))
    assert fields[b"status"] == b"stopped" and fields[b"maintained"] == b"0"
    assert redis.zscore(keys.probe_schedule, appid) is None

    assert stack.api(key, "login/logout", {"appid": appid}).json()["code"] == 0
    assert redis.hget(keys.instance(appid), "status") == b"logged_out"


@pytest.mark.parametrize(
    ("fault", "answered"),
    [
        ({"error": {"long/stop": "long connection closed"}}, (200, -1)),  # already closed
        ({"error": {"long/stop": "-30001|something else"}}, (200, -1)),  # any other refusal
        ({"http_error": {"long/stop": 503}}, (502, -50002)),  # the layer failed
        ({"http_error": {"long/stop": "close"}}, (502, -50002)),  # the layer did not answer
    ],
)
def test_long_stop_ends_maintenance_whatever_the_layer_answers(
    stack: Stack, redis: Redis, fault: dict[str, object], answered: tuple[int, int]
) -> None:
    _, key = stack.account()
    appid = stack.create_device(key)
    stack.login(key, appid)
    assert stack.api(key, "long/start", {"appid": appid, "callbackUrl": "http://127.0.0.1:1/x"}).json()["code"] == 0
    assert redis.hget(keys.instance(appid), "maintained") == b"1"

    stack.sim_faults(appid=appid, **fault)
    try:
        answer = stack.api(key, "long/stop", {"appid": appid})
    finally:
        stack.sim_faults(appid=appid, **{name: None for name in fault})
    assert (answer.status_code, answer.json()["code"]) == answered, answer.text
    fields = redis.hgetall(keys.instance(appid))
    assert fields[b"status"] == b"stopped" and fields[b"maintained"] == b"0"
    assert redis.zscore(keys.probe_schedule, appid) is None

    # The next long/start resumes it.
    restart = stack.api(key, "long/start", {"appid": appid, "callbackUrl": "http://127.0.0.1:1/x"})
    assert restart.json()["code"] in (0, -1)  # -1 "started" if the connection stayed up
    assert redis.hget(keys.instance(appid), "maintained") == b"1"
    assert redis.zscore(keys.probe_schedule, appid) is not None


# --- rate limit ------------------------------------------------------------------------------------


def test_rate_limit_per_account_with_honest_retry_after(env: dict[str, str], sim: str) -> None:
    now = [1_800_000_000.0]  # the limiter's clock, moved by hand: no waiting on real time
    stack = start_stack(env, sim, clock=lambda: now[0], SVCGW_RATE_LIMIT="5/2second")
    try:
        _, key = stack.account()
        account_b, other_key = stack.account()

        async def second_key(store: Store) -> str:
            return (await store.create_key(account_b))[1]

        other_second_key = stack.store(second_key)
        body = {"appid": "we_nothere00000000"}
        # Calls without a valid key do not count.
        for _ in range(8):
            assert stack.api("sk_invalid", "long/check", body).status_code == 401
        # Every call with a valid key counts, whatever its outcome (here -40404).
        for _ in range(5):
            assert error(stack.api(key, "long/check", body)) == (404, -40404)
        limited = stack.api(key, "long/check", body)
        assert error(limited) == (429, -42900)
        retry_after = int(limited.headers["Retry-After"])
        assert retry_after == 2

        # Another account is unaffected; its keys share one budget.
        for _ in range(3):
            assert stack.api(other_key, "long/check", body).status_code == 404
        for _ in range(2):
            assert stack.api(other_second_key, "long/check", body).status_code == 404
        assert stack.api(other_second_key, "long/check", body).status_code == 429

        # A refused call counts too: the immediate retry is refused again.
        retry = stack.api(key, "long/check", body)
        assert retry.status_code == 429
        # Waiting as told lets the next call through, and not a moment less.
        now[0] += int(retry.headers["Retry-After"]) - 0.01
        assert stack.api(key, "long/check", body).status_code == 429
        now[0] += 0.01
        assert error(stack.api(key, "long/check", body)) == (404, -40404)
    finally:
        stack.stop()


# --- one round trip, both denied sets, last_used, the console's entry ------------------


def test_every_check_of_a_call_costs_one_redis_round_trip(env: dict[str, str], sim: str, redis_url: str) -> None:
    from tests.bench.redis_counter import CountingProxy

    host_port, db = redis_url.removeprefix("redis://").rsplit("/", 1)
    proxy = CountingProxy(int(host_port.rsplit(":", 1)[1])).start()
    stack = start_stack(env, sim, SVCGW_REDIS_URL=f"redis://127.0.0.1:{proxy.port}/{db}")
    try:
        _, key = stack.account()
        appid = stack.create_device(key)
        body = {"appid": appid}
        assert stack.api(key, "user/getProfile", body).status_code == 200  # scripts loaded, token read
        before = proxy.count()
        for _ in range(20):
            assert stack.api(key, "user/getProfile", body).status_code == 200
        refused = [stack.api(key, "user/getProfile", {"appid": "we_nobody"}) for _ in range(5)]
        assert all(error(answer) == (404, -40404) for answer in refused)
        assert proxy.count() - before == 25
    finally:
        stack.stop()
        proxy.stop()


def test_the_accounts_own_denied_set_counts_too(stack: Stack, redis: Redis) -> None:
    account, key = stack.account()
    appid = stack.create_device(key)
    redis.sadd(keys.account_own_denied(account), "Message/SendText")
    assert error(stack.api(key, "message/sendText", {"appid": appid, "content": "x"})) == (403, -40300)
    assert stack.api(key, "message/sendRichText", {"appid": appid, "content": []}).status_code == 200


def test_each_call_writes_its_keys_last_use(stack: Stack, redis: Redis) -> None:
    account, key = stack.account()
    (key_id,) = [member.decode() for member in redis.smembers(keys.account_keys(account))]
    assert redis.hget(keys.api_key(key_id), "last_used") is None
    answer = stack.api(key, "user/getProfile", {"appid": "we_nobody"})
    assert error(answer) == (404, -40404)
    assert answer.headers["x-content-type-options"] == "nosniff"
    last_used = redis.hget(keys.api_key(key_id), "last_used")
    assert last_used is not None and abs(int(last_used) - time.time()) < 60


def test_invoke_runs_every_check_after_the_key(stack: Stack, redis: Redis) -> None:
    """``Gateway.invoke``, the console's entry: the same answers as over HTTP with a key."""
    import asyncio

    from receiver.gateway import Gateway
    from receiver.services import build_services
    from svcgw.upstream import Upstream

    account, key = stack.account()
    appid = stack.create_device(key)
    _, other_key = stack.account()
    theirs = stack.create_device(other_key)
    redis.sadd(keys.account_own_denied(account), "message/sendtext")

    async def run() -> list[tuple[int, bytes]]:
        services = build_services(stack.settings)
        services.upstream = Upstream(stack.sim)
        gateway = Gateway(services)
        try:
            answers = []
            for module, action, raw in (
                ("user", "getProfile", b'{"appid":"' + appid.encode() + b'"}'),
                ("message", "sendText", b'{"appid":"' + appid.encode() + b'","content":"x"}'),
                ("user", "getProfile", b'{"appid":"' + theirs.encode() + b'"}'),
                ("user", "getProfile", b"[1]"),
                ("user", "getProfile", b'{"appId":"x"}'),
                ("user", "getProfile", b'{"appid":"' + appid.encode() + b'","callbackUrl":"http://x/"}'),
            ):
                response = await gateway.invoke(account, module, action, raw)
                answers.append((response.status_code, bytes(response.body)))
            return answers
        finally:
            await services.upstream.aclose()
            await services.redis.aclose()
            await services.text_redis.aclose()

    answers = asyncio.run(run())
    over_http = stack.api(key, "user/getProfile", {"appid": appid})
    assert answers[0][0] == 200 and without_time(answers[0][1]) == without_time(over_http.content)
    assert [(status, json.loads(raw)["code"]) for status, raw in answers[1:]] == [
        (403, -40300),
        (404, -40404),
        (400, -40001),
        (400, -40002),
        (403, -40403),
    ]


def test_only_plain_api_posts_skip_the_router() -> None:
    from receiver.gateway import direct_operation

    def scope(path: str, method: str = "POST", raw: bytes | None = None) -> dict[str, object]:
        return {"type": "http", "method": method, "path": path, "raw_path": raw or path.encode()}

    assert direct_operation(scope("/svc/api/user/getProfile")) == ("user", "getProfile")
    for refused in (
        scope("/svc/api/user/getProfile", "GET"),
        scope("/svc/api/user/getProfile/"),
        scope("/svc/api/user/./x"),
        scope("/svc/api/user/get/x"),
        scope("/svc/api/user/a/b", raw=b"/svc/api/user%2Fa/b"),
        scope("/svc/instances/set-callback"),
        {"type": "websocket", "path": "/svc/api/a/b"},
    ):
        assert direct_operation(refused) is None


def test_other_methods_on_an_api_path_still_get_the_routers_answer(stack: Stack) -> None:
    answer = stack.client.get(stack.base + "/svc/api/user/getProfile")
    assert answer.status_code == 405 and answer.headers["x-content-type-options"] == "nosniff"
