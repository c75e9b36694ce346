from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svcgw.intake.envelope import EnvelopeError, build_envelope, parse_post

LIMIT = 1 << 20


def test_events_keep_their_bytes() -> None:
    body = (
        b'{ "event_type" : "Msg", "events" : [ {"id":"a","roomId":12345678901234567890123,"x":1e2} ,'
        b'\n {"id": 7, "s": "br\\"ace]}", "n": [1, {"k": []}]} ] , "appid": "we_1" }'
    )
    post = parse_post(body, max_bytes=LIMIT)
    assert post.appid == "we_1"
    assert [e.raw for e in post.events] == [
        b'{"id":"a","roomId":12345678901234567890123,"x":1e2}',
        b'{"id": 7, "s": "br\\"ace]}", "n": [1, {"k": []}]}',
    ]
    envelope = build_envelope("we_1", post.event_type, [e.raw for e in post.events])
    assert b"12345678901234567890123" in envelope and b"1e2" in envelope
    assert orjson.loads(envelope)["events"][1]["s"] == 'br"ace]}'


def test_ids_key_events_exactly_even_beyond_double_precision() -> None:
    body = b'{"event_type":"Msg","events":[{"id":9007199254740993},{"id":9007199254740992},{"id":"9007199254740993"}]}'
    keys = [e.key for e in parse_post(body, max_bytes=LIMIT).events]
    assert keys[0] != keys[1]
    # The same digits as a string name the same event.
    assert keys[0] == keys[2]
    assert all(e.keyed for e in parse_post(body, max_bytes=LIMIT).events)


def test_events_without_id_have_no_key() -> None:
    body = b'{"event_type":"GapClosed","events":[{"code":0},{"code":0},{"id":""},{"id":null}]}'
    events = parse_post(body, max_bytes=LIMIT).events
    assert not any(e.keyed for e in events)
    assert all(e.key is None for e in events)


def test_escaped_keys_are_understood() -> None:
    body = b'{"event_type":"Msg","\\u0065vents":[{"\\u0069d":"x"}]}'
    post = parse_post(body, max_bytes=LIMIT)
    assert post.events[0].keyed


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"not json", 400),
        (b"[1,2]", 400),
        (b'"text"', 400),
        (b'{"events":[]}', 422),
        (b'{"event_type":"","events":[]}', 422),
        (b'{"event_type":"Msg","events":{}}', 422),
        (b'{"event_type":"Msg","events":[1]}', 422),
        (b'{"event_type":"Msg","events":[],"appid":5}', 422),
        (b'{"event_type":"Msg","events":[NaN]}', 400),
    ],
)
def test_bad_posts_are_refused(body: bytes, status: int) -> None:
    with pytest.raises(EnvelopeError) as info:
        parse_post(body, max_bytes=LIMIT)
    assert info.value.status == status


def test_oversized_post_is_413() -> None:
    with pytest.raises(EnvelopeError) as info:
        parse_post(b'{"event_type":"Msg","events":[]}' + b" " * 100, max_bytes=50)
    assert info.value.status == 413


def test_numbers_beyond_double_range_are_still_valid_json() -> None:
    post = parse_post(b'{"event_type":"Msg","events":[{"id":"a","v":1e400}]}', max_bytes=LIMIT)
    assert post.events[0].raw == b'{"id":"a","v":1e400}'


def test_last_duplicate_member_wins_like_the_parser() -> None:
    post = parse_post(b'{"event_type":"Msg","events":[{"id":"a"}],"events":[{"id":"b"}]}', max_bytes=LIMIT)
    assert [e.raw for e in post.events] == [b'{"id":"b"}']


def test_an_event_with_two_ids_is_keyed_by_the_last_and_forwarded_as_received() -> None:
    # As docs/security.md says: the last one counts, as it does for Python's json, JSON.parse and Go's
    # encoding/json; the bytes go on untouched, both members included.
    raw = b'{"id":"first","text":"hi","id":"last"}'
    (event,) = parse_post(b'{"event_type":"Msg","events":[' + raw + b"]}", max_bytes=LIMIT).events
    assert event.raw == raw
    (alone,) = parse_post(b'{"event_type":"Msg","events":[{"id":"last"}]}', max_bytes=LIMIT).events
    (other,) = parse_post(b'{"event_type":"Msg","events":[{"id":"first"}]}', max_bytes=LIMIT).events
    assert event.key == alone.key != other.key
    assert json.loads(raw)["id"] == "last"


