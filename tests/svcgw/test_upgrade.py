"""An upgrade in place: deliveries written by the version before deliveries were named by their posts keep working."""

from __future__ import annotations

import time

import orjson
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.delivery.queueing import queue_delivery
from svcgw.deliveryid import new_delivery_id
from svcgw.storage import renames
from svcgw.storage.keys import PLAIN as keys
from tests import support_oldlayout as old
from tests.conftest import provision
from tests.support import Sink, is_delivered, service_chain, wait_for
from tests.svcgw.delivery.test_deadletters import ingest, list_dead, replay
from tests.svcgw.delivery.test_listing import listed, shown
from tests.worker.test_engine import Running


def test_pending_retrying_delivered_and_dead_deliveries_of_before_are_delivered_and_shown(
    settings: Settings, redis: Redis, sink: Sink
) -> None:
    tenant = provision(settings, url=sink.url)
    pending = old.post(redis, settings, tenant, ["u-pending"])
    retried = old.post(redis, settings, tenant, ["u-retrying"])
    old.retrying(redis, settings, retried, due=time.time())
    done = old.post(redis, settings, tenant, ["u-delivered"])
    old.delivered(redis, settings, done, ["u-delivered"])
    died = old.post(redis, settings, tenant, ["u-dead"])
    old.dead(redis, settings, tenant, died)

    # The new version: a post of its own in the same log, and a worker.
    fresh = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"u-new"}]}')
    assert not fresh.startswith("dlv_")
    states = [(fresh, "pending"), (died, "dead"), (done, "delivered"), (retried, "retrying"), (pending, "pending")]
    assert [(d.id, d.state) for d in listed(settings, tenant.appid).deliveries] == states
    # Its log and dead index of before carry the instance's tag now (svcgw.storage.renames).
    assert not any(redis.exists(name) for name in renames.untagged_instance_keys(tenant.appid))
    assert [d.id for d in list_dead(settings, appid=tenant.appid)] == [died]
    with Running(settings):
        wait_for(lambda: all(is_delivered(redis, d) for d in (pending, retried, fresh)), timeout=20,
                 what="the pending and retrying deliveries of before, and the new one")  # fmt: skip
        assert [r.status for r in replay(settings, ids=[died])] == ["replayed"]
        wait_for(lambda: is_delivered(redis, died), timeout=20, what="the replayed dead letter of before")
    sent = [p.headers["x-svc-delivery-id"] for p in sink.posts()]
    assert sorted(sent) == sorted([pending, retried, fresh, died])  # each once, under its own id

    page = listed(settings, tenant.appid)
    assert [(d.id, d.state) for d in page.deliveries] == [
        (delivery_id, "delivered") for delivery_id in (fresh, died, done, retried, pending)
    ]
    assert [d.event_ids for d in page.deliveries] == [("u-new",), ("u-dead",), ("u-delivered",), ("u-retrying",),
                                                      ("u-pending",)]  # fmt: skip
    for listed_one in page.deliveries:
        assert shown(settings, listed_one.id).as_dict() == listed_one.as_dict()
    # Delivered before the upgrade, or after attempts of before: every attempt in full, as before.
    assert [(a.status, a.response) for a in shown(settings, done).attempts] == [(200, "answer before the upgrade")]
    assert [a.status for a in shown(settings, retried).attempts] == [503, 200]
    assert [a.status for a in shown(settings, died).attempts] == [500, 200]
    # The new one keeps its bare outcome only.
    assert [(a.status, a.response) for a in shown(settings, fresh).attempts] == [(200, "")]
    assert not redis.exists(keys.rq.job(fresh))

    # Their event ids are still refused as repeats for the rest of their window.
    again = b'{"event_type":"Msg","events":[{"id":"u-pending"},{"id":"u-dead"},{"id":"u-new"},{"id":"u-other"}]}'
    assert ingest(settings, tenant, again)
    assert shown(settings, listed(settings, tenant.appid).deliveries[0].id).event_ids == ("u-other",)


def test_service_events_of_before_keep_their_order_and_seq_under_the_tagged_names(
    settings: Settings, redis: Redis, sink: Sink
) -> None:
    tenant = provision(settings, url=sink.url)
    offline = old.service_event(redis, settings, tenant, "InstanceOffline")
    recovered = old.service_event(redis, settings, tenant, "InstanceRecovered")  # deferred behind it
    assert redis.llen(renames.untagged_instance_keys(tenant.appid)[2]) == 2

    ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"u-after"}]}')  # the first start of the new version
    assert redis.lrange(keys.service_events(tenant.appid), 0, -1) == [offline.encode(), recovered.encode()]
    with redis.pipeline(transaction=True) as pipe:
        later = new_delivery_id()
        queue_delivery(pipe, keys, settings, appid=tenant.appid, account=tenant.account, event_type="InstanceOffline",
                       events=[{"id": "after"}], delivery_id=later, now=time.time(),
                       chain=service_chain(redis, tenant.appid))  # fmt: skip
        (first_seq,) = pipe.execute()
    assert first_seq == 3  # the seq of before goes on
    with Running(settings):
        wait_for(lambda: all(is_delivered(redis, d) for d in (offline, recovered, later)), timeout=20,
                 what="the service events of before, then the new one")  # fmt: skip
    bodies = [(p.headers["x-svc-delivery-id"], orjson.loads(p.body)) for p in sink.posts()]
    served = [(sent, body["events"][0]["seq"]) for sent, body in bodies if body["event_type"] != "Msg"]
    assert served == [(offline, 1), (recovered, 2), (later, 3)]
    assert redis.llen(keys.service_events(tenant.appid)) == 0
