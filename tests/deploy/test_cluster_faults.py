"""A Redis Cluster's faults under a steady load: a failover, a primary killed and restarted, slots moved.

Each test starts its own Cluster (three masters, a replica each, sixteen virtual shards, one
instance on each), one ``svcgw serve`` and one ``svcgw worker`` process and a sink, and posts
from a few threads, bounded in count and time, while the fault happens:

* ``CLUSTER FAILOVER`` on a replica;
* SIGKILL of a master: until its replica is promoted, posts to the instances on its slots are
  refused (503, -50002) while the others are taken; then the killed master is started again on
  its port and directory and rejoins as a replica;
* a fourth master and its replica added (``redis-cli --cluster add-node``) and the slots of four virtual shards
  moved to it, as ``redis-cli --cluster reshard`` moves them (``CLUSTER SETSLOT`` importing and
  migrating, ``MIGRATE`` of the slot's keys, ``CLUSTER SETSLOT NODE``), while posts arrive.

With no restart of svcgw, every acknowledged event is delivered, nothing stays in flight, and
what is delivered twice is at most what was in flight on the lost master: the attempts to the one
sink, which ``SVCGW_DESTINATION_CONCURRENCY`` bounds. A slot move delivers every event once.
Posts are acknowledged only once a replica holds them (``SVCGW_REDIS_WAIT_REPLICAS=1``): Redis
replicates asynchronously, and a master killed before its replica had a write would otherwise
take acknowledged posts with it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from receiver.endpoint.codes import RECEIVER_UNAVAILABLE
from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX
from svcgw.registry.store import Scope
from svcgw.shards.clients import spaces
from svcgw.storage.serverconfig import CLUSTER_SETTINGS
from tests.conftest import run
from tests.deploy.redis_fleet import RedisClusterFleet, register_placed, sharded_store
from tests.deploy.redis_nodes import Node
from tests.support import Process, Received, Sink, free_port, start_server, wait_for

pytestmark = pytest.mark.slow

SHARDS = 16
CAP = 16  # SVCGW_DESTINATION_CONCURRENCY: the attempts in flight to the one sink, at most


class Counting:
    """The sink's rule: every event id answered 200 is counted."""

    def __init__(self) -> None:
        self.delivered: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, post: Received, earlier: list[Received]) -> tuple[int, float]:
        ids = [str(event["id"]) for event in orjson.loads(post.body)["events"]]
        with self.lock:
            self.delivered.update(ids)
        return 200, 0.0

    def count(self, prefix: str) -> Counter[str]:
        with self.lock:
            return Counter({k: v for k, v in self.delivered.items() if k.startswith(prefix)})


class Posting:
    """One event per post, round robin over the instances, from a few threads until stopped or ``limit``.

    Records, per shard, what was acknowledged (200) and what was refused (any other answer, or an error).
    """

    def __init__(self, urls: list[str], shards: list[int], prefix: str, *, limit: int, threads: int = 6,
                 duration: float = 90.0) -> None:  # fmt: skip
        self.urls, self.shards, self.prefix = urls, shards, prefix
        self.limit, self.duration, self.threads = limit, duration, threads
        self.acknowledged: list[tuple[str, int]] = []
        self.refused: list[tuple[str, int, int]] = []  # (event id, shard, status or 0 for an error)
        self.stop = threading.Event()
        self._next = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Posting:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def acked(self, shards: set[int] | None = None) -> int:
        with self._lock:
            return sum(1 for _, shard in self.acknowledged if shards is None or shard in shards)

    def _run(self) -> None:
        deadline = time.monotonic() + self.duration
        with httpx.Client(timeout=15) as client:
            while not self.stop.is_set() and time.monotonic() < deadline:
                with self._lock:
                    if self._next >= self.limit:
                        return
                    n, self._next = self._next, self._next + 1
                event_id = f"{self.prefix}-{n}"
                index = n % len(self.urls)
                body = orjson.dumps({"event_type": "Msg", "events": [{"id": event_id}]})
                try:
                    status = client.post(self.urls[index], content=body).status_code
                except httpx.HTTPError:
                    status = 0
                with self._lock:
                    if status == 200:
                        self.acknowledged.append((event_id, self.shards[index]))
                    else:
                        self.refused.append((event_id, self.shards[index], status))
                if status != 200:
                    time.sleep(0.02)


