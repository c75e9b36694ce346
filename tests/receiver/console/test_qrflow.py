"""The pure parts of the console's QR flow: status words, the QR image, what each status needs, answers."""

from __future__ import annotations

import base64

import orjson
import pytest
from starlette.responses import Response

from receiver.console.onboarding import refresh_seconds
from receiver.console.qrattempt import Outcome, QrLogin, action_needed, image_data_url, login_status_words

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
PNG64 = base64.b64encode(PNG).decode()


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (-1, "Waiting for a scan"),
        (0, "without scanning"),
        (1, "Confirm the login on the phone"),
        (2, "Logged in"),
        (4, "cancelled"),
        (10, "six-digit code"),
        (7, "unexpected state (7); still checking"),
        (None, "Asking for a code"),
    ],
)
def test_each_login_status_in_words(status: int | None, words: str) -> None:
    assert words in login_status_words(status)


def test_the_image_with_or_without_a_data_prefix() -> None:
    expected = f"data:image/png;base64,{PNG64}"
    assert image_data_url(PNG64) == expected
    assert image_data_url(f"data:image/png;base64,{PNG64}") == expected
    assert image_data_url(f"data:application/octet-stream;base64,{PNG64}") == expected  # typed by its bytes
    wrapped = "\n".join(PNG64[i : i + 16] for i in range(0, len(PNG64), 16))
    assert image_data_url(wrapped) == expected
    gif = base64.b64encode(b"GIF89a" + b"\x00" * 10).decode()
    assert image_data_url(gif) == f"data:image/gif;base64,{gif}"


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        42,
        "not base64 at all!",
        base64.b64encode(b"<svg onload=alert(1)>").decode(),  # not an image type taken
        f'{PNG64}"><script>alert(1)</script>',
        f"data:image/png,{PNG64}",  # not base64-encoded
        base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 300_000).decode(),  # too large
    ],
)
def test_anything_else_is_no_image(value: object) -> None:
    assert image_data_url(value) is None


def test_what_each_status_needs() -> None:
    assert "Re-login" in (action_needed({"status": "offline", "action_required": "relogin"}) or "")
    assert "Scan a new QR code" in (action_needed({"status": "offline", "action_required": "manual"}) or "")
    assert "Start" in (action_needed({"status": "stopped"}) or "")
    assert "QR scan" in (action_needed({"status": "logged_out"}) or "")
    assert "QR scan" in (action_needed({"status": "not_started"}) or "")
    assert action_needed({"status": "online"}) is None


def test_the_page_reloads_only_while_waiting() -> None:
    attempt = QrLogin(id="a", appid="we_x", stage="qr")
    assert refresh_seconds(attempt) == 2
    for status, reload in ((-1, 2), (1, 2), (0, 2), (10, None), (4, None)):
        attempt.status = status
        assert refresh_seconds(attempt) == reload
    assert refresh_seconds(QrLogin(id="a", appid="we_x", stage="closing")) == 1
    assert refresh_seconds(QrLogin(id="a", appid="we_x", stage="failed")) is None


def test_an_attempt_round_trips_through_its_hash() -> None:
    attempt = QrLogin(id="a", appid="we_x", stage="qr", proxy="p", status=-1, refresh_interval=30, created=True)
    assert QrLogin.load(attempt.fields()) == attempt
    assert QrLogin.load(QrLogin(id="b", appid="we_y", stage="closing").fields()).status is None
    # A late save of an older view cannot take a finished login back.
    assert QrLogin.load({**attempt.fields(), "finished": "1"}).stage == "done"


def test_an_outcome_tells_the_gateway_from_the_layer() -> None:
    refused = Outcome.of(
        "device/create",
        Response(orjson.dumps({"code": -40402, "message": "quota", "data": None}), 402, headers={"Retry-After": "3"}),
    )
    assert (refused.ok, refused.by_gateway, refused.code, refused.retry_after) == (False, True, -40402, "3")
    layer = Outcome.of("login/getQr", Response(b'{"code":-1,"message":"please close long client","data":null}'))
    assert (layer.ok, layer.by_gateway) == (False, False)
    assert layer.describe() == "login/getQr was refused: -1 please close long client"
    assert Outcome.of("x/y", Response(b'{"code":0,"message":"ok","data":{}}')).ok
    assert Outcome.of("x/y", Response(b"oops", 502)).code == -1
