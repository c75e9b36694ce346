"""The simulator's QR login played by hand: the control API scans, confirms, cancels and asks for a code."""

from __future__ import annotations

import base64

from tests.simulator.support import TestClient, call, state

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def new_code(client: TestClient, *, auto: bool = False) -> tuple[str, str]:
    """A new instance with a QR code shown, the simulator waiting for the control API unless ``auto``."""
    assert client.post("/_sim/config", json={"qr_auto": auto}).json()["qr_auto"] is auto
    appid = call(client, "device/create", appid="", type="iPad", version=0)["data"]["appid"]
    qr = call(client, "login/getQr", appid=appid, proxy="")["data"]
    return appid, qr["uuid"]


def status(client: TestClient, appid: str, uuid: str) -> int:
    return int(call(client, "login/checkQr", appid=appid, proxy="", uuid=uuid)["data"]["status"])


def act(client: TestClient, appid: str, action: str, **extra: object) -> dict[str, object]:
    answer = client.post("/_sim/qr", json={"appid": appid, "action": action, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_the_qr_image_is_a_png_qr_code(client: TestClient) -> None:
    appid = call(client, "device/create", appid="", type="iPad", version=0)["data"]["appid"]
    qr = call(client, "login/getQr", appid=appid, proxy="")["data"]
    png = base64.b64decode(qr["imageBase64"], validate=True)
    assert png.startswith(PNG_SIGNATURE) and len(png) > 100
    again = call(client, "login/getQr", appid=appid, proxy="")["data"]
    assert again["imageBase64"] != qr["imageBase64"]  # each login session its own code


def test_a_manual_code_waits_for_the_phone(client: TestClient) -> None:
    appid, uuid = new_code(client)
    assert [status(client, appid, uuid) for _ in range(4)] == [-1, -1, -1, -1]
    assert act(client, appid, "scan") == {"uuid": uuid, "status": 1}
    assert [status(client, appid, uuid) for _ in range(3)] == [1, 1, 1]
    assert state(client, appid)["loggedIn"] is False
    act(client, appid, "confirm")
    assert status(client, appid, uuid) == 2
    assert state(client, appid)["loggedIn"] is True


def test_a_required_code_must_be_the_one_sent_to_the_phone(client: TestClient) -> None:
    appid, uuid = new_code(client)
    act(client, appid, "scan")
    assert act(client, appid, "code", code="246810") == {"uuid": uuid, "status": 10, "code": "246810"}
    assert status(client, appid, uuid) == 10
    wrong = call(client, "login/submitQrCode", appid=appid, proxy="", uuid=uuid, code="135791")
    assert (wrong["code"], wrong["message"]) == (-1, "invalid verify code")
    assert status(client, appid, uuid) == 10
    right = call(client, "login/submitQrCode", appid=appid, proxy="", uuid=uuid, code="246810")
    assert right["code"] == 0
    assert status(client, appid, uuid) == 2 and state(client, appid)["loggedIn"] is True


def test_confirming_before_the_code_asks_for_it_and_a_drawn_code_is_answered(client: TestClient) -> None:
    appid, uuid = new_code(client)
    drawn = act(client, appid, "code")["code"]
    assert isinstance(drawn, str) and len(drawn) == 6 and drawn.isdigit()
    act(client, appid, "confirm")
    assert status(client, appid, uuid) == 10


def test_cancel_then_a_new_code(client: TestClient) -> None:
    appid, uuid = new_code(client)
    act(client, appid, "scan")
    act(client, appid, "cancel")
    assert status(client, appid, uuid) == 4
    fresh = call(client, "login/getQr", appid=appid, proxy="")["data"]["uuid"]
    assert status(client, appid, fresh) == -1
    assert act(client, appid, "scan", uuid=uuid)["status"] == 1  # an older code by its uuid
    assert status(client, appid, fresh) == -1


def test_acting_on_an_automatic_code_stops_it_moving_on(client: TestClient) -> None:
    appid, uuid = new_code(client, auto=True)
    assert status(client, appid, uuid) == -1
    act(client, appid, "cancel")
    assert [status(client, appid, uuid) for _ in range(3)] == [4, 4, 4]


def test_refusals(client: TestClient) -> None:
    appid = call(client, "device/create", appid="", type="iPad", version=0)["data"]["appid"]
    assert client.post("/_sim/qr", json={"appid": appid, "action": "scan"}).status_code == 404
    assert client.post("/_sim/qr", json={"appid": "we_nope", "action": "scan"}).status_code == 404
    call(client, "login/getQr", appid=appid, proxy="")
    assert client.post("/_sim/qr", json={"appid": appid, "action": "wave"}).status_code == 400
    assert client.post("/_sim/qr", json={"appid": appid, "action": "code", "code": "12ab56"}).status_code == 400
    assert client.post("/_sim/config", json={"qr_auto": "no"}).status_code == 400
