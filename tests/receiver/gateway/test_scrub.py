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
