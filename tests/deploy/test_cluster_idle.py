"""An idle worker on a Redis Cluster: the polling of its sixteen virtual shards paced out (worker.idlepace).

A real Cluster of three masters, one ``svcgw worker`` process: idle, the commands it sends to the
masters (``INFO commandstats`` on each, before and after) stay under a bound that the sixteen
engines and probers polling at one Redis's cadence far exceed (about 900 a second). Then one
``svcgw serve`` and a sink: an event posted to an instance on each virtual shard, each failing its
first attempt, is delivered on its retry (promoted by an engine that had been idle), every one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx
import orjson
import pytest

from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture, one_instance_per_shard, sharded
from tests.support import Process, Received, Sink, start_server, wait_for

pytestmark = pytest.mark.slow

SHARDS = 16
# Commands a second an idle worker may send to the Cluster's masters, every shard's together. Paced
# out it sends about 200; each of the sixteen engines and probers at one Redis's cadence, about 900.
IDLE_COMMANDS_PER_SECOND = 400
COUNTED_SECONDS = 4.0
# The counting's own commands, and those of connections opening, are not the worker's polling.
NOT_COUNTED = {"cmdstat_info", "cmdstat_hello", "cmdstat_command", "cmdstat_cluster|slots", "cmdstat_client|setinfo"}


class FirstFails:
    """The sink's rule: each event's first post answered 500, later ones 200; every post counted per event id."""

    def __init__(self) -> None:
        self.posts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, post: Received, earlier: list[Received]) -> tuple[int, float]:
        ids = [str(event["id"]) for event in orjson.loads(post.body)["events"]]
        with self.lock:
            first = any(self.posts[i] == 0 for i in ids)
            self.posts.update(ids)
        return (500 if first else 200), 0.0

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(self.posts)


def commands(cluster: RedisClusterFleet) -> int:
    """Commands the Cluster's masters have run, all together, but those of :data:`NOT_COUNTED`."""
    total = 0
    for node in cluster.nodes:
        client = node.client()
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        total += sum(int(stat["calls"]) for name, stat in stats.items() if name not in NOT_COUNTED)
    return total


cluster = cluster_fixture()


def test_an_idle_worker_on_a_cluster_polls_little_and_still_delivers_every_shards_events(
    env: dict[str, str], cluster: RedisClusterFleet
) -> None:
    service_env = sharded(
        env,
        cluster.setting,
        SVCGW_CLUSTER_SHARDS=str(SHARDS),
        SVCGW_RETRY_SCHEDULE="0.2,0.2,0.2",
        SVCGW_RATE_LIMIT="100000/minute",
    )
    settings = Settings.from_env(service_env)
    rule = FirstFails()
    sink = Sink(rule=rule).start()
    processes: list[Process] = []
    try:
        placed = one_instance_per_shard(settings, sink.url, "idle")
        assert sorted(shard for _, _, shard in placed) == list(range(SHARDS))
        worker = Process(["worker"], service_env, "worker").start()
        processes.append(worker)
        wait_for(lambda: worker.output().count(" slots") >= SHARDS, timeout=60, interval=0.2,
                 what="every virtual shard's engine started")  # fmt: skip
        wait_for(lambda: worker.output().count("prober started") >= SHARDS, timeout=60, interval=0.2,
                 what="every virtual shard's prober started")  # fmt: skip
        time.sleep(1.0)  # past the first turns, which read and promote at once
        before, since = commands(cluster), time.monotonic()
        time.sleep(COUNTED_SECONDS)
        sent, counted = commands(cluster) - before, time.monotonic() - since
        assert sent < IDLE_COMMANDS_PER_SECOND * counted, f"{sent} commands in {counted:.1f}s\n{worker.output()}"

        server, base = start_server(service_env)
        processes.append(server)
        with httpx.Client(timeout=15) as client:
            for appid, token, shard in placed:
                body = orjson.dumps({"event_type": "Msg", "events": [{"id": f"idle-{shard}"}]})
                answer = client.post(f"{base}{RECEIVER_PREFIX}{appid}/{token}", content=body)
                assert answer.status_code == 200, answer.text
        wanted = {f"idle-{shard}" for shard in range(SHARDS)}

        def delivered() -> bool:
            counts = rule.counts()
            return all(counts[event_id] >= 2 for event_id in wanted)

        wait_for(delivered, timeout=60, interval=0.1, what="every shard's event delivered on its retry")
        assert all(p.alive() for p in processes)
    except BaseException:
        print("\n".join(f"--- {p.name}\n{p.output()[-4000:]}" for p in processes))
        raise
    finally:
        for process in processes:
            process.stop()
        sink.stop()