@dataclass
class Deployment:
    cluster: RedisClusterFleet
    settings: Settings
    env: dict[str, str]
    base: str
    urls: list[str]
    shards: list[int]  # of each url's instance
    counting: Counting
    processes: list[Process]

    def posting(self, prefix: str, *, limit: int = 20000, duration: float = 90.0) -> Posting:
        return Posting(self.urls, self.shards, prefix, limit=limit, duration=duration)

    def client(self) -> RedisCluster:
        live = [n for n in self.cluster.nodes if n.proc is not None and n.proc.poll() is None]
        return RedisCluster(startup_nodes=[ClusterNode(n.host, n.port) for n in live[:3]])  # type: ignore[no-untyped-call]

    def inflight(self) -> dict[int, int]:
        """Each shard's claimed deliveries (its inflight sorted set)."""
        client = self.client()
        try:
            name = self.settings.queue_name
            return {i: int(client.zcard(k.inflight(name))) for i, k in enumerate(spaces(self.settings.shard_layout))}
        finally:
            client.close()

    def shards_on(self, node: Node) -> set[int]:
        """The virtual shards whose slot ``node`` serves as master, as it sees itself."""
        owners = slot_owners(self.cluster, node)
        return {shard for shard in range(SHARDS) if owners.get(shard_slot(shard)) == node.address}

    def settle(self, posting: Posting) -> tuple[set[str], Counter[str]]:
        """Wait until every acknowledged event arrived and nothing is in flight; the acknowledged ids and the
        deliveries of the run's events."""
        acknowledged = {event_id for event_id, _ in posting.acknowledged}
        wait_for(lambda: not acknowledged - set(self.counting.count(posting.prefix + "-")), timeout=60,
                 interval=0.2, what="every acknowledged event delivered")  # fmt: skip
        # Past its lease and the delivery timeout (and the time to look) at most, nothing claimed is left: no
        # delivery stranded.
        longest = self.settings.lease_seconds + self.settings.delivery_timeout + 10
        wait_for(lambda: not any(self.inflight().values()), timeout=longest, interval=0.2, what="nothing in flight")
        return acknowledged, self.counting.count(posting.prefix + "-")

    def delivered(self, prefix: str, shards: set[int]) -> int:
        """How many events of the run posted to instances of ``shards`` arrived."""
        return sum(1 for event_id in self.counting.count(prefix + "-")
                   if self.shards[int(event_id.rsplit("-", 1)[1]) % SHARDS] in shards)  # fmt: skip

    def output(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-4000:]}" for p in self.processes)


def shard_slot(shard: int) -> int:
    """The slot of virtual shard ``shard``'s tag ``{s<i>}``."""
    return int(key_slot(f"{{s{shard}}}".encode()))


def cluster_nodes(node: Node) -> list[list[str]]:
    """``CLUSTER NODES`` as ``node`` sees it, one list of fields per node."""
    client = node.client(decode_responses=True)
    try:
        return [line.split() for line in str(client.execute_command("CLUSTER", "NODES")).splitlines()]  # type: ignore[no-untyped-call]
    finally:
        client.close()


def live(cluster: RedisClusterFleet) -> list[Node]:
    return [node for node in cluster.nodes if node.proc is not None and node.proc.poll() is None]


def slot_owners(cluster: RedisClusterFleet, viewer: Node | None = None) -> dict[int, str]:
    """Slot -> the address of the master that serves it, as ``viewer`` (or a live node) sees it (failed masters
    left out)."""
    owners: dict[int, str] = {}
    for fields in cluster_nodes(viewer or live(cluster)[0]):
        if "master" not in fields[2] or "fail" in fields[2]:
            continue
        for part in fields[8:]:
            if part.startswith("["):
                continue  # a slot being imported or migrated
            first, _, last = part.partition("-")
            for slot in range(int(first), int(last or first) + 1):
                owners[slot] = fields[1].split("@")[0]
    return owners


