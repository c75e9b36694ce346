"""The capability-layer operations, through the endpoint and called directly over a state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simulator import capabilities, traffic
from simulator.app import create_app
from simulator.capabilities import Call, perform
from simulator.state import SimState
from tests.simulator.support import APPID_FORM, TestClient, call, seed, state
from tests.support import wait_for


def test_generic_echo_returns_the_body_as_sent(client: TestClient) -> None:
    appid = seed(client)
    raw = b'{"appid":"%s","tagId":123456789012345678901234567890,"x":1.50}' % appid.encode()
    response = client.post("/svc/api/tag/weird", content=raw, headers={"content-type": "application/json"})
    assert b'"echo":' + raw in response.content
    data = json.loads(response.content)["data"]
    assert (data["module"], data["action"]) == ("tag", "weird")
    assert data["echo"]["tagId"] == 123456789012345678901234567890


def test_device_create_rules(client: TestClient) -> None:
    assert call(client, "device/create", appid="x", version=0)["message"] == "type cannot be empty"
    assert call(client, "device/create", appid="x", type="", version=0)["message"] == "type cannot be empty"
    assert call(client, "device/create", appid="x", type="iPad", version="0")["code"] == -1
    assert call(client, "device/create", appid="x", type="iPad", version=True)["code"] == -1
    assert call(client, "device/create", appid="x", type="iPad")["code"] == -1

    first = call(client, "device/create", appid="x", type="iPad", version=0)
    second = call(client, "device/create", appid=first["data"]["appid"], type="iPad", version=0)
    assert first["code"] == second["code"] == 0
    appids = {first["data"]["appid"], second["data"]["appid"]}
    assert len(appids) == 2 and all(APPID_FORM.match(a) for a in appids)
    for appid in appids:
        assert state(client, appid)["loggedIn"] is False


def test_qr_login_then_long_connection(client: TestClient) -> None:
    appid = call(client, "device/create", appid="x", type="iPad", version=0)["data"]["appid"]
    assert call(client, "long/start", appid=appid, callbackUrl="http://127.0.0.1:9/cb")["code"] == -1
    assert call(client, "login/getQr", appid=appid)["code"] == -1

    qr = call(client, "login/getQr", appid=appid, proxy="")["data"]
    assert set(qr) == {"uuid", "imageBase64", "refreshInterval"}
    statuses = [
        call(client, "login/checkQr", appid=appid, proxy="", uuid=qr["uuid"])["data"]["status"]
        for _ in range(4)
    ]
    assert statuses == [-1, 1, 2, 2]
    refused = call(client, "login/submitQrCode", appid=appid, proxy="", uuid=qr["uuid"], code="123456")
    assert (refused["code"], refused["message"]) == (-1, "-12019 qrcode_not_need_verify")
    assert state(client, appid)["loggedIn"] is True

    started = call(client, "long/start", appid=appid, callbackUrl="http://127.0.0.1:9/cb", pushHistory=False)
    assert (started["code"], started["data"]) == (0, {})
    assert call(client, "login/getQr", appid=appid, proxy="")["message"] == "please close long client"
    assert call(client, "long/stop", appid=appid)["code"] == 0
    assert call(client, "login/getQr", appid=appid, proxy="")["code"] == 0


def test_qr_verification_code(client: TestClient) -> None:
    appid = call(client, "device/create", appid="x", type="iPad", version=0)["data"]["appid"]
    client.post("/_sim/faults", json={"appid": appid, "qr_verify": True})
    uuid = call(client, "login/getQr", appid=appid, proxy="")["data"]["uuid"]
    statuses = [
        call(client, "login/checkQr", appid=appid, proxy="", uuid=uuid)["data"]["status"] for _ in range(3)
    ]
    assert statuses == [-1, 1, 10]
    assert call(client, "login/submitQrCode", appid=appid, proxy="", uuid=uuid, code="12")["code"] == -1
    assert call(client, "login/submitQrCode", appid=appid, proxy="", uuid=uuid, code="654321")["code"] == 0
    assert call(client, "login/checkQr", appid=appid, proxy="", uuid=uuid)["data"]["status"] == 2


def test_long_start_twice_answers_started(client: TestClient) -> None:
    appid = seed(client)
    assert (
        call(client, "long/start", appid=appid, callbackUrl="http://127.0.0.1:9/a", pushHistory=True)["code"]
        == 0
    )
    again = call(client, "long/start", appid=appid, callbackUrl="http://127.0.0.1:9/b", pushHistory=True)
    assert (again["code"], again["message"]) == (-1, "started")
    snapshot = state(client, appid)
    assert snapshot["connected"] is True
    assert snapshot["callbackUrl"] == "http://127.0.0.1:9/a"
    assert snapshot["pushHistory"] is True


def test_update_callback_url_echoes_the_stored_address(client: TestClient) -> None:
    appid = seed(client)
    answer = call(client, "long/updateCallbackURL", appid=appid, callbackUrl="https://example.com/hook")
    assert answer["data"] == {"appid": appid, "callbackUrl": "https://example.com/hook"}
    assert state(client, appid)["callbackUrl"] == "https://example.com/hook"
    assert call(client, "long/updateCallbackURL", appid=appid)["code"] == -1


def test_long_check_warm_up_window() -> None:
    with TestClient(create_app(check_warmup=30.0)) as client:
        appid = seed(client)
        assert call(client, "long/check", appid=appid)["message"] == "long connection closed"
        call(client, "long/start", appid=appid, callbackUrl="http://127.0.0.1:9/cb", pushHistory=False)
        warming = call(client, "long/check", appid=appid)
        assert warming["code"] != 0 and warming["data"] is None
        # A business read works while long/check still settles.
        assert call(client, "user/getProfile", appid=appid)["code"] == 0

        assert client.post("/_sim/config", json={"check_warmup": 0.2}).json()["check_warmup"] == 0.2
        wait_for(lambda: call(client, "long/check", appid=appid)["code"] == 0)
        ready = call(client, "long/check", appid=appid)
        assert (ready["code"], ready["message"], ready["data"]) == (0, "ok", None)

        call(client, "long/stop", appid=appid)
        closed = call(client, "long/check", appid=appid)
        assert (closed["code"], closed["message"]) == (-1, "long connection closed")


def test_long_check_is_ready_at_once_without_warm_up(client: TestClient) -> None:
    appid = seed(client)
    call(client, "long/start", appid=appid, callbackUrl="http://127.0.0.1:9/cb", pushHistory=False)
    assert call(client, "long/check", appid=appid)["code"] == 0


def test_send_text_record_keeps_large_integers_digit_exact(client: TestClient) -> None:
    appid = seed(client, connected=True)
    for room in (traffic.ROOM_ID_BASE + 7, traffic.WIDE_ROOM_ID):
        response = client.post(
            "/svc/api/message/sendText", json={"appid": appid, "conversationId": room, "content": "hi"}
        )
        assert f'"roomId":{room}'.encode() in response.content
        record = json.loads(response.content)["data"]
        assert record["roomId"] == room and record["messageType"] == 1
        assert record["content"] == [{"type": 0, "text": "hi"}]
        assert record["id"] > 2**62 and len(str(record["id"])) == 19
        assert f'"id":{record["id"]}'.encode() in response.content
        assert set(record) == {
            "id", "syncKey", "messageType", "fromUserId", "toUserId", "roomId", "contentType",
            "flag", "sendTime", "appInfo", "senderName", "content",
        }  # fmt: skip


def test_send_operations(client: TestClient) -> None:
    appid = seed(client)
    peer = traffic.USER_ID_BASE + 42
    assert call(client, "message/sendText", appid=appid, conversationId=peer, content="x")["message"] == (
        "long connection closed"
    )
    call(client, "long/start", appid=appid, callbackUrl="http://127.0.0.1:9/cb", pushHistory=False)

    private = call(client, "message/sendText", appid=appid, conversationId=peer, content="x")["data"]
    assert (private["messageType"], private["toUserId"], private["contentType"]) == (0, peer, 0)

    fragments = [{"type": 0, "text": "a"}, {"type": 3, "text": "[微笑]"}]
    rich = call(client, "message/sendRichText", appid=appid, conversationId=peer, content=fragments)
    assert rich["data"]["content"] == fragments
    for bad in (1, 2, 4):
        refused = call(
            client, "message/sendRichText", appid=appid, conversationId=peer, content=[{"type": bad}]
        )
        assert (refused["code"], refused["message"]) == (-1, "unsupported rich text type")

    receipt = {"id": "f1", "name": "a.pdf", "url": "", "size": 3, "aesKey": "k", "md5": "m"}
    sent = call(client, "message/sendFile", appid=appid, conversationId=peer, content=receipt)["data"]
    assert sent["contentType"] == 15 and set(sent["content"]) == {"id", "name", "url", "size", "md5"}
    voice = call(
        client, "message/sendVoice", appid=appid, conversationId=peer, content={**receipt, "voiceTime": 3}
    )
    assert voice["data"]["contentType"] == 16 and voice["data"]["content"]["voiceTime"] == 3
    image = call(
        client, "message/sendImage", appid=appid, conversationId=peer, content={"id": "i", "size": 1}
    )
    assert image["data"]["contentType"] == 14
    video = call(client, "message/sendVideo", appid=appid, conversationId=peer, content={"id": "v"})
    assert video["data"]["contentType"] == 23 and "uploadDir" in video["data"]["content"]
    assert call(client, "message/sendGif", appid=appid, conversationId=peer, content={"id": "g"})["code"] == 0


def test_sync_pages_until_is_end(client: TestClient) -> None:
    appid = seed(client, connected=True)
    empty = call(client, "message/sync", appid=appid, limit=3, syncKey=0)["data"]
    assert empty == {"count": 0, "isEnd": True, "list": None, "syncKey": 0}
    sent = [
        call(
            client, "message/sendText", appid=appid, conversationId=traffic.USER_ID_BASE + 1, content=str(n)
        )["data"]
        for n in range(5)
    ]
    assert call(client, "message/sync", appid=appid, limit=0, syncKey=0)["code"] == -1

    pages, key = [], 0
    while True:
        page = call(client, "message/sync", appid=appid, limit=2, syncKey=key)["data"]
        pages.append(page)
        key = page["syncKey"]
        if page["isEnd"]:
            break
        assert len(pages) < 10
    assert [p["count"] for p in pages] == [2, 2, 1]
    assert [m["id"] for p in pages for m in p["list"]] == [m["id"] for m in sent]
    first = call(client, "message/sync", appid=appid, limit=2, syncKey=0)["data"]
    assert first == pages[0]


# --- called directly over a state -------------------------------------------------


def direct_call(sim: SimState, op: str, parsed: Any, raw: bytes = b"") -> Call:
    module, action = op.split("/")
    return Call(sim=sim, module=module, action=action, parsed=parsed, raw=raw, qr_verify=False, reconnect_fails=None)


def test_perform_refuses_a_body_that_is_not_an_object_and_forced_errors_win() -> None:
    sim = SimState()
    inst = sim.add_instance("we_a")
    refused = json.loads(perform(direct_call(sim, "long/check", [1]), inst, forced=None))
    assert (refused["code"], refused["message"], refused["data"]) == (-1, "request body must be a JSON object", None)
    forced = json.loads(perform(direct_call(sim, "device/create", {"type": "iPad", "version": 0}), None, forced="x"))
    assert (forced["code"], forced["message"]) == (-1, "x") and list(sim.instances) == ["we_a"]
    created = json.loads(perform(direct_call(sim, "device/create", {"type": "iPad", "version": 0}), None, None))
    assert created["code"] == 0 and created["data"]["appid"] in sim.instances


def test_operations_owe_callbacks_instead_of_posting_them() -> None:
    sim = SimState()
    inst = sim.add_instance("we_a")
    inst.logged_in = True
    start = direct_call(sim, "long/start", {"callbackUrl": "http://127.0.0.1:9/cb"})
    assert capabilities.long_start(start, inst) == {}
    assert [(owner, url, len(posts)) for owner, url, posts in start.later] == [(inst, "http://127.0.0.1:9/cb", 2)]
    stop = direct_call(sim, "long/stop", {})
    assert capabilities.long_stop(stop, inst) == {} and len(stop.later) == 1
    assert capabilities.long_stop(stop, inst) == {} and len(stop.later) == 1


def test_long_check_after_a_silent_drop_says_zero_for_the_grace_only() -> None:
    sim = SimState(check_warmup=0)
    inst = sim.add_instance("we_a")
    inst.logged_in, inst.connected = True, True
    check = direct_call(sim, "long/check", {})
    inst.drop(None)
    assert capabilities.long_check(check, inst) is None
    inst.dropped_at = None
    inst.drop(0.0)
    with pytest.raises(capabilities.Fail, match="long connection closed"):
        capabilities.long_check(check, inst)
