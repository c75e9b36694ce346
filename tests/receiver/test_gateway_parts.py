"""The gateway's parts on their own: path rules, body scanning, scrubbing, rate limit, quota, upstream."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from receiver.gateway import DeviceQuota, instance_id, path_problem, replace_member, scan_object, scrub
from receiver.ratelimit import RateLimiter
from svcgw import keys
from svcgw.errors import GatewayError
from svcgw.upstream import Answer, Upstream, UpstreamUnreachable, UpstreamUnusable, parse_envelope
from tests.support import Sink

# --- path --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        b"/svc/api/message/sendText/",
        b"/svc/api//message/sendText",
        b"//svc/api/message/sendText",
        b"/svc//api/message/sendText",
        b"/svc/./api/message/sendText",
        b"/svc/x/../api/message/sendText",
        b"/svc/api/message/%2e",
        b"/svc/api/message/%2E%2e",
        b"/svc/api/message%2fsendText/x",
        b"/svc/api/message%2FsendText",
        b"/svc/api/message/send%2eText",
        b"/svc/api",
        b"/svc/api/",
        b"/svc/api/message",
        b"/svc/api/a/b/c",
        b"/svc/instances/set-callback/",
        b"/svc/instances/./set-callback",
    ],
)
def test_ambiguous_paths(path: bytes) -> None:
    assert path_problem(path) is not None


@pytest.mark.parametrize(
    "path",
    [
        b"/svc/api/message/sendText",
        b"/svc/api/message/sendText?x=/../",
        b"/svc/api/message/send%54ext",
        b"/svc/instances/set-callback",
        b"/svc/receiver/we_x/token/",  # not the gateway's to judge
        b"/healthz/",
        b"/",
    ],
)
def test_unambiguous_or_unguarded_paths(path: bytes) -> None:
    assert path_problem(path) is None


# --- body --------------------------------------------------------------------------


def test_scan_keeps_spans_and_big_integers() -> None:
    text = '{ "appid" : "we_1", "n": 12345678901234567890123, "o": {"callbackUrl": "inner"}, "callbackUrl":"x" }'
    document, members = scan_object(text)
    assert document["n"] == 12345678901234567890123
    assert [m.name for m in members] == ["appid", "n", "o", "callbackUrl"]
    assert [text[m.start : m.end] for m in members][1] == "12345678901234567890123"

    rewritten = replace_member(text, members, "callbackUrl", "http://gw/svc/receiver/we_1/t")
    assert rewritten == text.replace('"callbackUrl":"x"', '"callbackUrl":"http://gw/svc/receiver/we_1/t"')


def test_replace_member_rewrites_every_duplicate() -> None:
    text = '{"callbackUrl":"a","x":1e2,"callbackUrl" :  "b"}'
    _, members = scan_object(text)
    assert replace_member(text, members, "callbackUrl", "R") == '{"callbackUrl":"R","x":1e2,"callbackUrl" :  "R"}'


@pytest.mark.parametrize("text", ["", "{", '{"a" 1}', '{"a":1,}', '{"a":1} x', '{"a":NaN}', "{'a':1}", "{1:2}"])
def test_scan_refuses_what_is_not_json(text: str) -> None:
    with pytest.raises(ValueError):
        scan_object(text)


@pytest.mark.parametrize("text", ["[]", "1", '"x"', "null"])
def test_scan_refuses_json_that_is_not_an_object(text: str) -> None:
    with pytest.raises(TypeError):
        scan_object(text)


def _instance(text: str, configuring: bool = False) -> str:
    document, members = scan_object(text)
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


# --- answers -------------------------------------------------------------------------

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


# --- rate limit ------------------------------------------------------------------------


def _async_redis(redis_url: str) -> AsyncRedis:
    return AsyncRedis.from_url(redis_url, decode_responses=True)


def test_moving_window_counts_refused_calls_and_tells_an_honest_wait(redis_url: str) -> None:
    async def scenario() -> list[Any]:
        client = _async_redis(redis_url)
        try:
            limiter = RateLimiter(client, "3/2second")
            first = [await limiter.hit("acc_a") for _ in range(3)]
            refused = await limiter.hit("acc_a")
            other = await limiter.hit("acc_b")
            await asyncio.sleep(refused.retry_after - 0.3)
            still = await limiter.hit("acc_a")  # too early, and it counts
            await asyncio.sleep(still.retry_after)
            after = await limiter.hit("acc_a")
            return [first, refused, other, still, after]
        finally:
            await client.aclose()

    first, refused, other, still, after = asyncio.run(scenario())
    assert all(v.allowed for v in first)
    assert not refused.allowed and refused.retry_after == 2
    assert other.allowed
    assert not still.allowed and still.retry_after >= 1
    assert after.allowed


def test_several_limits_are_all_enforced(redis_url: str) -> None:
    async def scenario() -> list[bool]:
        client = _async_redis(redis_url)
        try:
            limiter = RateLimiter(client, "2/second;3/minute")
            allowed = []
            for _ in range(2):
                allowed.append((await limiter.hit("acc")).allowed)
            allowed.append((await limiter.hit("acc")).allowed)
            await asyncio.sleep(1.05)
            allowed.append((await limiter.hit("acc")).allowed)  # the minute window is full now
            return allowed
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == [True, True, False, False]


def test_rate_limit_needs_a_positive_amount(redis_url: str) -> None:
    async def build() -> None:
        client = _async_redis(redis_url)
        try:
            RateLimiter(client, "0/second")
        finally:
            await client.aclose()

    with pytest.raises(ValueError):
        asyncio.run(build())


# --- device quota ------------------------------------------------------------------------


def test_reservations_are_atomic_and_count_an_appid_once(redis_url: str, redis: Redis) -> None:
    async def scenario() -> tuple[int, int, int]:
        client = _async_redis(redis_url)
        try:
            quota = DeviceQuota(client)
            await client.sadd(keys.account_instances("acc"), "we_existing")
            held = await asyncio.gather(*(quota.reserve("acc", 4) for _ in range(20)))
            taken = [r for r in held if r is not None]
            # One creation succeeds: the slot becomes the appid, then the appid is registered.
            await quota.hold(taken[0], "we_new")
            full_while_renamed = await quota.reserve("acc", 4)
            await client.sadd(keys.account_instances("acc"), "we_new")
            full_while_both = await quota.reserve("acc", 4)
            for reservation in taken:
                await quota.release(reservation)
            again = [await quota.reserve("acc", 4) for _ in range(3)]
            return (
                len(taken),
                int(full_while_renamed is None) + int(full_while_both is None),
                sum(r is not None for r in again),
            )
        finally:
            await client.aclose()

    taken, full, again = asyncio.run(scenario())
    assert taken == 3  # quota 4, one instance already
    assert full == 2
    assert again == 2  # two instances now


# --- upstream ----------------------------------------------------------------------------


def test_upstream_errors_are_converted(sink: Sink) -> None:
    base = sink.url.removesuffix("/hook")

    async def call(timeout: float = 5.0) -> Answer:
        upstream = Upstream(base, timeout=timeout)
        try:
            return await upstream.call("long", "check", b'{"appid":"x"}')
        finally:
            await upstream.aclose()

    with pytest.raises(UpstreamUnusable, match="no integer code"):
        asyncio.run(call())  # the sink answers {"ok": true}
    sink.set(status=500)
    with pytest.raises(UpstreamUnusable, match="HTTP 500"):
        asyncio.run(call())
    sink.set(status=200, delay=1.0)
    started = time.monotonic()
    with pytest.raises(UpstreamUnreachable, match="timed out"):
        asyncio.run(call(timeout=0.2))
    assert time.monotonic() - started < 1.0
    assert sink.posts()[0].path == "/svc/api/long/check"


def test_upstream_unreachable() -> None:
    async def call() -> Answer:
        upstream = Upstream("http://127.0.0.1:9")
        try:
            return await upstream.call("long", "check", b"{}")
        finally:
            await upstream.aclose()

    with pytest.raises(UpstreamUnreachable):
        asyncio.run(call())


@pytest.mark.parametrize("raw", [b"", b"<html>", b"[]", b'{"code":"0"}', b'{"code":true}', b'{"message":"ok"}'])
def test_unusable_envelopes(raw: bytes) -> None:
    with pytest.raises(UpstreamUnusable):
        parse_envelope(raw)


def test_envelope_with_huge_integers_is_usable() -> None:
    answer = _answer(b'{"code":0,"data":{"uin":1688850000000000000123456}}')
    assert answer.ok and answer.data == {"uin": 1688850000000000000123456}
