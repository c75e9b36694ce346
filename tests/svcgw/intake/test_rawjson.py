"""Raw JSON spans: members and items found over the bytes as received."""

from __future__ import annotations

import pytest

from svcgw.intake.rawjson import Member, items, members, parse_object, replace_member, skip_ws

# --- parse_object: validating, with spans ----------------------------------------


def test_scan_keeps_spans_and_big_integers() -> None:
    text = b'{ "appid" : "we_1", "n": 12345678901234567890123, "o": {"callbackUrl": "inner"}, "callbackUrl":"x" }'
    document, found = parse_object(text)
    assert document["n"] == 12345678901234567890123
    assert [m.name for m in found] == ["appid", "n", "o", "callbackUrl"]
    assert [text[m.start : m.end] for m in found][1] == b"12345678901234567890123"

    rewritten = replace_member(text, found, "callbackUrl", "http://gw/svc/receiver/we_1/t")
    assert rewritten == text.replace(b'"callbackUrl":"x"', b'"callbackUrl":"http://gw/svc/receiver/we_1/t"')


def test_replace_member_rewrites_every_duplicate() -> None:
    text = b'{"callbackUrl":"a","x":1e2,"callbackUrl" :  "b"}'
    _, found = parse_object(text)
    assert replace_member(text, found, "callbackUrl", "R") == b'{"callbackUrl":"R","x":1e2,"callbackUrl" :  "R"}'


def test_duplicates_are_all_listed_and_parsing_keeps_the_last() -> None:
    text = b'{"appid":"a","appid":"b"}'
    document, found = parse_object(text)
    assert document == {"appid": "b"}
    assert [m.name for m in found] == ["appid", "appid"]


def test_escaped_and_non_ascii_names_are_decoded_and_spans_are_byte_offsets() -> None:
    text = '{"\\u0061ppid":"é","ключ":[1, 2]}'.encode()
    _, found = parse_object(text)
    assert [m.name for m in found] == ["appid", "ключ"]
    assert text[found[0].start : found[0].end] == '"é"'.encode()
    assert text[found[1].start : found[1].end] == b"[1, 2]"


@pytest.mark.parametrize("text", ["", "{", '{"a" 1}', '{"a":1,}', '{"a":1} x', '{"a":NaN}', "{'a':1}", "{1:2}"])
def test_scan_refuses_what_is_not_json(text: str) -> None:
    with pytest.raises(ValueError):
        parse_object(text.encode())


@pytest.mark.parametrize("text", ["[]", "1", '"x"', "null"])
def test_scan_refuses_json_that_is_not_an_object(text: str) -> None:
    with pytest.raises(TypeError):
        parse_object(text.encode())


def test_bytes_that_are_not_utf8_are_a_unicode_error() -> None:
    with pytest.raises(UnicodeDecodeError):
        parse_object(b'{"a":"\xff"}')


# --- members and items over validated JSON ----------------------------------------


def test_members_and_items_keep_raw_bytes() -> None:
    data = b' {"events" : [ {"id":9007199254740993,"s":"br\\"ace]}"} ,\n 1e2, [] ], "k": {} } '
    found = members(data, skip_ws(data, 0))
    assert found[0] == Member("events", found[0].start, found[0].end)
    assert items(data, found[0].start, found[0].end) == [
        b'{"id":9007199254740993,"s":"br\\"ace]}"}',
        b"1e2",
        b"[]",
    ]
    assert data[found[1].start : found[1].end] == b"{}"


def test_empty_object_and_array() -> None:
    assert members(b"{ }", 0) == []
    assert items(b"[ ]", 0, 3) == []
