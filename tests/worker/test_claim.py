"""The claim: ids popped and leased, then read and started under keys named from them (worker.claim)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis import Redis

from svcgw import keys
from svcgw.settings import Settings
from svcgw.store import Scope, Store
from tests.conftest import provision, with_store
from tests.svcgw.test_deadletters import ingest
from tests.worker.support import with_queue
from tests.worker.test_queue import status
from worker.queue import DeliveryQueue


def _default_callback(settings: Settings, account: str, url: str) -> None:
    async def action(store: Store) -> None:
        await store.set_callback(Scope(account=account), url)

    with_store(settings, action)


def test_a_claim_reads_the_account_default_of_the_jobs_own_account_whatever_it_remembered(
    settings: Settings, redis: Redis
) -> None:
    # The read names the account's callback hash from what the queue remembers of the instance;
    # the job's own fields decide, so a wrong memory costs a second read, never another's address.
    tenant, other = provision(settings), provision(settings)
    _default_callback(settings, tenant.account, "http://127.0.0.1:8081/own")
    _default_callback(settings, other.account, "http://127.0.0.1:8082/other")
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')

    async def misremembering(queue: DeliveryQueue) -> tuple[list[Any], dict[str, str]]:
        queue._claimer._accounts[tenant.appid] = other.account
        return await queue.claim_batch(10, "engine"), dict(queue._claimer._accounts)

    (claimed,), remembered = with_queue(settings, misremembering)
    assert claimed.delivery_id == delivery_id
    assert claimed.own == {} and claimed.default["url"] == "http://127.0.0.1:8081/own"
    assert remembered[tenant.appid] == tenant.account
    assert status(redis, delivery_id) == "started"


def test_a_job_is_deferred_for_its_own_account_being_busy_not_for_a_misremembered_one(
    settings: Settings, redis: Redis
) -> None:
    # A job named for a busy account is read no further than its owner: when that owner is
    # another account, it is named again and started, not deferred for someone else's load.
    tenant, busy = provision(settings), provision(settings)
    _default_callback(settings, tenant.account, "http://127.0.0.1:8081/own")
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"b1"}]}')
    later = time.time() + 30

    async def misremembering(queue: DeliveryQueue, remembered: str, busy_account: str) -> list[Any]:
        queue._claimer._accounts[tenant.appid] = remembered
        return await queue.claim_batch(10, "engine", {}, {busy_account: later})

    (claimed,) = with_queue(settings, lambda queue: misremembering(queue, busy.account, busy.account))
    assert claimed.delivery_id == delivery_id and claimed.default["url"] == "http://127.0.0.1:8081/own"
    assert claimed.fields["body"] and status(redis, delivery_id) == "started"

    # Its own account busy, remembered as another: deferred all the same.
    again = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"b2"}]}')
    assert with_queue(settings, lambda queue: misremembering(queue, busy.account, tenant.account)) == []
    assert redis.zscore(keys.rq_scheduled(settings.queue_name), again) == pytest.approx(later)
    assert status(redis, again) == "scheduled"


def test_a_job_whose_lease_went_before_its_read_is_not_started(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:8081/hook")
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')

    async def outrun(queue: DeliveryQueue) -> list[Any]:
        owners = queue._claimer._owners

        async def lease_lost(ids: Any) -> Any:
            # Between the two scripts, the lease ran out and another worker took the job.
            await queue.redis.zrem(queue.inflight_key, *ids)
            return await owners(ids)

        queue._claimer._owners = lease_lost  # type: ignore[method-assign]
        return await queue.claim_batch(10, "engine")

    assert with_queue(settings, outrun) == []
    assert status(redis, delivery_id) == "queued"  # not marked started by a worker that does not hold it
