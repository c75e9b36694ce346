"""The simulator's state rules: fault lookup, QR polling, and what connection changes owe by callback."""

from __future__ import annotations

import json

from simulator import traffic
from simulator.state import Faults, Instance, QrSession, SimState, first, lookup


def connected(callback_url: str | None = "http://127.0.0.1:9/cb") -> Instance:
    inst = SimState().add_instance("we_a")
    inst.logged_in, inst.connected, inst.callback_url = True, True, callback_url
    return inst


def test_lookup_takes_the_most_specific_setting() -> None:
    instance, everywhere = {"*": 1.0}, {"long/check": 2.0, "*": 3.0}
    assert lookup([instance, everywhere], "long/check") == 1.0
    assert lookup([{"user/getProfile": 4.0}, everywhere], "long/check") == 2.0
    nothing: dict[str, float] = {}
    assert lookup([nothing, {"*": 3.0}], "long/check") == 3.0
    assert lookup([nothing, nothing], "long/check") is None
    assert first([None, "error", "silent"]) == "error" and first([None, None]) is None


def test_scopes_put_the_instance_before_the_global_faults() -> None:
    sim = SimState()
    inst = sim.add_instance("we_a")
    assert sim.scopes(inst) == [inst.faults, sim.faults] and sim.scopes(None) == [sim.faults]
    assert sim.find("we_a") is inst and sim.find("we_b") is None and sim.find(7) is None
    assert inst.faults is not sim.faults and inst.faults == Faults()


def test_qr_session_steps() -> None:
    plain, verified = QrSession(needs_code=False), QrSession(needs_code=True)
    assert [plain.poll() for _ in range(4)] == [-1, 1, 2, 2]
    assert [verified.poll() for _ in range(4)] == [-1, 1, 10, 10] and verified.last_status == 10
    verified.verified = True
    assert verified.poll() == 2


def test_usable_needs_login_connection_and_no_silent_drop() -> None:
    inst = connected()
    assert inst.usable
    inst.drop(None)
    assert inst.connected and not inst.usable and inst.snapshot()["dropped"] is True
    inst.dropped_at = None
    inst.logged_in = False
    assert not inst.usable


def test_connect_is_announced_only_when_the_connection_was_not_up() -> None:
    inst = connected()
    assert inst.connect() == []
    inst.drop(5.0)
    assert inst.drop_check_ok_for == 5.0
    [(owner, url, posts)] = inst.connect()
    assert (owner, url) == (inst, "http://127.0.0.1:9/cb") and inst.usable
    assert [json.loads(body)["event_type"] for body in posts] == ["GapConnected", "GapSucceed"]
    inst.connected = False
    assert connected(callback_url=None).connect() == []


def test_close_owes_gap_closed_and_session_ending_codes_end_the_login() -> None:
    inst = connected()
    [(_, _, [body])] = inst.close(-11001)
    assert json.loads(body) == traffic.envelope(
        "we_a", "GapClosed", [{"code": -11001, "message": traffic.GAP_CLOSED_MESSAGES[-11001]}]
    )
    assert not inst.connected and inst.logged_in
    assert inst.close(0) == []

    ending = connected()
    [(_, _, [body])] = ending.close(-1008, "gone")
    assert json.loads(body)["events"] == [{"code": -1008, "message": "gone"}]
    assert not ending.logged_in
    assert connected(callback_url=None).close(0) == []


def test_drop_leaves_an_already_dropped_or_closed_connection_alone() -> None:
    inst = connected()
    inst.drop(None)
    dropped_at = inst.dropped_at
    inst.drop(1.0)
    assert (inst.dropped_at, inst.drop_check_ok_for) == (dropped_at, None)
    closed = connected()
    closed.connected = False
    closed.drop(None)
    assert closed.dropped_at is None
