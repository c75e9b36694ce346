"""The operations endpoint: the envelope, unknown instances, faults on the HTTP exchange, callbacks after answers."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from simulator import traffic
from tests.simulator.support import TIME_FORMAT, TestClient, call, envelopes, event_types, seed
from tests.support import Sink, wait_for


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


def test_unknown_appid_is_refused(client: TestClient) -> None:
    for path in ("long/check", "message/sendText", "contact/list", "user/getProfile"):
        answer = call(client, path, appid="we_000000000000000")
        assert (answer["code"], answer["message"], answer["data"]) == (-1, "instance not found", None)
    assert call(client, "long/check")["message"] == "instance not found"
    assert client.get("/_sim/instances/we_000000000000000").status_code == 404


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


def test_http_error_close_drops_the_connection(live_sim: httpx.Client) -> None:
    appid = seed(live_sim)
    live_sim.post("/_sim/faults", json={"http_error": {"long/check": "close"}})
    with pytest.raises(httpx.RemoteProtocolError):
        live_sim.post("/svc/api/long/check", json={"appid": appid})
    assert call(live_sim, "contact/list", appid=appid)["code"] == 0


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