def node_id(node: Node) -> str:
    client = node.client(decode_responses=True)
    try:
        return str(client.execute_command("CLUSTER", "MYID"))  # type: ignore[no-untyped-call]
    finally:
        client.close()


def role(node: Node) -> str:
    client = node.client(decode_responses=True)
    try:
        return str(client.info("replication")["role"])
    finally:
        client.close()


def every_node_agrees(cluster: RedisClusterFleet, masters: int) -> bool:
    """Every live node: the slots all served, ``masters`` masters holding them, none failed."""
    for node in live(cluster):
        client = node.client(decode_responses=True)
        try:
            info = str(client.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
        except Exception:
            return False
        finally:
            client.close()
        if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
            return False
        fields = cluster_nodes(node)
        if any("fail" in f[2] and "fail?" not in f[2] and f[7] == "connected" for f in fields):
            return False
        if sum(1 for f in fields if "master" in f[2] and len(f) > 8 and "fail" not in f[2]) != masters:
            return False
    return True


def promoted(cluster: RedisClusterFleet, victim: Node, shards: set[int]) -> bool:
    """Every live node agrees on three masters, and ``shards``' slots are served by another than ``victim``: its
    replica promoted (until the others notice a master gone, they still agree on it)."""
    if not every_node_agrees(cluster, 3):
        return False
    owners = slot_owners(cluster)
    return all(owners.get(shard_slot(shard)) not in (None, victim.address) for shard in shards)


def replicas_in_sync(cluster: RedisClusterFleet) -> bool:
    """Every live replica has its master's data and follows it (a first sync waits for a diskless one's delay)."""
    for node in live(cluster):
        client = node.client(decode_responses=True)
        try:
            info = client.info("replication")
        except Exception:
            return False
        finally:
            client.close()
        if info["role"] == "slave" and info.get("master_link_status") != "up":
            return False
    return True


def register(settings: Settings, sink_url: str) -> list[tuple[str, str, int]]:
    """One instance on each virtual shard, placed as ``device/create`` places them, the account's address the sink."""

    async def action() -> list[tuple[str, str, int]]:
        async with sharded_store(settings) as store:
            account = await store.create_account("faults")
            await store.set_callback(Scope(account=account.id), sink_url)
            return [(f"we_fault{n:04d}", *await register_placed(store, settings, account.id, f"we_fault{n:04d}"))
                    for n in range(SHARDS)]  # fmt: skip

    return run(action())


@pytest.fixture
def deployment(env: dict[str, str], tmp_path: Path) -> Iterator[Deployment]:
    cluster = RedisClusterFleet(tmp_path / "cluster", replicas=1)
    for node in cluster.nodes:
        node.args += [arg for name, value in CLUSTER_SETTINGS.items() for arg in (f"--{name}", value)]
    cluster.start()
    wait_for(lambda: replicas_in_sync(cluster), timeout=30, interval=0.2, what="the replicas in sync")
    service_env = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    service_env.update(
        SVCGW_REDIS_SHARDS=cluster.setting,
        SVCGW_CLUSTER_SHARDS=str(SHARDS),
        SVCGW_RETRY_SCHEDULE="0.1,0.1,0.1",
        SVCGW_RATE_LIMIT="100000/minute",
        SVCGW_REDIS_WAIT_REPLICAS="1",
        SVCGW_DESTINATION_CONCURRENCY=str(CAP),
    )
    settings = Settings.from_env(service_env)
    counting = Counting()
    sink = Sink(rule=counting).start()
    processes: list[Process] = []
    deployed: Deployment | None = None
    try:
        placed = register(settings, sink.url)
        assert sorted(shard for _, _, shard in placed) == list(range(SHARDS))
        server, base = start_server(service_env)
        processes.append(server)
        processes.append(Process(["worker"], service_env, "worker").start())
        urls = [f"{base}{RECEIVER_PREFIX}{appid}/{token}" for appid, token, _ in placed]
        deployed = Deployment(cluster, settings, service_env, base, urls, [s for _, _, s in placed], counting,
                              processes)  # fmt: skip
        yield deployed
        assert all(p.alive() for p in processes), deployed.output()  # no restart of svcgw
    except BaseException:
        if deployed is not None:
            print(deployed.output())
        raise
    finally:
        for process in processes:
            process.stop()
        sink.stop()
        cluster.close()


def test_a_failover_under_load_strands_nothing_and_loses_nothing(deployment: Deployment) -> None:
    replica = deployment.cluster.replica_nodes()[0]
    with deployment.posting("fo") as posting:
        wait_for(lambda: posting.acked() >= 300, timeout=40, what="posts before the failover")
        client = replica.client()
        try:
            client.execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]
        finally:
            client.close()
        wait_for(lambda: role(replica) == "master", timeout=30, what="the promotion")
        moved = deployment.shards_on(replica)
        promoted_at = posting.acked(moved)
        wait_for(lambda: posting.acked(moved) >= promoted_at + 100, timeout=40, what="posts after, on its shards")
    acknowledged, delivered = deployment.settle(posting)
    twice = {event_id for event_id, n in delivered.items() if n > 1}
    print(f"failover: {len(acknowledged)} acknowledged, {len(posting.refused)} refused, {len(twice)} twice")
    assert len(twice) <= CAP


