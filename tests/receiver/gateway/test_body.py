"""The body checks of a gateway call: parsing, the instance field, callback fields."""

from __future__ import annotations

import pytest

from receiver.gateway.body import check_callback_fields, instance_id, outbound_body, parse_body, takes_callback
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


def test_set_callback_takes_the_fields_only_by_its_own_route() -> None:
    _, members = parse_body(b'{"appid":"a","callbackUrl":"http://10.0.0.5/internal","pushHistory":true}')
    check_callback_fields(members, "instances/set-callback", sets_callback=True)
    with pytest.raises(GatewayError) as caught:
        check_callback_fields(members, "instances/set-callback")  # the API path spelling it
    assert caught.value.code == -40403
    assert takes_callback("instances/set-callback", sets_callback=True)
    assert not takes_callback("instances/set-callback", sets_callback=False)
    assert takes_callback("long/start", sets_callback=False)
    # Check 6 follows: appid missing is -40010 on the route, -40001 on the API path.
    assert _code("{}", configuring=takes_callback("instances/set-callback", sets_callback=False)) == -40001


def test_the_capability_layer_gets_an_address_only_as_the_receiver_url() -> None:
    raw = b'{"callbackUrl" : "http://10.0.0.5/x","appid":"a", "pushHistory":true,"callbackUrl":"ftp://y"}'
    _, members = parse_body(raw)
    sent = outbound_body(raw, members, "long/start", "http://gw/svc/receiver/a/t")
    assert sent == (
        b'{"callbackUrl" : "http://gw/svc/receiver/a/t","appid":"a", "pushHistory":true,'
        b'"callbackUrl":"http://gw/svc/receiver/a/t"}'
    )
    # No receiver URL to put in its place: refused, not forwarded.
    with pytest.raises(GatewayError) as caught:
        outbound_body(raw, members, "instances/set-callback", None)
    assert caught.value.code == -40403
    # Another spelling of the address is never rewritten, so never forwarded either.
    odd = b'{"appid":"a","callback_url":"http://10.0.0.5/x"}'
    _, odd_members = parse_body(odd)
    with pytest.raises(GatewayError):
        outbound_body(odd, odd_members, "long/start", "http://gw/svc/receiver/a/t")
    plain = b'{"appid":"a","content":"callbackUrl"}'
    assert outbound_body(plain, parse_body(plain)[1], "message/sendText", None) is plain


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
