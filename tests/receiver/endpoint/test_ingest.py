"""The receiver against a real server process and a real Redis."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import httpx
import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from starlette.exceptions import StarletteDeprecationWarning

from receiver.app import create_app
from svcgw.config.settings import Settings, SettingsError
from svcgw.digests import digest
from svcgw.intake import dedup, envelope
from svcgw.intake.ingest import PARSE_IN_THREAD_BYTES, Ingest, IngestResult, UnknownReceiver
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.deploy.redis_nodes import Node, require_binaries

with warnings.catch_warnings():
    # The pinned dependencies carry httpx, which starlette's test client still supports but flags.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def post(url: str, body: bytes) -> httpx.Response:
    return httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=10)


def queued(redis: Redis) -> list[bytes]:
    return redis.lrange(keys.rq.queue("svcgw"), 0, -1)


def test_accepted_post_is_logged_raw_and_queued_as_one_delivery(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"m1","roomId":1688850000000000001234},{"id":"m2","v":1e2}]}'
    answer = post(tenant.receiver_url(server), body)
    assert answer.status_code == 200
    assert answer.json() == {"code": 0, "message": "ok", "data": {"accepted": 2, "duplicates": 0}}

    log = redis.xrange(keys.callback_log(tenant.appid))
    assert len(log) == 1 and log[0][1][b"body"] == body
    assert 0 < redis.ttl(keys.callback_log(tenant.appid)) <= settings.log_retention + 60  # and a minute: delivery.lua

    (delivery_id,) = queued(redis)
    record = redis.hgetall(keys.delivery(delivery_id.decode()))
    assert record[b"body"] == (
        b'{"appid":"' + tenant.appid.encode() + b'","event_type":"Msg","events":'
        b'[{"id":"m1","roomId":1688850000000000001234},{"id":"m2","v":1e2}]}'
    )


def test_duplicates_are_dropped_but_still_logged(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    first = post(tenant.receiver_url(server), b'{"event_type":"Msg","events":[{"id":"a"},{"id":"b"}]}')
    again = post(tenant.receiver_url(server), b'{"event_type":"Msg","events":[{"id":"b"},{"id":"c"}]}')
    assert first.json()["data"] == {"accepted": 2, "duplicates": 0}
    assert again.json()["data"] == {"accepted": 1, "duplicates": 1}
    bodies = [redis.hget(keys.delivery(i.decode()), "body") for i in queued(redis)]
    assert bodies[1] is not None and b'"id":"b"' not in bodies[1] and b'"id":"c"' in bodies[1]
    assert redis.xlen(keys.callback_log(tenant.appid)) == 2


def test_all_duplicate_post_queues_nothing(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"once"}]}'
    assert post(tenant.receiver_url(server), body).json()["data"]["accepted"] == 1
    assert post(tenant.receiver_url(server), body).json()["data"] == {"accepted": 0, "duplicates": 1}
    assert len(queued(redis)) == 1


def test_events_without_an_id_are_never_dropped(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"GapClosed","events":[{"code":0}]}'
    for _ in range(2):
        assert post(tenant.receiver_url(server), body).json()["data"] == {"accepted": 1, "duplicates": 0}
    assert len(queued(redis)) == 2
    assert redis.xlen(keys.callback_log(tenant.appid)) == 2
    # Nothing is written to the de-duplication window for them at all.
    assert redis.keys("svcgw:dd:*") == []


def test_a_post_mixing_events_with_and_without_an_id(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"Mixed","events":[{"id":"k1"},{"code":0},{"code":0}]}'
    assert post(tenant.receiver_url(server), body).json()["data"] == {"accepted": 3, "duplicates": 0}
    assert post(tenant.receiver_url(server), body).json()["data"] == {"accepted": 2, "duplicates": 1}
    second = redis.hget(keys.delivery(queued(redis)[1].decode()), "body")
    assert second is not None and second.endswith(b'"events":[{"code":0},{"code":0}]}')
    # The Redis of the tests has no HEXPIRE: the window is kept in buckets (svcgw.intake.dedup).
    now = time.time()
    seconds = dedup.window(settings)
    (bucket,) = redis.keys("svcgw:dd:*")
    assert bucket == keys.dedup_bucket(tenant.appid, dedup.bucket(now, seconds)).encode()
    # Only its presence counts: a shared integer under a 16-byte field, nothing of the delivery's.
    event = envelope.parse_post(body, max_bytes=len(body)).events[0]
    assert redis.hgetall(bucket) == {event.digest: b"1"}
    assert abs(redis.expiretime(bucket) - dedup.bucket_expiry(dedup.bucket(now, seconds), seconds)) <= 1
    assert redis.keys("svcgw:dedup:*") == []


def test_the_old_unkeyed_window_setting_is_ignored(env: dict[str, str]) -> None:
    settings = Settings.from_env({**env, "SVCGW_UNKEYED_DEDUP_WINDOW": "600"})
    assert not hasattr(settings, "unkeyed_dedup_window")


def test_same_event_id_on_two_instances_is_not_a_duplicate(settings: Settings, server: str, redis: Redis) -> None:
    one, two = provision(settings), provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"shared"}]}'
    assert post(one.receiver_url(server), body).json()["data"]["accepted"] == 1
    assert post(two.receiver_url(server), body).json()["data"]["accepted"] == 1


def test_wrong_token_or_unknown_appid_is_404_and_stores_nothing(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"x"}]}'
    wrong_token = f"{server}/svc/receiver/{tenant.appid}/not-the-token"
    other_appid = f"{server}/svc/receiver/we_unknown0000000/{tenant.receiver_token}"
    for url in (wrong_token, other_appid):
        answer = post(url, body)
        assert answer.status_code == 404
        assert answer.json()["data"] is None
    assert queued(redis) == []
    assert redis.exists(keys.callback_log(tenant.appid)) == 0
    assert redis.keys("svcgw:dd:*") == []


def test_a_token_naming_no_shard_of_this_deployment_is_404_never_500(
    settings: Settings, server: str, redis: Redis
) -> None:
    # One shard here. A shard number of 5,000 digits is more than Python reads as an integer.
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[{"id":"x"}]}'
    for prefix in ("s" + "9" * 5000, "s" + "1" * 4301, "s1", "s7", "s0", "s01", "s"):
        url = f"{server}/svc/receiver/{tenant.appid}/{prefix}.{tenant.receiver_token}"
        answer = post(url, body)
        assert answer.status_code == 404, prefix[:10]
        assert answer.json() == {"code": -404, "message": "no such receiver", "data": None}
    assert queued(redis) == [] and redis.exists(keys.callback_log(tenant.appid)) == 0
    assert post(tenant.receiver_url(server), body).status_code == 200


def test_bad_bodies_get_a_clear_4xx_and_nothing_is_stored(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    url = tenant.receiver_url(server)
    cases = {
        b"{not json": 400,
        b"[]": 400,
        b'{"event_type":"Msg"}': 422,
        b'{"event_type":"Msg","events":"x"}': 422,
        b'{"appid":"we_other","event_type":"Msg","events":[]}': 422,
    }
    for body, status in cases.items():
        answer = post(url, body)
        assert answer.status_code == status, body
        assert answer.json()["message"]
    too_big = b'{"event_type":"Msg","events":[{"id":"big","pad":"' + b"x" * settings.max_body_bytes + b'"}]}'
    assert post(url, too_big).status_code == 413
    assert queued(redis) == []
    assert redis.exists(keys.callback_log(tenant.appid)) == 0


def test_matching_appid_in_body_is_accepted(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    body = orjson.dumps({"appid": tenant.appid, "event_type": "Msg", "events": [{"id": "1"}]})
    assert post(tenant.receiver_url(server), body).status_code == 200


# --- the token first, and a cap on events ----------------------------------------------------
def many_events(count: int) -> bytes:
    return b'{"event_type":"Msg","events":[' + b",".join(b'{"id":"e%d"}' % i for i in range(count)) + b"]}"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Node]:
    """A Redis of this test's own, so its command statistics count this test's commands only."""
    require_binaries("redis-server")
    node = Node("redis-server", tmp_path / "redis", ["--save", "", "--appendonly", "no"]).start()
    try:
        yield node
    finally:
        node.kill()


def test_a_strangers_post_is_refused_before_it_is_parsed(env: dict[str, str], private_redis: Node) -> None:
    settings = Settings.from_env(dict(env, SVCGW_REDIS_URL=f"redis://{private_redis.address}/0"))
    tenant = provision(settings)
    body = b'{"event_type":"Msg","events":[' + b"{}," * ((settings.max_body_bytes - 40) // 3) + b"{}]}"
    assert settings.max_body_bytes - 10 < len(body) <= settings.max_body_bytes
    redis = private_redis.client()
    try:
        with TestClient(create_app(settings)) as client:
            redis.config_resetstat()
            for path in (f"/svc/receiver/{tenant.appid}/notatoken", f"/svc/receiver/we_nosuch/{tenant.receiver_token}"):
                answer = client.post(path, content=body, headers={"Content-Type": "application/json"})
                assert answer.status_code == 404
                assert answer.json() == {"code": -404, "message": "no such receiver", "data": None}
            used = {name.removeprefix("cmdstat_") for name in redis.info("commandstats")}
        assert not used & {"eval", "evalsha", "eval_ro", "evalsha_ro", "script|load"}, used
        assert "get" in used
        assert redis.keys("svcgw:dd:*") == [] and redis.exists(keys.callback_log(tenant.appid)) == 0
    finally:
        redis.close()


def test_more_events_than_the_cap_is_413_and_stores_nothing(settings: Settings, server: str, redis: Redis) -> None:
    tenant = provision(settings)
    answer = post(tenant.receiver_url(server), many_events(settings.max_events_per_post + 1))
    assert answer.status_code == 413
    assert answer.json() == {
        "code": -413,
        "message": f"too many events in one post: {settings.max_events_per_post + 1}, "
        f"at most {settings.max_events_per_post}",
        "data": None,
    }
    assert queued(redis) == []
    assert redis.exists(keys.callback_log(tenant.appid)) == 0
    assert redis.keys("svcgw:dd:*") == []

    answer = post(tenant.receiver_url(server), many_events(settings.max_events_per_post))
    assert answer.status_code == 200
    assert answer.json()["data"] == {"accepted": 1000, "duplicates": 0}
    (delivery_id,) = queued(redis)
    body = redis.hget(keys.delivery(delivery_id.decode()), "body")
    assert len(orjson.loads(body or b"{}")["events"]) == 1000


def test_the_cap_is_a_setting(env: dict[str, str]) -> None:
    assert Settings.from_env(env).max_events_per_post == 1000
    assert Settings.from_env(dict(env, SVCGW_MAX_EVENTS_PER_POST="5")).max_events_per_post == 5
    for bad in ("0", "x", "1000000"):
        with pytest.raises(SettingsError, match="SVCGW_MAX_EVENTS_PER_POST"):
            Settings.from_env(dict(env, SVCGW_MAX_EVENTS_PER_POST=bad))


def test_a_token_revoked_after_the_early_check_is_still_refused(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)

    async def main() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            ingest = Ingest(client, keys, settings)
            await ingest.check_receiver(tenant.appid, tenant.receiver_token)
            with pytest.raises(UnknownReceiver):
                await ingest.check_receiver("we_other", tenant.receiver_token)
            redis.delete(keys.receiver_lookup(digest(tenant.receiver_token)))
            # Still remembered as valid by the early check, refused by the script.
            await ingest.check_receiver(tenant.appid, tenant.receiver_token)
            with pytest.raises(UnknownReceiver):
                await ingest.accept(tenant.appid, tenant.receiver_token, b'{"event_type":"Msg","events":[{}]}')
            # A fresh ingest asks Redis again.
            with pytest.raises(UnknownReceiver):
                await Ingest(client, keys, settings).check_receiver(tenant.appid, tenant.receiver_token)
        finally:
            await client.aclose()

    asyncio.run(main())
    assert queued(redis) == [] and redis.exists(keys.callback_log(tenant.appid)) == 0


def test_a_large_valid_post_is_parsed_off_the_event_loop(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    body = many_events(settings.max_events_per_post)
    pad = b'{"event_type":"Msg","pad":"' + b"x" * PARSE_IN_THREAD_BYTES + b'","events":[{"id":"p"}]}'
    threads: list[str] = []

    async def main() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        real = envelope.parse_post
        try:
            ingest = Ingest(client, keys, settings)
            for raw in (body, pad):
                with mock.patch(
                    "svcgw.intake.ingest.parse_post",
                    side_effect=lambda *a, **k: (threads.append(threading.current_thread().name), real(*a, **k))[1],
                ):
                    await ingest.accept(tenant.appid, tenant.receiver_token, raw)
        finally:
            await client.aclose()

    asyncio.run(main())
    main_thread = threading.main_thread().name
    assert len(body) < PARSE_IN_THREAD_BYTES < len(pad)
    assert threads[0] == main_thread and threads[1] != main_thread
    assert len(queued(redis)) == 2


# --- strict UTF-8, and event types that can be a header ---------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b'{"event_type":"Msg","events":[{"id":"a"}]}'.decode().encode("utf-16"),
        b'{"event_type":"Msg","events":[{"id":"a"}]}'.decode().encode("utf-32"),
        b'{"event_type":"\\ud800","events":[{"id":"a"}]}',
        b'{"event_type":"Msg","events":[{"id":"\\udc00"}]}',
    ],
)
def test_text_that_is_not_strict_utf8_is_400_and_stores_nothing(
    settings: Settings, server: str, redis: Redis, body: bytes
) -> None:
    tenant = provision(settings)
    answer = post(tenant.receiver_url(server), body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == -400 and answer.json()["data"] is None
    assert answer.json()["message"].startswith("the body is not UTF-8 JSON")
    assert queued(redis) == [] and redis.exists(keys.callback_log(tenant.appid)) == 0


@pytest.mark.parametrize("event_type", ["Msg\r\nX-Injected: 1", "Msg\n", "caf\u00e9", "a\x7f"])
def test_an_event_type_that_cannot_be_a_header_is_422_and_stores_nothing(
    settings: Settings, server: str, redis: Redis, event_type: str
) -> None:
    tenant = provision(settings)
    answer = post(tenant.receiver_url(server), orjson.dumps({"event_type": event_type, "events": [{"id": "a"}]}))
    assert answer.status_code == 422
    assert answer.json() == {
        "code": -422,
        "message": "event_type must be printable ASCII (0x20 to 0x7E), without control characters",
        "data": None,
    }
    assert queued(redis) == [] and redis.exists(keys.callback_log(tenant.appid)) == 0
    assert redis.keys("svcgw:dd:*") == []


def test_the_logs_expiry_is_renewed_by_the_first_post_of_each_minute(settings: Settings, redis: Redis) -> None:
    """It outlives the last post by the retention, with one EXPIRE a minute rather than one a post."""
    tenant = provision(settings)
    log = keys.callback_log(tenant.appid)
    minute = 60 * (int(time.time()) // 60 + 1)  # the start of a minute to come: every post below is in order
    moments = iter([minute + 1.0, minute + 59.0, minute + 60.0])

    async def main() -> list[tuple[int, int]]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            ingest = Ingest(client, keys, settings, clock=lambda: next(moments))
            answers = []
            for n in range(3):
                body = b'{"event_type":"Msg","events":[{"id":"%d"}]}' % n
                accepted = (await ingest.accept(tenant.appid, tenant.receiver_token, body)).accepted
                answers.append((accepted, redis.ttl(log)))
                redis.expire(log, 1000)  # as if long ago: only a renewal sets it back
            return answers
        finally:
            await client.aclose()

    (first, first_ttl), (second, second_ttl), (third, third_ttl) = asyncio.run(main())
    assert [first, second, third] == [1, 1, 1]
    renewed = settings.log_retention + 60
    assert renewed - 5 < first_ttl <= renewed  # the first post of the log
    assert second_ttl <= 1000  # the same minute: not renewed
    assert renewed - 5 < third_ttl <= renewed  # the next minute


def test_posts_of_one_turn_are_stored_together_each_with_its_own_answer(settings: Settings, redis: Redis) -> None:
    """Concurrent posts share a pipeline (svcgw.storage.scriptbatch): each is still stored, or refused, alone."""
    tenant, other = provision(settings), provision(settings)

    async def main() -> list[IngestResult | BaseException]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            ingest = Ingest(client, keys, settings)
            posts = [(tenant, b'{"event_type":"Msg","events":[{"id":"c%d"}]}' % (n % 15)) for n in range(20)]
            posts.append((other, b'{"event_type":"Msg","events":[{"id":"c0"}]}'))  # another instance's c0
            calls = [ingest.accept(who.appid, who.receiver_token, body) for who, body in posts]
            calls.append(ingest.accept(tenant.appid, tenant.receiver_token + "x", posts[0][1]))
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.aclose()

    *stored, unknown = asyncio.run(main())
    assert isinstance(unknown, UnknownReceiver)
    counts = [(result.accepted, result.duplicates) for result in stored if isinstance(result, IngestResult)]
    assert sorted(counts) == [(0, 1)] * 5 + [(1, 0)] * 16
    assert len(queued(redis)) == 16 and len(redis.xrange(keys.callback_log(tenant.appid))) == 20