def test_a_killed_master_its_replica_promoted_and_it_back_as_a_replica(deployment: Deployment) -> None:
    cluster = deployment.cluster
    masters = cluster.masters()
    victim = next(node for node in cluster.nodes if node.address in masters)
    lost = deployment.shards_on(victim)
    assert lost and len(lost) < SHARDS
    with deployment.posting("kill", duration=120) as posting:
        wait_for(lambda: posting.acked() >= 300, timeout=40, what="posts before the kill")
        victim.kill()
        killed_at = time.monotonic()
        # Until the replica is promoted, a post to an instance of the lost slots is refused at once, and the
        # others are taken.
        (kept,) = [deployment.urls[i] for i, s in enumerate(deployment.shards) if s not in lost][:1]
        (gone,) = [deployment.urls[i] for i, s in enumerate(deployment.shards) if s in lost][:1]
        body = orjson.dumps({"event_type": "Msg", "events": [{"id": "probe-1"}]})
        started = time.monotonic()
        refused = httpx.post(gone, content=body, timeout=15)
        took = time.monotonic() - started
        if not promoted(cluster, victim, lost):  # still without its primary: the answer is the one wanted
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == RECEIVER_UNAVAILABLE.code and took < 5, (refused.text, took)
        assert httpx.post(kept, content=orjson.dumps({"event_type": "Msg", "events": [{"id": "probe-2"}]}),
                          timeout=15).status_code == 200  # fmt: skip
        wait_for(lambda: promoted(cluster, victim, lost), timeout=30, interval=0.2, what="the replica promoted")
        print(f"promoted {time.monotonic() - killed_at:.1f}s after the kill")
        # The promoted master has no replica yet: its posts wait for one (SVCGW_REDIS_WAIT_REPLICAS), while the
        # other slots take theirs and the worker delivers them.
        kept_shards = set(range(SHARDS)) - lost
        after, delivered_after = posting.acked(kept_shards), deployment.delivered(posting.prefix, kept_shards)
        wait_for(lambda: posting.acked(kept_shards) >= after + 200, timeout=40, what="posts on the other slots")
        wait_for(lambda: deployment.delivered(posting.prefix, kept_shards) >= delivered_after + 200, timeout=40,
                 what="deliveries on the other slots")  # fmt: skip

        victim.start()  # on its port and directory: it learns it was failed over and follows its replica
        wait_for(lambda: role(victim) == "slave", timeout=30, what="the killed master back as a replica")
        wait_for(lambda: every_node_agrees(cluster, 3) and replicas_in_sync(cluster), timeout=30, interval=0.2,
                 what="the Cluster whole again")  # fmt: skip
        again = posting.acked(lost)
        wait_for(lambda: posting.acked(lost) >= again + 100, timeout=40, what="posts with the Cluster whole")
    acknowledged, delivered = deployment.settle(posting)
    twice = {event_id for event_id, n in delivered.items() if n > 1}
    refused_where = Counter(shard in lost for _, shard, _ in posting.refused)
    print(f"kill: {len(acknowledged)} acknowledged, refused {dict(refused_where)} (on the lost slots: True), "
          f"{len(twice)} twice")  # fmt: skip
    # The other slots took every post but those in flight when the master died: redis-py's client resets its
    # connections then, and a post cut off is refused (503, sent again by its sender). One per thread at most.
    assert refused_where[False] <= posting.threads, [r for r in posting.refused if r[1] not in lost]
    assert len(twice) <= CAP
    shard_of = {f"kill-{n}": deployment.shards[n % SHARDS] for n in range(posting.limit)}
    assert all(shard_of[event_id] in lost for event_id in twice), twice


