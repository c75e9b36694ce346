"""The body checks of a gateway call: parsing, the instance field, callback fields."""

from __future__ import annotations

import pytest

from receiver.gateway.body import check_callback_fields, instance_id, parse_body
from svcgw.errors import GatewayError


def _instance(text: str, configuring: bool = False) -> str:
    document, members = parse_body(text.encode())
    return instance_id(document, members, configuring=configuring)


def _code(text: str, configuring: bool = False) -> int:
    with pytest.raises(GatewayError) as caught:
        _instance(text, configuring)
    return caught.value.code


def test_instance_field_rules() -> None:
    assert _instance('{"appid":"a"}') == "a"
    assert _instance('{"ql_appid":"a"}') == "a"
    assert _instance('{"appid":"a","ql_appid":"a"}') == "a"
    assert _instance('{"appid":""}') == ""
    assert _instance('{"appid":null,"ql_appid":"a"}') == "a"
    assert _code('{"appid":"a","ql_appid":"b"}') == -40002
    assert _code('{"appId":"a"}') == -40002
    assert _code('{"appid":"a","APP-ID":"a"}') == -40002
    assert _code('{"QL_APPID":"a"}') == -40002
    assert _code('{"appid":"a","appid":"a"}') == -40002
    assert _code("{}") == -40001
    assert _code('{"appid":1}') == -40001
    assert _code("{}", configuring=True) == -40010
    assert _code('{"appid":null}', configuring=True) == -40010


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"appid":"\xff"}', "the body is not UTF-8 JSON"),
        (b"[1]", "the body must be a JSON object"),
        (b'{"appid":', "the body is not valid JSON"),
    ],
)
def test_unusable_bodies_are_40001(raw: bytes, message: str) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_body(raw)
    assert (caught.value.code, caught.value.message) == (-40001, message)


def test_callback_fields_only_on_callback_operations() -> None:
    _, members = parse_body(b'{"appid":"a","callbackUrl":"http://x/"}')
    check_callback_fields(members, "long/start")
    with pytest.raises(GatewayError) as caught:
        check_callback_fields(members, "message/sendText")
    assert caught.value.code == -40403
    _, members = parse_body(b'{"appid":"a","callbackURL":"http://x/"}')
    with pytest.raises(GatewayError):
        check_callback_fields(members, "long/start")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"appid":"\\ud800"}',
        b'{"appid":"a","x":["\\udc00"]}',
        b'{"appid":"a","\\ud800":1}',
        '{"appid":"a"}'.encode("utf-16"),
        '{"appid":"a"}'.encode("utf-32"),
        b'{"appid":"\xed\xa0\x80"}',
    ],
)
def test_text_that_is_not_strict_utf8_is_40001(raw: bytes) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_body(raw)
    assert (caught.value.code, caught.value.message) == (-40001, "the body is not UTF-8 JSON")


def test_escaped_surrogate_pairs_are_text() -> None:
    assert _instance('{"appid":"\\ud83d\\ude00"}') == "\U0001f600"
