"""A worker on a Redis Cluster holds ``SVCGW_DELIVERY_CONCURRENCY`` attempts at once, its virtual shards together.

A real Cluster of three masters and sixteen virtual shards, a real ``svcgw serve`` and ``svcgw
worker``, and a sink that answers each post after a pause, counting the posts it holds at once.
A backlog on every virtual shard is queued before the worker starts. The worker's engines (one per
virtual shard) share its slots (``worker.sharedslots``): at most ``SVCGW_DELIVERY_CONCURRENCY``
posts are in flight at once, as on one Redis, where each engine once had that many of its own
(sixteen times as many, up to the destination's cap of 16). Every event is delivered once.
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX
from tests.deploy.load import event_ids
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture, one_instance_per_shard, sharded
from tests.support import Process, Sink, held_at_once, start_server, wait_for

pytestmark = pytest.mark.slow

SHARDS = 16
CONCURRENCY = 8  # below the destination's cap (16), which would otherwise bound the posts at once
EVENTS_PER_SHARD = 8
PAUSE = 0.1  # each post held this long: the worker's attempts overlap


cluster = cluster_fixture()


def test_a_clusters_worker_holds_its_delivery_concurrency_across_its_virtual_shards(
    env: dict[str, str], cluster: RedisClusterFleet
) -> None:
    service_env = sharded(
        env,
        cluster.setting,
        SVCGW_CLUSTER_SHARDS=str(SHARDS),
        SVCGW_DELIVERY_CONCURRENCY=str(CONCURRENCY),
        SVCGW_RATE_LIMIT="100000/minute",
    )
    settings = Settings.from_env(service_env)
    sink = Sink(delay=PAUSE).start()
    processes: list[Process] = []
    try:
        placed = one_instance_per_shard(settings, sink.url, "slot")
        assert sorted(shard for _, _, shard in placed) == list(range(SHARDS))
        server, base = start_server(service_env)
        processes.append(server)
        wanted = set()
        with httpx.Client(timeout=15) as client:
            for appid, token, shard in placed:
                for n in range(EVENTS_PER_SHARD):
                    body = orjson.dumps({"event_type": "Msg", "events": [{"id": f"slot-{shard}-{n}"}]})
                    answer = client.post(f"{base}{RECEIVER_PREFIX}{appid}/{token}", content=body)
                    assert answer.status_code == 200, answer.text
                    wanted.add(f"slot-{shard}-{n}")
        processes.append(Process(["worker"], service_env, "worker").start())
        wait_for(lambda: wanted <= set(event_ids(sink.posts())), timeout=120, interval=0.1,
                 what="every event delivered")  # fmt: skip
        delivered = event_ids(sink.posts())
        assert set(delivered) == wanted and set(delivered.values()) == {1}
        # More than one at once (the attempts did overlap), never more than the worker's slots.
        most = held_at_once(sink.posts())
        assert 1 < most <= CONCURRENCY, most
        assert all(p.alive() for p in processes)
    except BaseException:
        print("\n".join(f"--- {p.name}\n{p.output()[-4000:]}" for p in processes))
        raise
    finally:
        for process in processes:
            process.stop()
        sink.stop()