def test_slots_moved_to_a_new_master_under_load_deliver_every_event_once(deployment: Deployment) -> None:
    cluster = deployment.cluster
    new = add_node(cluster, "node-new")
    join(cluster, new)
    join(cluster, add_node(cluster, "node-new-replica"), "--cluster-slave", "--cluster-master-id", node_id(new))
    wait_for(lambda: replicas_in_sync(cluster), timeout=30, interval=0.2, what="the new master's replica in sync")
    moving = [1, 5, 9, 13]
    with deployment.posting("mv", duration=120) as posting:
        wait_for(lambda: posting.acked() >= 300, timeout=40, what="posts before the move")
        for shard in moving:
            owners = slot_owners(cluster)
            source = next(n for n in cluster.nodes if n.address == owners[shard_slot(shard)])
            move_slot(cluster, shard_slot(shard), source, new)
            before = posting.acked({shard})
            wait_for(lambda: posting.acked({shard}) >= before + 20, timeout=40, what=f"posts on shard {shard} after")
        assert deployment.shards_on(new) == set(moving)
    acknowledged, delivered = deployment.settle(posting)
    refused = Counter(shard for _, shard, _ in posting.refused)
    print(f"slot moves: {len(acknowledged)} acknowledged, refused by shard {dict(refused)}")
    assert set(delivered.values()) == {1}  # every event once
    assert set(refused) <= set(moving), refused  # the shards not moved took every post
    assert sum(refused.values()) <= 0.05 * (len(acknowledged) + sum(refused.values())), refused


def add_node(cluster: RedisClusterFleet, name: str) -> Node:
    """One more node, configured as the others, started; stopped with them."""
    node = Node("redis-server", cluster.nodes[0].dir.parent / name, list(cluster.nodes[0].args))
    node.args[node.args.index("--cluster-port") + 1] = str(free_port())
    cluster.nodes.append(node)
    return node.start()


def join(cluster: RedisClusterFleet, node: Node, *how: str) -> None:
    """``redis-cli --cluster add-node``, then wait until every node knows it."""
    added = subprocess.run(["redis-cli", "--cluster", "add-node", node.address, cluster.nodes[0].address, *how],
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    others = [n for n in live(cluster) if n is not node]
    wait_for(lambda: all(any(f[1].startswith(node.address + "@") for f in cluster_nodes(n)) for n in others),
             timeout=30, interval=0.2, what=f"every node to know {node.address}")  # fmt: skip


def move_slot(cluster: RedisClusterFleet, slot: int, source: Node, target: Node) -> None:
    """Move ``slot`` from ``source`` to ``target`` as ``redis-cli --cluster reshard`` does, keys and all."""
    source_id, target_id = node_id(source), node_id(target)
    src, dst = source.client(), target.client()
    try:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)  # type: ignore[no-untyped-call]
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)  # type: ignore[no-untyped-call]
        while True:
            keys: list[Any] = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)  # type: ignore[no-untyped-call]
            if not keys:
                break
            src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)  # type: ignore[no-untyped-call]
        for node in (target, source, *(n for n in live(cluster) if n not in (source, target))):
            client = node.client()
            try:
                if role(node) == "master":
                    client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)  # type: ignore[no-untyped-call]
            finally:
                client.close()
    finally:
        src.close()
        dst.close()
