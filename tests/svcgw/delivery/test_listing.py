"""The deliveries read model: pure formatting, and the lists it reads from the index and the records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

import svcgw.delivery.queue as queue_module
from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import byid, listing
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.listing import Delivery, Page, build, event_ids, state_of
from svcgw.delivery.queue import DeliveryQueue, Finish
from svcgw.delivery.view import fanned_out
from svcgw.errors import Invalid, NotFound
from svcgw.intake.ingest import Ingest
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, provision
from tests.svcgw.delivery.fanout import fan_out
from tests.svcgw.delivery.test_deadletters import ingest
from tests.worker.support import claim, claim_batch, finish

T = TypeVar("T")


def call(settings: Settings, action: Callable[[AsyncRedis], Awaitable[T]]) -> T:
    async def go() -> T:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await action(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def listed(settings: Settings, appid: str, **filters: object) -> Page:
    return call(settings, lambda r: listing.list_deliveries(r, keys, settings, appid, **filters))


def shown(settings: Settings, delivery_id: str, account: str | None = None) -> Delivery:
    return call(settings, lambda r: byid.show(r, keys, settings, delivery_id, account=account))


def post(settings: Settings, tenant: Tenant, *ids: str, event_type: str = "Msg") -> str:
    events = ",".join(f'{{"id":"{i}","text":"hi"}}' for i in ids) or '{"text":"no id"}'
    return ingest(settings, tenant, f'{{"event_type":"{event_type}","events":[{events}]}}'.encode())


def fail_once(settings: Settings, delivery_id: str, appid: str, *, due_in: float = 600.0) -> None:
    """One failed attempt recorded through the queue's scripts, with a retry due later."""
    assert claim(settings, 1) == [delivery_id]
    attempt = Attempt(
        ok=False, at=time.time(), duration=0.25, status=503, error="HTTP 503", response="x" * 3000, destination="d"
    )
    assert finish(settings, Finish(delivery_id, appid, "retry", attempt.record(1), due=time.time() + due_in))


def deliver_now(settings: Settings, delivery_id: str, appid: str, number: int = 1, event_ids: bytes = b"") -> None:
    assert claim(settings, 1) == [delivery_id]
    attempt = Attempt(ok=True, at=time.time(), duration=0.01, status=200, response='{"ok":true}', destination="d")
    done = Finish(delivery_id, appid, "delivered", attempt.record(number), retention=3600, event_ids=event_ids)
    assert finish(settings, done)


# --- pure ---------------------------------------------------------------------------
def test_states_shown() -> None:
    assert [state_of(s) for s in ("queued", "retrying", "delivered", "dead", "", "odd")] == [
        "pending",
        "retrying",
        "delivered",
        "dead",
        "pending",
        "pending",
    ]


def test_event_ids_keep_big_integers_and_skip_events_without_one() -> None:
    body = b'{"appid":"a","event_type":"Msg","events":[{"id":123456789012345678901234},{"x":1},{"id":"m1"},{"id":""}]}'
    assert event_ids(body) == ("123456789012345678901234", "m1")
    assert event_ids(b"not json") == ()
    assert event_ids(None) == ()


def test_build_reads_the_next_attempt_from_the_registry_first() -> None:
    fields = {"appid": b"a", "account": b"acc", "event_type": b"Msg", "state": b"retrying", "next_at": b"100.5"}
    assert build("dlv_1", fields).next_attempt_at == 100.5
    assert build("dlv_1", fields, scheduled_at=200.0).next_attempt_at == 200.0
    delivered = build("dlv_1", {**fields, "state": b"delivered", "delivered_at": b"7"})
    assert delivered is not None and delivered.next_attempt_at is None and delivered.delivered_at == 7.0
    assert build("dlv_1", {"appid": None}) is None  # expired


def test_attempt_records_are_read_leniently() -> None:
    good = orjson.dumps({"attempt": 2, "at": 1.5, "ok": False, "status": 502, "error": "HTTP 502", "duration_ms": 3})
    delivery = build("dlv_1", {"appid": b"a", "state": b"retrying"}, [b"{broken", good])
    assert delivery is not None
    broken, second = delivery.attempts
    assert (broken.number, broken.error) == (1, "unreadable attempt record")
    assert (second.number, second.status, second.outcome, second.duration_ms) == (2, 502, "HTTP 502", 3.0)


