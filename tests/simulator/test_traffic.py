"""Event builders and the stream of posts: shapes, call sequences, duplicates byte for byte."""

from __future__ import annotations

import random

import pytest

from simulator import traffic


def test_call_sequences_follow_the_outcome_table() -> None:
    rng = random.Random(3)
    seen: dict[int, int] = {}
    for _ in range(200):
        events = traffic.build_events("call", rng, owner=traffic.USER_ID_BASE, now=0)
        types = [e["contentType"] for e in events]
        result = next(e["content"] for e in events if e["contentType"] == 40)
        expected = {"对方已取消": 8, "已拒绝": 9, "未接听": 9, "通话时长": 10}[result]
        assert len(events) == expected and types.count(2350) == 1
        assert (2412 in types) == (result == "通话时长")
        assert types.count(2120) == types.count(503)
        seen[len(events)] = seen.get(len(events), 0) + 1
    assert set(seen) == {8, 9, 10}


def test_event_shapes() -> None:
    rng = random.Random(5)
    ids = iter(str(n) for n in range(10_000))
    for kind in traffic.KINDS:
        for event in traffic.build_events(kind, rng, owner=1, now=1_700_000_000, next_id=lambda: next(ids)):
            assert isinstance(event["id"], str)
            assert event["messageType"] in (0, 1)
            assert len(str(event["roomId"])) == 19 and event["roomId"] > 2**53
            assert event["conversationId"] == event["roomId"]
    request = traffic.build_events("friend_request", rng, owner=1, now=0)[0]
    assert request["contentType"] == 2357
    assert set(request["content"]) == {"corpId", "uin", "corpName", "customerName", "source"}
    for _ in range(50):
        group = traffic.build_events("group", rng, owner=1, now=0)[0]
        assert group["messageType"] == 1
        if group["contentType"] in (1005, 2118):
            assert group["content"] == ""
    body, pointer = traffic.build_events("announcement", rng, owner=1, now=0)
    assert body["flag"] & 0x10000 and body["contentType"] == 2
    assert pointer["contentType"] == 2308 and pointer["content"] == body["id"]
    assert "id" not in traffic.gap_closed_event(-1008)
    with pytest.raises(ValueError):
        traffic.build_events("spam", rng, owner=1, now=0)


def test_posts_repeat_bodies_byte_for_byte() -> None:
    stream = traffic.posts(
        random.Random(1), appid="we_x", owner=1, kinds=["text", "call"], duplicates=0.3, clock=lambda: 0.0
    )
    first_body: dict[str, bytes] = {}
    duplicates = 0
    for _, post in zip(range(200), stream, strict=False):
        if post.duplicate:
            duplicates += 1
            assert first_body[post.event_id] == post.body
        else:
            assert post.event_id not in first_body
            first_body[post.event_id] = post.body
    assert 20 < duplicates < 100
