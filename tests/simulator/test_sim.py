from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.exceptions import StarletteDeprecationWarning

from simulator import traffic
from simulator.app import create_app
from tests.support import Sink, wait_for

with warnings.catch_warnings():
    # The pinned dependencies carry httpx, which starlette's test client still supports but flags.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

TIME_FORMAT = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")
APPID_FORM = re.compile(r"^we_[A-Za-z0-9]{15}$")


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(check_warmup=0)) as test_client:
        yield test_client


def call(client: TestClient | httpx.Client, path: str, **body: Any) -> dict[str, Any]:
    response = client.post(f"/svc/api/{path}", json=body)
    assert response.status_code == 200
    result: dict[str, Any] = json.loads(response.content)
    return result


def seed(client: TestClient | httpx.Client, **body: Any) -> str:
    response = client.post("/_sim/instances", json=body)
    assert response.status_code == 201
    appid: str = response.json()["appid"]
    return appid


def state(client: TestClient | httpx.Client, appid: str) -> dict[str, Any]:
    result: dict[str, Any] = client.get(f"/_sim/instances/{appid}").json()
    return result


# --- real servers on loopback -------------------------------------------------


def bodies(sink: Sink) -> list[bytes]:
    return [post.body for post in sink.posts()]


def envelopes(sink: Sink) -> list[dict[str, Any]]:
    return [json.loads(body) for body in bodies(sink)]


def event_types(sink: Sink) -> list[str]:
    return [envelope["event_type"] for envelope in envelopes(sink)]


