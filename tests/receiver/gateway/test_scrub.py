"""Answer scrubbing: the receiver URL never reaches the caller, other bytes stay."""

from __future__ import annotations

import json

import pytest

from receiver.gateway.scrub import scrub
from svcgw.upstream import Answer, parse_envelope

RECEIVER = "http://gw:8080/svc/receiver/we_1/TOKEN-abc_123"
CALLER = "https://caller.example/hook?a=1&b=é"


def _answer(raw: bytes) -> Answer:
    return Answer(raw, parse_envelope(raw))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"code":0,"data":{"appid":"we_1","callbackUrl":"http://gw:8080/svc/receiver/we_1/TOKEN-abc_123"},"n":1e2}',
        b'{"code":0,"data":{"callbackUrl":"http:\\/\\/gw:8080\\/svc\\/receiver\\/we_1\\/TOKEN-abc_123"},"n":1e2}',
        b'{"code":0,"message":"set to http://gw:8080/svc/receiver/we_1/TOKEN-abc_123 ok","n":1e2}',
    ],
)
def test_scrub_replaces_the_receiver_url_and_keeps_the_rest(raw: bytes) -> None:
    cleaned = scrub(_answer(raw), RECEIVER, "TOKEN-abc_123", CALLER)
    assert b"TOKEN" not in cleaned and b"receiver" not in cleaned
    assert b'"n":1e2' in cleaned  # untouched bytes: no re-serialization
    assert CALLER in json.dumps(json.loads(cleaned), ensure_ascii=False)


def test_scrub_leaves_answers_without_the_token_alone() -> None:
    raw = b'{"code":0, "data":{"roomId":1688850000000001234}, "x":1e2}'
    assert scrub(_answer(raw), RECEIVER, "TOKEN-abc_123", CALLER) is raw


def test_scrub_redacts_an_unusual_encoding() -> None:
    # "T" of the token written as \u0054: no byte pattern matches, the parsed text does.
    raw = b'{"code":0,"data":{"callbackUrl":"http://gw:8080/svc/receiver/we_1/\\u0054OKEN-abc_123"}}'
    cleaned = scrub(_answer(raw), RECEIVER, "TOKEN-abc_123", CALLER)
    assert json.loads(cleaned)["data"]["callbackUrl"] == CALLER


ENCODED = "http%3A%2F%2Fgw%3A8080%2Fsvc%2Freceiver%2Fwe_1%2FTOKEN-abc_123"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # Percent-encoded, as a query parameter: the caller's address, encoded the same way.
        (
            b'{"code":0,"data":{"link":"https://x/?cb=' + ENCODED.encode() + b'"},"n":1e2,"id":1688850000000001234}',
            b'{"code":0,"data":{"link":"https://x/?cb=https%3A%2F%2Fcaller.example%2Fhook%3Fa%3D1%26b%3D%C3%A9"},'
            b'"n":1e2,"id":1688850000000001234}',
        ),
        (
            b'{"code":0,"data":{"link":"http%3a%2f%2fgw%3a8080%2fsvc%2freceiver%2fwe_1%2fTOKEN-abc_123"},"n":1e2}',
            b'{"code":0,"data":{"link":"https%3a%2f%2fcaller.example%2fhook%3fa%3d1%26b%3d%c3%a9"},"n":1e2}',
        ),
        # The token on its own, anywhere.
        (
            b'{"code":0,"data":{"secret":"TOKEN-abc_123","path":"/we_1/TOKEN-abc_123"},"n":1e2}',
            b'{"code":0,"data":{"secret":"[redacted]","path":"/we_1/[redacted]"},"n":1e2}',
        ),
    ],
)
def test_scrub_finds_the_token_in_any_form_and_keeps_the_other_bytes(raw: bytes, expected: bytes) -> None:
    assert scrub(_answer(raw), RECEIVER, "TOKEN-abc_123", CALLER) == expected


@pytest.mark.parametrize(
    "raw",
    [
        # Every character percent-encoded, twice over, or JSON-escaped.
        b'{"code":0,"data":{"t":"' + "".join(f"%{ord(c):02X}" for c in "TOKEN-abc_123").encode() + b'"}}',
        b'{"code":0,"data":{"t":"' + "".join(f"%25{ord(c):02x}" for c in "TOKEN-abc_123").encode() + b'"}}',
        b'{"code":0,"data":{"t":"x\\u0054OKEN-abc_123"}}',
    ],
)
def test_scrub_redacts_unusual_encodings_of_the_token(raw: bytes) -> None:
    cleaned = scrub(_answer(raw), RECEIVER, "TOKEN-abc_123", CALLER)
    assert "TOKEN-abc_123" not in json.dumps(json.loads(cleaned))
    assert "OKEN" not in cleaned.decode() and json.loads(cleaned)["data"]["t"].endswith("[redacted]")
