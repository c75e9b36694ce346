"""The claim: ids popped and leased, then read and started under keys named from them (worker.claim)."""

from __future__ import annotations

from typing import Any

from redis import Redis

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