@pytest.fixture
def live_sim() -> Iterator[httpx.Client]:
    """The simulator under a real uvicorn server; yields a client bound to it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(check_warmup=0), log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive())
        assert server.started
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=5.0) as http:
            yield http
    finally:
        server.should_exit = True
        thread.join(10.0)
        sock.close()


# --- answers ------------------------------------------------------------------


def test_envelope_has_fields_in_order_and_server_time(client: TestClient) -> None:
    appid = seed(client)
    response = client.post("/svc/api/contact/list", json={"appid": appid})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    answer = json.loads(response.content)
    assert list(answer) == ["code", "message", "time", "data", "detail"]
    assert (answer["code"], answer["message"], answer["detail"]) == (0, "ok", "")
    assert TIME_FORMAT.match(answer["time"])
    assert abs(time.mktime(time.strptime(answer["time"], "%Y-%m-%d %H:%M:%S")) - time.time()) < 5


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


def test_unknown_appid_is_refused(client: TestClient) -> None:
    for path in ("long/check", "message/sendText", "contact/list", "user/getProfile"):
        answer = call(client, path, appid="we_000000000000000")
        assert (answer["code"], answer["message"], answer["data"]) == (-1, "instance not found", None)
    assert call(client, "long/check")["message"] == "instance not found"
    assert client.get("/_sim/instances/we_000000000000000").status_code == 404


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

        assert client.post("/_sim/config", json={"check_warmup": 0.2}).json() == {"check_warmup": 0.2}
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


# --- messages -----------------------------------------------------------------


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


# --- faults and control -------------------------------------------------------


def test_forced_error_per_operation_and_global(client: TestClient) -> None:
    a, b = seed(client, connected=True), seed(client, connected=True)
    client.post("/_sim/faults", json={"appid": a, "error": {"user/getProfile": "-1|forced"}})
    assert call(client, "user/getProfile", appid=a)["message"] == "-1|forced"
    assert call(client, "user/getProfile", appid=b)["code"] == 0
    assert call(client, "contact/list", appid=a)["code"] == 0

    client.post("/_sim/faults", json={"error": "down"})
    assert call(client, "contact/list", appid=b)["message"] == "down"
    assert call(client, "user/getProfile", appid=a)["message"] == "-1|forced"
    shown = client.get("/_sim/faults").json()
    assert shown["global"]["error"] == {"*": "down"} and a in shown["instances"]

    assert client.delete("/_sim/faults").status_code == 200
    assert call(client, "user/getProfile", appid=a)["code"] == 0
    assert client.post("/_sim/faults", json={"http_error": 200}).status_code == 400


def test_slow_and_http_error(client: TestClient) -> None:
    appid = seed(client, connected=True)
    client.post("/_sim/faults", json={"appid": appid, "slow": {"long/check": 0.3}})
    started = time.monotonic()
    assert call(client, "long/check", appid=appid)["code"] == 0
    assert time.monotonic() - started >= 0.3

    client.post("/_sim/faults", json={"appid": appid, "slow": None, "http_error": 500})
    assert client.post("/svc/api/user/getProfile", json={"appid": appid}).status_code == 500
    client.post("/_sim/faults", json={"appid": appid, "http_error": None})
    assert call(client, "user/getProfile", appid=appid)["code"] == 0


def test_silent_drop_and_reconnect(client: TestClient) -> None:
    appid = seed(client, connected=True, callbackUrl="http://127.0.0.1:9/cb")
    client.post("/_sim/faults", json={"appid": appid, "drop": True})
    assert call(client, "long/check", appid=appid)["code"] == 0
    assert call(client, "user/getProfile", appid=appid)["message"] == "long connection closed"
    assert state(client, appid)["dropped"] is True

    client.post("/_sim/faults", json={"appid": appid, "reconnect_fails": True})
    assert call(client, "login/reconnect", appid=appid, proxy="socks5://p:1")["code"] == 0
    assert call(client, "user/getProfile", appid=appid)["code"] == -1
    client.post("/_sim/faults", json={"appid": appid, "reconnect_fails": "error"})
    assert call(client, "login/reconnect", appid=appid, proxy="socks5://p:1")["code"] == -1

    client.post("/_sim/faults", json={"appid": appid, "reconnect_fails": False})
    assert call(client, "login/reconnect", appid=appid, proxy="socks5://p:1")["code"] == 0
    assert call(client, "user/getProfile", appid=appid)["code"] == 0
    snapshot = state(client, appid)
    assert snapshot["proxy"] == "socks5://p:1"
    assert snapshot["calls"]["login/reconnect"] == 3 and snapshot["calls"]["user/getProfile"] == 3


def test_drop_with_grace_and_logout(client: TestClient) -> None:
    appid = seed(client, connected=True)
    client.post("/_sim/faults", json={"appid": appid, "drop": 0})
    assert call(client, "long/check", appid=appid)["message"] == "long connection closed"
    call(client, "login/logout", appid=appid)
    assert state(client, appid)["loggedIn"] is False
    assert call(client, "login/reconnect", appid=appid, proxy="")["code"] == -1


def test_call_log(client: TestClient) -> None:
    appid = seed(client)
    call(client, "contact/list", appid=appid, big=traffic.WIDE_ROOM_ID)
    log = client.get("/_sim/calls")
    assert log.json() == [
        {"path": "/svc/api/contact/list", "body": {"appid": appid, "big": traffic.WIDE_ROOM_ID}}
    ]
    assert str(traffic.WIDE_ROOM_ID).encode() in log.content
    assert client.delete("/_sim/calls").json() == {"cleared": 1}
    assert client.get("/_sim/calls").json() == []


# --- callbacks under a real server ----------------------------------------------


def test_start_and_stop_post_gap_events(live_sim: httpx.Client, sink: Sink) -> None:
    appid = seed(live_sim)
    call(live_sim, "long/start", appid=appid, callbackUrl=sink.url, pushHistory=False)
    wait_for(lambda: len(sink.posts()) >= 2)
    assert event_types(sink) == ["GapConnected", "GapSucceed"]
    assert all(e["appid"] == appid for e in envelopes(sink))

    call(live_sim, "long/stop", appid=appid)
    wait_for(lambda: len(sink.posts()) >= 3)
    closed = envelopes(sink)[2]
    assert closed["event_type"] == "GapClosed"
    assert closed["events"] == [{"code": 0, "message": traffic.GAP_CLOSED_MESSAGES[0]}]
    assert call(live_sim, "user/getProfile", appid=appid)["message"] == "long connection closed"


def test_injected_gap_closed_and_reconnect(live_sim: httpx.Client, sink: Sink) -> None:
    kept = seed(live_sim, connected=True, callbackUrl=sink.url)
    ended = seed(live_sim, connected=True, callbackUrl=sink.url)
    live_sim.post("/_sim/faults", json={"appid": kept, "gap_closed": -11001})
    live_sim.post(
        "/_sim/faults", json={"appid": ended, "gap_closed": {"code": -11002, "message": "elsewhere"}}
    )
    wait_for(lambda: len(sink.posts()) >= 2)
    closed = {e["appid"]: e["events"][0] for e in envelopes(sink)}
    assert closed == {kept: {"code": -11001, "message": traffic.GAP_CLOSED_MESSAGES[-11001]},
                      ended: {"code": -11002, "message": "elsewhere"}}  # fmt: skip
    assert state(live_sim, ended)["loggedIn"] is False
    assert call(live_sim, "login/reconnect", appid=ended, proxy="")["code"] == -1

    assert call(live_sim, "login/reconnect", appid=kept, proxy="")["code"] == 0
    wait_for(lambda: len(sink.posts()) >= 4)
    assert event_types(sink)[2:] == ["GapConnected", "GapSucceed"]


def test_drop_posts_nothing(live_sim: httpx.Client, sink: Sink) -> None:
    appid = seed(live_sim)
    call(live_sim, "long/start", appid=appid, callbackUrl=sink.url, pushHistory=False)
    live_sim.post("/_sim/faults", json={"drop": True})
    assert call(live_sim, "user/getProfile", appid=appid)["code"] == -1
    # The stop is posted after the drop; the sink sees it right behind the start's two events.
    call(live_sim, "long/stop", appid=appid)
    wait_for(lambda: len(sink.posts()) >= 3)
    assert event_types(sink) == ["GapConnected", "GapSucceed", "GapClosed"]


def test_http_error_close_drops_the_connection(live_sim: httpx.Client) -> None:
    appid = seed(live_sim)
    live_sim.post("/_sim/faults", json={"http_error": {"long/check": "close"}})
    with pytest.raises(httpx.RemoteProtocolError):
        live_sim.post("/svc/api/long/check", json={"appid": appid})
    assert call(live_sim, "contact/list", appid=appid)["code"] == 0


def test_traffic_posts_events_with_duplicates(live_sim: httpx.Client, sink: Sink) -> None:
    appid = seed(live_sim, connected=True, callbackUrl=sink.url)
    request = {"appid": appid, "rate": 0, "count": 40, "duplicates": 0.25, "seed": 7}
    started = live_sim.post("/_sim/traffic", json=request)
    assert started.status_code == 202
    run_id = started.json()["id"]

    def done() -> bool:
        return bool(live_sim.get(f"/_sim/traffic/{run_id}").json()["done"])

    wait_for(done)
    run = live_sim.get(f"/_sim/traffic/{run_id}").json()
    assert (run["sent"], run["delivered"], run["failed"], run["stoppedBy"]) == (40, 40, 0, "count")
    assert len(sink.posts()) == 40

    ids = [e["events"][0]["id"] for e in envelopes(sink)]
    assert run["unique"] == len(set(ids)) and run["duplicates"] == len(ids) - len(set(ids)) > 0
    for body, envelope in zip(bodies(sink), envelopes(sink), strict=True):
        assert envelope["appid"] == appid and envelope["event_type"] == "Msg" and len(envelope["events"]) == 1
        event = envelope["events"][0]
        assert f'"roomId":{event["roomId"]}'.encode() in body and len(str(event["roomId"])) == 19


def test_traffic_needs_a_usable_connection(live_sim: httpx.Client) -> None:
    appid = seed(live_sim, callbackUrl="http://127.0.0.1:9/cb")
    assert live_sim.post("/_sim/traffic", json={"appid": appid}).status_code == 409
    assert live_sim.post("/_sim/traffic", json={"appid": "nope"}).status_code == 404
    connected = seed(live_sim, connected=True, callbackUrl="http://127.0.0.1:9/cb")
    assert live_sim.post("/_sim/traffic", json={"appid": connected, "kinds": ["spam"]}).status_code == 400


# --- event builders -----------------------------------------------------------


def test_call_sequences_follow_the_outcome_table() -> None:
    rng = random.Random(3)
    seen: dict[int, int] = {}
    for _ in range(200):
        events = traffic.build_events("call", rng, owner=traffic.USER_ID_BASE, now=0)
        types = [e["contentType"] for e in events]
        result = next(e["content"] for e in events if e["contentType"] == 40)
        expected = {"对方已取消": 8, "已拒绝": 9, "未接听": 9, "通话时长": 10}[result]
        assert len(events) == expected and types.count(2350) == 1
        assert (2412 in types) == (result == "通话时长")
        assert types.count(2120) == types.count(503)
        seen[len(events)] = seen.get(len(events), 0) + 1
    assert set(seen) == {8, 9, 10}


def test_event_shapes() -> None:
    rng = random.Random(5)
    ids = iter(str(n) for n in range(10_000))
    for kind in traffic.KINDS:
        for event in traffic.build_events(kind, rng, owner=1, now=1_700_000_000, next_id=lambda: next(ids)):
            assert isinstance(event["id"], str)
            assert event["messageType"] in (0, 1)
            assert len(str(event["roomId"])) == 19 and event["roomId"] > 2**53
            assert event["conversationId"] == event["roomId"]
    request = traffic.build_events("friend_request", rng, owner=1, now=0)[0]
    assert request["contentType"] == 2357
    assert set(request["content"]) == {"corpId", "uin", "corpName", "customerName", "source"}
    for _ in range(50):
        group = traffic.build_events("group", rng, owner=1, now=0)[0]
        assert group["messageType"] == 1
        if group["contentType"] in (1005, 2118):
            assert group["content"] == ""
    body, pointer = traffic.build_events("announcement", rng, owner=1, now=0)
    assert body["flag"] & 0x10000 and body["contentType"] == 2
    assert pointer["contentType"] == 2308 and pointer["content"] == body["id"]
    assert "id" not in traffic.gap_closed_event(-1008)
    with pytest.raises(ValueError):
        traffic.build_events("spam", rng, owner=1, now=0)


def test_posts_repeat_bodies_byte_for_byte() -> None:
    stream = traffic.posts(
        random.Random(1), appid="we_x", owner=1, kinds=["text", "call"], duplicates=0.3, clock=lambda: 0.0
    )
    first_body: dict[str, bytes] = {}
    duplicates = 0
    for _, post in zip(range(200), stream, strict=False):
        if post.duplicate:
            duplicates += 1
            assert first_body[post.event_id] == post.body
        else:
            assert post.event_id not in first_body
            first_body[post.event_id] = post.body
    assert 20 < duplicates < 100
