"""The whole path, with real processes: receiver → Redis → worker → HTTP sink."""

from __future__ import annotations

import time

import httpx
import orjson
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, provision, with_store
from tests.support import Process, Received, Sink, ThreadedWorker, attempt_records, is_delivered, start_server, wait_for
from tests.worker.support import failing_first, flip, kind, started

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow


def independent_signature(secret: str, timestamp: str, body: bytes) -> str:
    """The spec's rule, computed with another HMAC implementation than the service's."""
    mac = crypto_hmac.HMAC(secret.encode("utf-8"), hashes.SHA256())
    mac.update(timestamp.encode("ascii") + b"." + body)
    return mac.finalize().hex()


def secret_of(settings: Settings, tenant: Tenant) -> str:
    async def action(store: Store) -> str:
        config = await store.get_callback(Scope(appid=tenant.appid))
        assert config.secret
        return config.secret

    return with_store(settings, action)


def post_events(server: str, tenant: Tenant, body: bytes) -> None:
    answer = httpx.post(tenant.receiver_url(server), content=body, timeout=10)
    assert answer.status_code == 200, answer.text


def test_signed_delivery_with_bearer_and_exact_big_integers(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink
) -> None:
    tenant = provision(settings, url=sink.url, bearer="customer-token-1")
    body = b'{"event_type":"Msg","events":[{"id":"m1","roomId":1688850000000000000123456,"n":1e2,"t":"\\u4f60"}]}'
    post_events(server, tenant, body)

    (received,) = wait_for(sink.posts, what="the delivery")
    expected = (
        b'{"appid":"' + tenant.appid.encode() + b'","event_type":"Msg","events":'
        b'[{"id":"m1","roomId":1688850000000000000123456,"n":1e2,"t":"\\u4f60"}]}'
    )
    assert received.body == expected
    headers = received.headers
    assert headers["content-type"] == "application/json"
    assert headers["authorization"] == "Bearer customer-token-1"
    assert abs(int(headers["x-svc-timestamp"]) - time.time()) < 30
    assert headers["x-svc-signature"] == independent_signature(
        secret_of(settings, tenant), headers["x-svc-timestamp"], received.body
    )
    assert headers["x-svc-delivery-id"].startswith(tenant.appid + "-")  # named by its post (svcgw.deliveryid)
    assert orjson.loads(received.body)["appid"] == tenant.appid


def test_no_bearer_header_without_a_token(settings: Settings, server: str, worker: ThreadedWorker, sink: Sink) -> None:
    tenant = provision(settings, url=sink.url)
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"1"}]}')
    (received,) = wait_for(sink.posts, what="the delivery")
    assert "authorization" not in received.headers


def test_account_default_is_used_when_the_instance_has_no_address(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink
) -> None:
    tenant = provision(settings)

    async def action(store: Store) -> None:
        await store.set_callback(Scope(account=tenant.account), sink.url, bearer_token="acct-token")

    with_store(settings, action)
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"1"}]}')
    (received,) = wait_for(sink.posts, what="the delivery")
    assert received.headers["authorization"] == "Bearer acct-token"

    async def account_secret(store: Store) -> str:
        return (await store.get_callback(Scope(account=tenant.account))).secret or ""

    secret = with_store(settings, account_secret)
    assert received.headers["x-svc-signature"] == independent_signature(
        secret, received.headers["x-svc-timestamp"], received.body
    )


def test_duplicates_posted_twice_are_forwarded_once(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink, redis: Redis
) -> None:
    tenant = provision(settings, url=sink.url)
    body = b'{"event_type":"Msg","events":[{"id":"dup-1"},{"id":"dup-2"}]}'
    post_events(server, tenant, body)
    post_events(server, tenant, body)
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"after"}]}')
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"dup-1"},{"id":"new-1"}]}')  # one repeat
    wait_for(lambda: len(sink.posts()) >= 3, what="three deliveries")
    ids = [e["id"] for p in sink.posts() for e in orjson.loads(p.body)["events"]]
    assert sorted(ids) == ["after", "dup-1", "dup-2", "new-1"]
    # Delivered, each keeps a bare outcome; the event ids that went only where its post had a repeat.
    outcomes = wait_for(lambda: len(out := redis.xrange(keys.outcomes(tenant.appid))) == 3 and out, what="3 outcomes")
    assert [orjson.loads(fields[b"i"]) for _, fields in outcomes if b"i" in fields] == [["new-1"]]


def _dead(redis: Redis) -> list[bytes]:
    return redis.zrangebyscore(keys.rq.failed("svcgw"), time.time(), "+inf")


