"""``svcgw shards`` on one Redis, placement in the registry, and the roles' refusal of a Cluster."""

from __future__ import annotations

import httpx
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.config.shards import Shard
from svcgw.digests import digest
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import ok, svcgw
from tests.conftest import with_store
from tests.support import Process, free_port, wait_answering, wait_for


def test_one_redis_is_one_shard_with_its_instances_memory_queue_and_health(
    env: dict[str, str], settings: Settings, redis: Redis
) -> None:
    async def action(store: Store) -> None:
        account = await store.create_account("shards")
        for n in range(3):
            await store.register_instance(f"we_shards{n}", account.id)

    with_store(settings, action)
    redis.rpush("rq:queue:svcgw", "x")
    (row,) = ok(env, "shards")
    assert row["index"] == 0 and row["name"] == env["SVCGW_REDIS_URL"] and row["instances"] == 3
    assert row["healthy"] and row["error"] is None and row["ping_ms"] >= 0
    assert row["queue_depth"] == 1 and row["used_memory"] > 0 and not row["closed"] and row["weight"] == 1
    table = svcgw(env, "shards")
    assert table.exit_code == 0 and "ok," in table.stdout


def test_instances_registered_before_shards_count_on_shard_0(settings: Settings, redis: Redis) -> None:
    redis.sadd(keys.instances, "we_old1", "we_old2")  # as registered before shards were counted
    shards = [Shard(0, "a"), Shard(1, "b", 1), Shard(2, "c", 2)]

    async def action(store: Store) -> tuple[str | None, dict[int, int], str, str | None]:
        account = await store.create_account("shards")
        token = await store.register_instance("we_new", account.id, 2)
        owner, counts = await store.owner_and_counts("we_new", shards)
        return owner, counts, token, await store.redis.hget(keys.instance("we_new"), "shard")

    owner, counts, token, field = with_store(settings, action)
    assert owner is not None and counts == {0: 2, 1: 0, 2: 1}
    assert token.startswith("s2.") and field == "2"
    assert redis.hgetall(PLAIN.shard_instances) == {b"2": b"1"}
    assert redis.get(keys.receiver_lookup(digest(token))) == b"we_new"


def test_serve_and_worker_wait_for_a_cluster_that_does_not_answer(env: dict[str, str]) -> None:
    # As with one Redis that is down: they start, say so, and take the Cluster once it answers.
    several = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    cluster = {**several, "SVCGW_REDIS_SHARDS": f"cluster://127.0.0.1:{free_port()}", "SVCGW_CLUSTER_SHARDS": "2"}
    port = free_port()
    server = Process(["serve"], {**cluster, "SVCGW_PORT": str(port)}, "serve-cluster-down").start()
    worker = Process(["worker"], cluster, "worker-cluster-down").start()
    try:
        # Serving (its liveness answers), not ready: every shard unreachable.
        wait_answering(server, f"http://127.0.0.1:{port}/healthz", "the HTTP server")
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert answer.status_code == 503 and answer.json()["unreachable"] == [0, 1]
        wait_for(lambda: "redis unavailable" in worker.output(), timeout=20, what="the worker waiting for Redis")
        assert worker.proc is not None and worker.proc.poll() is None
    finally:
        worker.stop()
        server.stop()