def test_a_cursor_that_is_not_one_is_refused() -> None:
    for bad in ("", "x:dlv_1", "1.5:dlv_1", "nan", "12-", "-3", "1795319160000-0-1", "1" * 21 + "-0"):
        with pytest.raises(Invalid):
            listing.parse_cursor(bad)
    assert listing.parse_cursor(listing.cursor("1795319160000-3")) == ("1795319160000-3", 0)
    assert listing.parse_cursor(listing.cursor("1795319160000-3", 2)) == ("1795319160000-3", 2)
    assert listing.cursor("1795319160000-3", 2) == "1795319160000-3:2"


def test_a_log_entry_names_its_destination_deliveries_in_routing_order() -> None:
    assert fanned_out(b"dlv_a:dst_1 dlv_b:dst_2") == [("dlv_a", "dst_1"), ("dlv_b", "dst_2")]
    assert fanned_out(None) == [] and fanned_out("") == []
    assert fanned_out("dlv_a:dst_1  broken :dst_x dlv_c:") == [("dlv_a", "dst_1")]
    built = build("dlv_a", {"appid": b"a", "state": b"queued", "destination": b"dst_1"})
    assert built is not None and built.destination == "dst_1" and built.as_dict()["destination"] == "dst_1"
    primary = build("a-1-0", {"appid": b"a", "state": b"queued"})
    assert primary is not None and primary.destination is None and primary.as_dict()["destination"] is None