def test_failing_sink_retries_on_schedule_then_dead_letter_then_replay(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink, redis: Redis
) -> None:
    sink.set(status=503)
    tenant = provision(settings, url=sink.url)
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"r1"}]}')

    dead = wait_for(lambda: _dead(redis), timeout=20, what="the dead letter")
    attempts = sink.posts()
    assert len(attempts) == 1 + len(settings.retry_schedule)
    assert len({p.headers["x-svc-delivery-id"] for p in attempts}) == 1
    assert [int(p.headers["x-svc-attempt"]) for p in attempts] == list(range(1, 8))

    delivery_id = dead[0].decode()
    history = attempt_records(redis, delivery_id)
    assert len(history) == 7
    # Each retry begins no sooner than its delay after the attempt before it ended, read from the
    # worker's own records (``at`` to the millisecond); and soon after, not left behind.
    ends = [a["at"] + a["duration_ms"] / 1000 for a in history]
    gaps = [b["at"] - end for end, b in zip(ends, history[1:])]
    assert all(gap >= 0.2 - 0.002 for gap in gaps), gaps
    assert all(gap < 5.0 for gap in gaps), gaps
    assert redis.exists(keys.delivery_attempts(delivery_id)) == 0  # in the delivery hash, no list of their own
    last = history[-1]
    assert last["status"] == 503 and last["error"] == "HTTP 503" and last["duration_ms"] >= 0
    assert redis.hget(keys.delivery(delivery_id), "state") == b"dead"

    # Replay while the sink still fails: one fresh attempt, then back to the dead letters.
    from tests.svcgw.delivery.test_deadletters import replay

    assert [r.status for r in replay(settings, ids=[delivery_id])] == ["replayed"]
    wait_for(lambda: len(sink.posts()) == 8 and _dead(redis), what="the failed replay")
    assert [a["attempt"] for a in attempt_records(redis, delivery_id)] == list(range(1, 9))

    sink.set(status=200)
    assert [r.status for r in replay(settings, ids=[delivery_id])] == ["replayed"]
    wait_for(lambda: is_delivered(redis, delivery_id), what="the replay")
    assert len(sink.posts()) == 9 and _dead(redis) == []
    assert redis.exists(keys.rq.job(delivery_id)) == 0


def test_rotated_secret_signs_the_next_attempt(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink
) -> None:
    sink.set(status=500)
    tenant = provision(settings, url=sink.url)
    old_secret = secret_of(settings, tenant)
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"rot"}]}')
    first: Received = wait_for(sink.posts, what="the first attempt")[0]
    assert first.headers["x-svc-signature"] == independent_signature(
        old_secret, first.headers["x-svc-timestamp"], first.body
    )

    async def rotate(store: Store) -> str:
        return (await store.rotate_secret(Scope(appid=tenant.appid))).secret or ""

    new_secret = with_store(settings, rotate)
    assert new_secret != old_secret
    count = len(sink.posts())
    sink.set(status=200)
    wait_for(lambda: len(sink.posts()) > count and sink.posts()[-1].at > 0, what="the retry")
    wait_for(lambda: any(independent_signature(new_secret, p.headers["x-svc-timestamp"], p.body)
                         == p.headers["x-svc-signature"] for p in sink.posts()), what="a newly signed attempt")
    last = sink.posts()[-1]
    assert last.headers["x-svc-signature"] == independent_signature(
        new_secret, last.headers["x-svc-timestamp"], last.body
    )


def test_redirect_is_a_failure_and_is_not_followed(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink, redis: Redis
) -> None:
    other = Sink().start()
    try:
        sink.set(status=302, location=other.url)
        tenant = provision(settings, url=sink.url)
        post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"redir"}]}')
        wait_for(lambda: len(sink.posts()) >= 2, what="a retry after the redirect")
        assert other.posts() == []
        delivery_id = sink.posts()[0].headers["x-svc-delivery-id"]
        first = attempt_records(redis, delivery_id)[0]
        assert first["ok"] is False and first["status"] == 302 and "redirect" in first["error"]
    finally:
        other.stop()


def test_slow_sink_times_out_and_is_retried(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink, redis: Redis
) -> None:
    sink.set(delay=settings.delivery_timeout + 1)
    tenant = provision(settings, url=sink.url)
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"slow"}]}')
    posted = wait_for(sink.posts, what="the first attempt")
    delivery_id = posted[0].headers["x-svc-delivery-id"]
    attempt = wait_for(lambda: attempt_records(redis, delivery_id)[:1], timeout=15,
                       what="the timed-out attempt")[0]
    assert attempt["ok"] is False and "timed out" in attempt["error"]
    assert attempt["duration_ms"] >= settings.delivery_timeout * 1000 * 0.9
    sink.set(delay=0)
    wait_for(lambda: is_delivered(redis, delivery_id), timeout=20,
             what="delivery once the sink is fast again")
    # Delivered, only the bare outcome is left: the timeout's class, then the answer's status.
    assert not redis.exists(keys.delivery(delivery_id))
    ((_, outcome),) = redis.xrange(keys.outcomes(tenant.appid))
    assert [part.split(b":")[1] for part in outcome[b"o"].split(b",")] == [b"timeout", b"200"]
    assert sink.posts()[-1].body == sink.posts()[0].body