# --- text that is not strict UTF-8, and event types that cannot be a header ----------------
POST = {"event_type": "Msg", "events": [{"id": "a"}]}


@pytest.mark.parametrize(
    "body",
    [
        orjson.dumps(POST).decode().encode("utf-16"),
        orjson.dumps(POST).decode().encode("utf-16-le"),
        orjson.dumps(POST).decode().encode("utf-32"),
        b"\xef\xbb\xbf" + orjson.dumps(POST),  # a byte order mark
        b'{"event_type":"Msg","events":[{"id":"\xed\xa0\x80"}]}',  # a surrogate as raw bytes
        b'{"event_type":"\\ud800","events":[{"id":"a"}]}',
        b'{"event_type":"Msg","events":[{"id":"\\ud800"}]}',
        b'{"event_type":"Msg","events":[{"id":"a","v":1e400,"k":"\\udc00"}]}',
        b'{"event_type":"Msg","appid":"\\udfff","events":[]}',
        b'{"event_type":"Msg","events":[{"\\ud800":1}]}',
    ],
)
def test_bodies_that_are_not_strict_utf8_are_400(body: bytes) -> None:
    with pytest.raises(EnvelopeError) as info:
        parse_post(body, max_bytes=LIMIT)
    assert info.value.status == 400
    # UTF-16 without a byte order mark is valid UTF-8 (NUL bytes), just not JSON.
    assert str(info.value).startswith(("the body is not UTF-8 JSON", "the body is not valid JSON"))


def test_escaped_surrogate_pairs_are_text() -> None:
    post = parse_post(b'{"event_type":"Msg","events":[{"id":"\\ud83d\\ude00","v":1e400}]}', max_bytes=LIMIT)
    assert post.events[0].keyed


@pytest.mark.parametrize(
    "event_type", ["Msg\r\nX-Injected: 1", "Msg\n", "Tab\there", "Del\x7f", "caf\u00e9", "\u4e8b\u4ef6", "a\x00"]
)
def test_event_type_must_be_printable_ascii(event_type: str) -> None:
    with pytest.raises(EnvelopeError) as info:
        parse_post(orjson.dumps({"event_type": event_type, "events": [{}]}), max_bytes=LIMIT)
    assert info.value.status == 422
    assert str(info.value) == "event_type must be printable ASCII (0x20 to 0x7E), without control characters"


def test_event_type_may_use_any_printable_ascii() -> None:
    printable = "".join(chr(c) for c in range(0x20, 0x7F))
    assert parse_post(orjson.dumps({"event_type": printable, "events": [{}]}), max_bytes=LIMIT).event_type == printable


# --- any body: a post, or an EnvelopeError; never another exception ------------------------
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)
_POSTS = st.fixed_dictionaries(
    {
        "event_type": st.text(max_size=4) | _JSON,
        "events": st.lists(st.dictionaries(st.sampled_from(["id", "x"]) | st.text(max_size=3), _JSON, max_size=3))
        | _JSON,
    },
    optional={"appid": _JSON},
)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(_POSTS, st.sampled_from(["utf-8", "utf-16", "utf-32"]), st.booleans(), st.binary(max_size=2), st.integers(0, 99))
def test_any_body_is_a_post_or_an_envelope_error(
    document: Any, encoding: str, ascii_only: bool, noise: bytes, at: int
) -> None:
    text = json.dumps(document, ensure_ascii=ascii_only)
    body = text.encode("utf-8", "surrogatepass") if encoding == "utf-8" else text.encode(encoding, "surrogatepass")
    body = body[:at] + noise + body[at + len(noise) :]
    try:
        post = parse_post(body, max_bytes=LIMIT, max_events=1000)
    except EnvelopeError:
        return
    build_envelope("we_1", post.event_type, [event.raw for event in post.events])
    for event in post.events:
        assert isinstance(json.loads(event.raw), dict)