# --- against Redis -----------------------------------------------------------------------
def test_every_state_with_its_attempts_and_next_attempt(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivered = post(settings, tenant, "e1")
    deliver_now(settings, delivered, tenant.appid)
    retrying = post(settings, tenant, "e2", "e3", event_type="Offline")
    fail_once(settings, retrying, tenant.appid)
    pending = post(settings, tenant)

    page = listed(settings, tenant.appid)
    assert [d.id for d in page.deliveries] == [pending, retrying, delivered]
    assert page.next_before is None
    first, second, third = page.deliveries
    assert (first.state, first.event_ids, first.attempts, first.next_attempt_at) == ("pending", (), (), None)
    assert second.state == "retrying" and second.event_ids == ("e2", "e3") and second.event_type == "Offline"
    assert second.next_attempt_at is not None and second.next_attempt_at > time.time() + 500
    (attempt,) = second.attempts
    assert (attempt.status, attempt.error, attempt.duration_ms) == (503, "HTTP 503", 250.0)
    assert len(attempt.response.encode()) == 1024  # the answer's first 1 KB, no more
    assert third.state == "delivered" and third.delivered_at is not None and third.attempts[0].ok

    as_json = orjson.loads(orjson.dumps(page.as_dict()))
    assert as_json["deliveries"][1]["attempts"][0]["status"] == 503
    assert shown(settings, retrying).as_dict() == second.as_dict()


def test_filters_combine(settings: Settings) -> None:
    tenant = provision(settings)
    a = post(settings, tenant, "a1", event_type="Msg")
    b = post(settings, tenant, "b1", "needle", event_type="Msg")
    c = post(settings, tenant, "needle2", event_type="Other")
    fail_once(settings, a, tenant.appid)

    assert [d.id for d in listed(settings, tenant.appid, state="retrying").deliveries] == [a]
    assert [d.id for d in listed(settings, tenant.appid, state="pending").deliveries] == [c, b]
    assert [d.id for d in listed(settings, tenant.appid, event_type="Msg").deliveries] == [b, a]
    assert [d.id for d in listed(settings, tenant.appid, event_id="needle").deliveries] == [b]
    assert listed(settings, tenant.appid, event_id="needle", event_type="Other").deliveries == []
    with pytest.raises(Invalid):
        listed(settings, tenant.appid, state="lost")


def test_a_delivered_delivery_keeps_only_its_bare_outcome(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = post(settings, tenant, "m1", "needle")
    fail_once(settings, delivery_id, tenant.appid, due_in=0)
    call(settings, lambda r: DeliveryQueue(r, keys, settings.queue_name).promote_due())
    deliver_now(settings, delivery_id, tenant.appid, 2)
    other = post(settings, tenant, "m2")

    # Its records are gone; the stream holds each attempt's time, status and duration.
    assert not redis.exists(keys.delivery(delivery_id), keys.rq.job(delivery_id))
    ((_, fields),) = redis.xrange(keys.outcomes(tenant.appid))
    appid, entry = deliveryid.parse(delivery_id) or ("", "")
    assert appid == tenant.appid and b"i" not in fields
    assert fields[b"l"] == entry.removesuffix("-0").encode()  # the ms alone for sequence 0: an integer
    assert [part.split(b":")[1:] for part in fields[b"o"].split(b",")] == [[b"503", b"250"], [b"200", b"10"]]
    assert 0 < redis.ttl(keys.outcomes(tenant.appid)) <= settings.log_retention

    one = shown(settings, delivery_id)
    assert (one.state, one.event_ids, one.event_type, one.account) == ("delivered", ("m1", "needle"), "Msg",
                                                                        tenant.account)  # fmt: skip
    assert [(a.status, a.error, a.ok, a.duration_ms, a.response, a.destination) for a in one.attempts] == [
        (503, None, False, 250.0, "", None),
        (200, None, True, 10.0, "", None),
    ]
    assert one.received_at is not None and one.delivered_at is not None and one.delivered_at >= one.received_at
    page = listed(settings, tenant.appid)
    assert [(d.id, d.state, d.event_ids) for d in page.deliveries] == [
        (other, "pending", ("m2",)),
        (delivery_id, "delivered", ("m1", "needle")),
    ]
    assert page.deliveries[1].as_dict() == one.as_dict()
    assert [d.id for d in listed(settings, tenant.appid, event_id="needle").deliveries] == [delivery_id]
    assert [d.id for d in listed(settings, tenant.appid, state="delivered").deliveries] == [delivery_id]
    assert [d.id for d in listed(settings, tenant.appid, state="pending").deliveries] == [other]
    assert [d.id for d in listed(settings, tenant.appid, event_id="m2", state="pending").deliveries] == [other]
    with pytest.raises(NotFound):
        shown(settings, delivery_id, account=provision(settings).account)


def test_a_late_outcome_and_one_of_a_post_with_duplicates(
    settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = provision(settings)
    post(settings, tenant, "needle")
    claim(settings, 1)
    delivery_id = post(settings, tenant, "m1", "needle")  # needle is a repeat: only m1 goes
    monkeypatch.setattr(queue_module, "OUTCOME_WINDOW", -1)  # every outcome is late
    deliver_now(settings, delivery_id, tenant.appid, event_ids=b'["m1"]')

    assert not redis.exists(keys.outcomes(tenant.appid))
    (late,) = redis.keys(keys.late_outcomes(tenant.appid, 0).rsplit(":", 1)[0] + ":*")
    assert 0 < redis.ttl(late) <= 2 * settings.log_retention
    one = shown(settings, delivery_id)
    assert one.state == "delivered" and one.event_ids == ("m1",) and [a.status for a in one.attempts] == [200]
    assert listed(settings, tenant.appid, state="delivered").deliveries[0].as_dict() == one.as_dict()
    # A copy of its job whose lease ran out meanwhile fails later: nothing is left behind.
    failed = Attempt(ok=False, at=time.time(), duration=0.01, status=503, error="HTTP 503", destination="d")
    assert not finish(settings, Finish(delivery_id, tenant.appid, "retry", failed.record(2), due=time.time() + 60))
    assert not redis.exists(keys.rq.job(delivery_id)) and shown(settings, delivery_id).as_dict() == one.as_dict()
    assert not redis.zscore(keys.rq.scheduled(settings.queue_name), delivery_id)
    ok = Attempt(ok=True, at=time.time(), duration=0.01, status=200, response="", destination="d")
    assert not finish(settings, Finish(delivery_id, tenant.appid, "delivered", ok.record(2)))  # nor a second outcome
    assert not redis.exists(keys.rq.job(delivery_id), keys.outcomes(tenant.appid)) and redis.hlen(late) == 1


def test_pages_follow_each_other_without_gaps_or_repeats(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    ids = [post(settings, tenant, f"p{i}") for i in range(7)]
    repeat = b'{"event_type":"Msg","events":[{"id":"p1","text":"hi"}]}'  # a post without a delivery: not listed
    accepted = call(settings, lambda r: Ingest(r, keys, settings).accept(tenant.appid, tenant.receiver_token, repeat))
    assert accepted.delivery_id is None and accepted.duplicates == 1
    ids.append(post(settings, tenant, "p7"))
    seen: list[str] = []
    before = None
    for _ in range(10):
        page = listed(settings, tenant.appid, limit=2, before=before)
        seen += [d.id for d in page.deliveries]
        before = page.next_before
        if before is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == len(ids)


def test_the_list_is_the_callback_log_within_its_retention(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    old = post(settings, tenant, "old")
    stream = keys.callback_log(tenant.appid)
    # The same post logged a retention and a bit ago, as the log holds it until trimmed.
    ((_, fields),) = redis.xrange(stream)
    redis.delete(stream)
    redis.xadd(stream, fields, id=f"{int((time.time() - settings.log_retention - 5) * 1000)}-0")
    assert listed(settings, tenant.appid).deliveries == []  # out of the retention: not listed
    new = post(settings, tenant, "new")
    page = listed(settings, tenant.appid)
    assert [d.id for d in page.deliveries] == [new] and page.next_before is None
    assert not redis.keys(keys.prefix + "deliveries:*")  # no index of its own
    assert shown(settings, old).id == old  # still shown by id while its record lives


def test_other_accounts_see_nothing(settings: Settings) -> None:
    tenant = provision(settings)
    other = provision(settings)
    delivery_id = post(settings, tenant, "mine")
    with pytest.raises(NotFound) as instance:
        call(settings, lambda r: listing.list_deliveries(r, keys, settings, tenant.appid, account=other.account))
    with pytest.raises(NotFound) as delivery:
        shown(settings, delivery_id, account=other.account)
    assert (instance.value.what, delivery.value.what) == ("instance", "delivery")
    assert shown(settings, delivery_id, account=tenant.account).id == delivery_id
    with pytest.raises(NotFound):
        listed(settings, "we_nothing_here")
    with pytest.raises(NotFound):
        shown(settings, "dlv_000000000000000000000000")


def test_a_filter_that_matches_little_stops_after_a_bounded_scan(
    settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "SCAN_LIMIT", 3)
    monkeypatch.setattr(listing, "SCAN_CHUNK", 2)
    tenant = provision(settings)
    wanted = post(settings, tenant, "wanted")
    for i in range(5):
        post(settings, tenant, f"other{i}")
    page = listed(settings, tenant.appid, event_id="wanted")
    assert page.deliveries == [] and page.scanned == 3 and page.next_before is not None
    pages = [page]
    while pages[-1].next_before:
        pages.append(listed(settings, tenant.appid, event_id="wanted", before=pages[-1].next_before))
    assert [d.id for p in pages for d in p.deliveries] == [wanted]


def test_posts_that_made_no_delivery_list_as_an_empty_page(settings: Settings) -> None:
    tenant = provision(settings)

    async def empty_post(client: AsyncRedis) -> str | None:
        body = b'{"event_type":"Msg","events":[]}'
        return (await Ingest(client, keys, settings).accept(tenant.appid, tenant.receiver_token, body)).delivery_id

    assert call(settings, empty_post) is None  # logged, with no delivery
    page = listed(settings, tenant.appid)
    assert page.deliveries == [] and page.next_before is None


# --- deliveries to further destinations -------------------------------------------------
def fail_one_of(settings: Settings, delivery_id: str, appid: str, queued: int) -> None:
    """``delivery_id``, among the ``queued`` jobs at the head of the queue, fails once (the others are claimed)."""
    assert delivery_id in [c.delivery_id for c in claim_batch(settings, queued)]
    attempt = Attempt(ok=False, at=time.time(), duration=0.1, status=502, error="HTTP 502", destination="d")
    assert finish(settings, Finish(delivery_id, appid, "retry", attempt.record(1), due=time.time() + 600))


def test_a_post_lists_its_primary_delivery_then_each_destination_delivery(settings: Settings) -> None:
    tenant = provision(settings)
    first = post(settings, tenant, "e1")
    fanned = post(settings, tenant, "e2", "needle")
    to_a, to_b = fan_out(settings, fanned, ["dst_aaaa", "dst_bbbb"])
    last = post(settings, tenant, "e3")
    fail_one_of(settings, to_b, tenant.appid, 5)

    page = listed(settings, tenant.appid)
    assert [(d.id, d.destination) for d in page.deliveries] == [
        (last, None),
        (fanned, None),
        (to_a, "dst_aaaa"),
        (to_b, "dst_bbbb"),
        (first, None),
    ]
    shown_b = shown(settings, to_b)
    assert shown_b.destination == "dst_bbbb" and shown_b.state == "retrying" and shown_b.event_ids == ("e2", "needle")
    assert [a.status for a in shown_b.attempts] == [502] and shown_b.next_attempt_at is not None
    assert page.deliveries[3].as_dict() == shown_b.as_dict() and shown_b.as_dict()["destination"] == "dst_bbbb"
    assert shown(settings, fanned).destination is None

    def ids(**filters: object) -> list[str]:
        return [d.id for d in listed(settings, tenant.appid, **filters).deliveries]

    assert ids(destination="dst_aaaa") == [to_a]
    assert ids(destination="primary") == [last, fanned, first]
    assert ids(destination="dst_bbbb", state="retrying") == [to_b]
    assert ids(destination="dst_aaaa", state="retrying") == []
    assert ids(state="retrying") == [to_b]
    assert ids(event_id="needle") == [fanned, to_a, to_b]
    assert ids(destination="dst_cccc") == []
    for bad in ("dst_", "nobody", "dst_a b"):
        with pytest.raises(Invalid):
            listed(settings, tenant.appid, destination=bad)
    with pytest.raises(NotFound):
        shown(settings, to_a, account=provision(settings).account)


def test_pages_end_within_a_posts_deliveries_and_go_on_from_there(settings: Settings) -> None:
    tenant = provision(settings)
    older = post(settings, tenant, "o1")
    fanned = post(settings, tenant, "f1")
    to_a, to_b, to_c = fan_out(settings, fanned, ["dst_aaaa", "dst_bbbb", "dst_cccc"])
    newer = post(settings, tenant, "n1")
    expected = [newer, fanned, to_a, to_b, to_c, older]

    for limit in (1, 2, 3, 4):
        seen: list[str] = []
        cursors: list[str] = []
        before = None
        for _ in range(10):
            page = listed(settings, tenant.appid, limit=limit, before=before)
            seen += [d.id for d in page.deliveries]
            before = page.next_before
            if before is None:
                break
            cursors.append(before)
        assert seen == expected, limit
    assert cursors[0].endswith(":3")  # limit 4: newer, fanned, to_a, to_b; to_c next
    only_b = listed(settings, tenant.appid, destination="dst_bbbb", limit=1)
    assert [d.id for d in only_b.deliveries] == [to_b]
    rest = listed(settings, tenant.appid, destination="dst_bbbb", limit=1, before=only_b.next_before)
    assert rest.deliveries == [] and rest.next_before is None


DST_A, DST_B = "dst_" + "a" * 16, "dst_" + "b" * 16


def test_destination_deliveries_named_by_their_post_keep_a_bare_outcome_of_their_own(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    fanned = post(settings, tenant, "e1", "needle")
    to_a, to_b = fan_out(settings, fanned, [DST_A, DST_B], named=True)
    assert (to_a, to_b) == (f"{fanned}_{'a' * 16}", f"{fanned}_{'b' * 16}")
    deliver_now(settings, fanned, tenant.appid)
    assert claim(settings, 1) == [to_a]
    answered = Attempt(ok=True, at=time.time(), duration=0.01, status=202, destination="a")
    assert finish(settings, Finish(to_a, tenant.appid, "delivered", answered.record(1), retention=3600))
    fail_once(settings, to_b, tenant.appid)

    # Delivered, the primary's and A's records are gone; each left a bare outcome, A's naming its destination.
    assert not redis.exists(keys.rq.job(fanned), keys.rq.job(to_a)) and redis.exists(keys.rq.job(to_b))
    outcomes = [fields for _, fields in redis.xrange(keys.outcomes(tenant.appid))]
    assert [fields.get(b"d") for fields in outcomes] == [None, b"a" * 16]
    assert len({fields[b"l"] for fields in outcomes}) == 1  # the same post

    page = listed(settings, tenant.appid)
    assert [(d.id, d.destination, d.state) for d in page.deliveries] == [
        (fanned, None, "delivered"),
        (to_a, DST_A, "delivered"),
        (to_b, DST_B, "retrying"),
    ]
    one = shown(settings, to_a)
    assert (one.state, one.destination, one.event_ids) == ("delivered", DST_A, ("e1", "needle"))
    assert [a.status for a in one.attempts] == [202] and page.deliveries[1].as_dict() == one.as_dict()
    assert [a.status for a in shown(settings, fanned).attempts] == [200]  # the primary's own outcome

    def ids(**filters: object) -> list[str]:
        return [d.id for d in listed(settings, tenant.appid, **filters).deliveries]

    assert ids(state="delivered") == [fanned, to_a]
    assert ids(destination=DST_A, state="delivered") == [to_a] and ids(destination=DST_B) == [to_b]
    assert ids(event_id="needle", state="delivered") == [fanned, to_a]
    with pytest.raises(NotFound):
        shown(settings, to_a, account=provision(settings).account)
    with pytest.raises(NotFound):  # an id of the form whose destination the post did not go to
        shown(settings, f"{fanned}_{'c' * 16}")


def test_late_outcomes_of_a_post_and_its_destination_are_told_apart(
    settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = provision(settings)
    fanned = post(settings, tenant, "late1")
    (to_a,) = fan_out(settings, fanned, [DST_A], named=True)
    monkeypatch.setattr(queue_module, "OUTCOME_WINDOW", -1)  # every outcome is late
    deliver_now(settings, fanned, tenant.appid)
    assert claim(settings, 1) == [to_a]
    answered = Attempt(ok=True, at=time.time(), duration=0.01, status=202, destination="a")
    assert finish(settings, Finish(to_a, tenant.appid, "delivered", answered.record(1), retention=3600))

    assert not redis.exists(keys.outcomes(tenant.appid))
    (late,) = redis.keys(keys.late_outcomes(tenant.appid, 0).rsplit(":", 1)[0] + ":*")
    entry = fanned.rsplit("-", 2)
    entry_id = f"{entry[1]}-{entry[2]}"
    assert sorted(redis.hkeys(late)) == [entry_id.encode(), f"{entry_id}_{'a' * 16}".encode()]
    assert [a.status for a in shown(settings, fanned).attempts] == [200]
    assert [a.status for a in shown(settings, to_a).attempts] == [202] and shown(settings, to_a).destination == DST_A
    assert [(d.id, d.state) for d in listed(settings, tenant.appid).deliveries] == [
        (fanned, "delivered"),
        (to_a, "delivered"),
    ]


class _DeliveredBetweenReads:
    """A client that lets ``hook`` run before the listing's second pipeline: its second read of the records."""

    def __init__(self, client: AsyncRedis, hook: Callable[[], None]) -> None:
        self._client, self._hook, self._pipelines = client, hook, 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def pipeline(self, *args: object, **kwargs: object) -> object:
        self._pipelines += 1
        real: Any = self._client.pipeline(*args, **kwargs)
        hook = self._hook if self._pipelines == 2 else None

        class Entered:
            async def __aenter__(self) -> object:
                if hook is not None:
                    await asyncio.to_thread(hook)
                return await real.__aenter__()

            async def __aexit__(self, *exc: object) -> None:
                await real.__aexit__(*exc)

        return Entered()


def test_a_delivery_delivered_between_the_two_reads_is_shown_delivered_with_its_events(settings: Settings) -> None:
    tenant = provision(settings)
    delivery_id = post(settings, tenant, "e1", "e2")

    async def action(client: AsyncRedis) -> Page:
        racing = _DeliveredBetweenReads(client, lambda: deliver_now(settings, delivery_id, tenant.appid))
        return await listing.list_deliveries(cast(AsyncRedis, racing), keys, settings, tenant.appid)

    page = call(settings, action)
    # Read pending at first, its record gone by the second read: what is kept of it now, not an empty shell.
    [delivery] = page.deliveries
    assert delivery.id == delivery_id and delivery.state == "delivered"
    assert delivery.event_ids == ("e1", "e2")
    assert [a.status for a in delivery.attempts] == [200]