def test_no_address_is_a_failed_attempt_and_nothing_is_dropped(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink, redis: Redis
) -> None:
    tenant = provision(settings)
    post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"nowhere"}]}')
    dead = wait_for(lambda: _dead(redis), timeout=20, what="the dead letter")
    history = attempt_records(redis, dead[0].decode())
    assert len(history) == 7
    assert all(h["error"] == "no callback address configured" for h in history)


def test_loopback_destination_is_refused_at_connect_time_unless_allowed(
    env: dict[str, str], settings: Settings, server: str, sink: Sink, redis: Redis
) -> None:
    strict_env = dict(env, SVCGW_ALLOW_PRIVATE_DESTINATIONS="")
    strict = Process(["worker"], strict_env, "strict-worker").start()
    try:
        # The address was accepted when set (as with a name that later rebinds to loopback).
        tenant = provision(settings, url=sink.url.replace("127.0.0.1", "localhost"))
        post_events(server, tenant, b'{"event_type":"Msg","events":[{"id":"rebind"}]}')
        dead = wait_for(lambda: _dead(redis), timeout=20, what="the refused delivery")
        history = attempt_records(redis, dead[0].decode())
        assert all("destination refused" in h["error"] for h in history)
        assert sink.posts() == []
    finally:
        strict.stop()
    allowed = Process(["worker"], env, "allowed-worker").start()
    try:
        from tests.svcgw.delivery.test_deadletters import replay

        assert [r.status for r in replay(settings, ids=[dead[0].decode()])] == ["replayed"]
        wait_for(sink.posts, what="the delivery through the allow-list")
    finally:
        allowed.stop()


def test_callback_log_keeps_every_post_as_received(
    settings: Settings, server: str, redis: Redis
) -> None:
    tenant = provision(settings)
    bodies = [b'{"event_type":"Msg","events":[{"id":"%d"}]}' % i for i in range(3)]
    for body in bodies:
        post_events(server, tenant, body)
    post_events(server, tenant, bodies[0])
    entries = redis.xrange(keys.callback_log(tenant.appid))
    assert [e[1][b"body"] for e in entries] == [*bodies, bodies[0]]
    # The entries name their deliveries themselves (svcgw.deliveryid) and hold the post alone,
    # but for the repeat's counts (accepted:duplicates): it made no delivery.
    assert [fields for _, fields in entries[:3]] == [{b"body": body} for body in bodies]
    assert entries[-1][1] == {b"body": bodies[0], b"x": b"0:1"}




# --- the order of service events ------------------------------------------------------
def test_service_events_of_an_instance_arrive_in_order_under_retries(
    env: dict[str, str], settings: Settings, sink: Sink, redis: Redis
) -> None:
    sink.rule = failing_first(3)
    tenant = started(settings, sink.url)
    ids = [flip(settings, tenant.appid, offline=down) for down in (True, False, True)]
    worker = Process(["worker"], env, "worker").start()
    try:
        wait_for(lambda: all(is_delivered(redis, d) for d in ids), timeout=30,
                 what="the three service events to be delivered")
    finally:
        worker.stop()
    posts = sink.posts()
    # Nothing of the instance was attempted while the first was retrying.
    assert [kind(p) for p in posts] == ["InstanceOffline"] * 4 + ["InstanceRecovered", "InstanceOffline"]
    assert [p.headers["x-svc-delivery-id"] for p in posts] == [ids[0]] * 4 + ids[1:]
    assert [orjson.loads(p.body)["events"][0]["seq"] for p in posts] == [1, 1, 1, 1, 2, 3]
    assert redis.llen(keys.service_events(tenant.appid)) == 0


def test_customer_events_are_not_held_back_by_a_retrying_service_event(
    env: dict[str, str], settings: Settings, sink: Sink, redis: Redis
) -> None:
    # The service event fails twice, then waits a minute for its next attempt.
    slow_retries = dict(env, SVCGW_RETRY_SCHEDULE="0.2,60")
    sink.rule = failing_first(100)
    tenant = started(settings, sink.url)
    offline = flip(settings, tenant.appid, offline=True)
    recovered = flip(settings, tenant.appid, offline=False)
    server, base = start_server(slow_retries)
    worker = Process(["worker"], slow_retries, "worker").start()
    try:
        wait_for(lambda: redis.hget(keys.delivery(offline), "failures") == b"2", timeout=20,
                 what="the offline event to fail twice")
        post_events(base, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')
        wait_for(lambda: any(kind(p) == "Msg" for p in sink.posts()), timeout=20, what="the message to be delivered")
        assert redis.hget(keys.delivery(offline), "state") == b"retrying"
        assert redis.hget(keys.delivery(recovered), "state") == b"queued"
        assert redis.hget(keys.rq.job(recovered), "status") == b"deferred"
        assert [kind(p) for p in sink.posts()] == ["InstanceOffline", "InstanceOffline", "Msg"]
    finally:
        worker.stop()
        server.stop()
