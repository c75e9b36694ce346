"""The control API: seeding, faults and actions on instances, the call log, traffic runs."""

from __future__ import annotations

import httpx

from simulator import traffic
from tests.simulator.support import TestClient, bodies, call, envelopes, event_types, seed, state
from tests.support import Sink, wait_for


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
