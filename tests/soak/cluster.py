"""``python -m tests.soak.cluster [--minutes M] [--rate R] [--redis cluster|one]``: a soak of deliveries under faults.

Not part of ``.ci/run`` (it runs for a quarter of an hour); docs/shards.md gives its figures.

A deployment of this checkout, on its own Redis: a Cluster of three masters and a replica each
(``--redis cluster``, sixteen virtual shards, the settings of ``svcgw.storage.serverconfig``) or
one ``redis-server`` (``--redis one``, to compare), one ``svcgw serve`` and two ``svcgw worker``
processes, a sink that answers 200, and sixteen instances (one per virtual shard). Posts arrive
at a steady ``--rate`` per second for ``--minutes``, one event each, while:

* every ``--kill-every`` seconds a worker is SIGKILLed and started again (its claims are handed
  back when their leases run out, and attempted again: the duplicates counted below);
* half-way, on a Cluster, a replica takes over its master (``CLUSTER FAILOVER``).

Posts are acknowledged once a replica holds them (``SVCGW_REDIS_WAIT_REPLICAS=1``) on a Cluster.
Then the posting stops and the soak waits until every acknowledged event has arrived and nothing
is in flight. Printed: posts made, acknowledged, refused; events delivered, acknowledged ones
lost (never delivered: must be 0), delivered twice or more; the kills and the failover; then one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from cryptography.fernet import Fernet

from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX
from svcgw.storage.serverconfig import CLUSTER_SETTINGS, server_args
from tests.deploy.redis_fleet import RedisClusterFleet, RedisFleet
from tests.deploy.test_cluster_faults import SHARDS, Counting, register, replicas_in_sync, role
from tests.support import Process, Sink, start_server, wait_for


class Steady:
    """Posts at ``rate`` per second, one event each, round robin over ``urls``, until stopped."""

    def __init__(self, urls: list[str], rate: float, threads: int = 8) -> None:
        self.urls, self.rate = urls, rate
        self.acknowledged: list[str] = []
        self.refused = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self._started = time.monotonic()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> Steady:
        for thread in self._threads:
            thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _take(self) -> int | None:
        """The next post's number once it is due, or None when stopped."""
        while not self.stop.is_set():
            with self._lock:
                n = self._next
                due = self._started + n / self.rate
                if time.monotonic() >= due:
                    self._next += 1
                    return n
            time.sleep(min(max(due - time.monotonic(), 0.001), 0.05))
        return None

    def _run(self) -> None:
        with httpx.Client(timeout=15) as client:
            while (n := self._take()) is not None:
                event_id = f"soak-{n}"
                body = orjson.dumps({"event_type": "Msg", "events": [{"id": event_id}]})
                try:
                    ok = client.post(self.urls[n % len(self.urls)], content=body).status_code == 200
                except httpx.HTTPError:
                    ok = False
                with self._lock:
                    if ok:
                        self.acknowledged.append(event_id)
                    else:
                        self.refused += 1


def environment(root: Path, redis: str, setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
    env.update(
        SVCGW_STATE_DIR=str(root),
        SVCGW_UPSTREAM_URL="http://127.0.0.1:9/",
        SVCGW_ALLOW_PRIVATE_DESTINATIONS="127.0.0.0/8",
        SVCGW_DESTINATION_PORTS="1-65535",
        SVCGW_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
        SVCGW_RATE_LIMIT="1000000/minute",
        SVCGW_LEASE_SECONDS="10",
        SVCGW_DELIVERY_TIMEOUT="5",
        PYTHONUNBUFFERED="1",
    )
    if redis == "cluster":
        env.update(SVCGW_REDIS_SHARDS=setting, SVCGW_CLUSTER_SHARDS=str(SHARDS), SVCGW_REDIS_WAIT_REPLICAS="1")
    else:
        env.update(SVCGW_REDIS_URL=setting)
    return env


def soak(minutes: float, rate: float, redis: str, kill_every: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="svcgw-soak-"))
    if redis == "cluster":
        fleet: RedisClusterFleet | RedisFleet = RedisClusterFleet(root / "cluster", replicas=1)
        for node in fleet.nodes:
            node.args += [arg for name, value in {**CLUSTER_SETTINGS}.items() for arg in (f"--{name}", value)]
    else:
        fleet = RedisFleet(root / "redis", 1)
    for node in fleet.nodes:
        node.args += server_args()
    fleet.start()
    processes: list[Process] = []
    counting = Counting()
    sink = Sink(rule=counting).start()
    events: list[str] = []
    try:
        if isinstance(fleet, RedisClusterFleet):
            wait_for(lambda: replicas_in_sync(fleet), timeout=30, interval=0.2, what="the replicas in sync")
            setting = fleet.setting
        else:
            setting = fleet.urls()[0]
        env = environment(root, redis, setting)
        settings = Settings.from_env(env)
        placed = register(settings, sink.url)
        server, base = start_server(env)
        processes.append(server)
        workers = [Process(["worker"], env, f"worker-{n}").start() for n in range(2)]
        processes.extend(workers)
        urls = [f"{base}{RECEIVER_PREFIX}{appid}/{token}" for appid, token, _ in placed]
        posting = Steady(urls, rate).start()
        started = time.monotonic()
        end = started + minutes * 60
        next_kill, failed_over, kills = started + kill_every, False, 0
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_kill:
                victim = workers[kills % len(workers)]
                victim.kill()
                replacement = Process(["worker"], env, f"{victim.name}-{kills}").start()
                workers[workers.index(victim)] = replacement
                processes.append(replacement)
                kills += 1
                events.append(f"{now - started:.0f}s: worker SIGKILLed and started again")
                next_kill = now + kill_every
            if isinstance(fleet, RedisClusterFleet) and not failed_over and now >= started + (end - started) / 2:
                replica = fleet.replica_nodes()[0]
                client = replica.client()
                try:
                    client.execute_command("CLUSTER", "FAILOVER")  # type: ignore[no-untyped-call]
                finally:
                    client.close()
                wait_for(lambda: role(replica) == "master", timeout=30, what="the promotion")
                failed_over = True
                events.append(f"{now - started:.0f}s: CLUSTER FAILOVER on {replica.address}")
            time.sleep(0.5)
        posting.finish()
        posted_for = time.monotonic() - started
        acknowledged = set(posting.acknowledged)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and acknowledged - set(counting.count("soak-")):
            time.sleep(1)
        delivered = counting.count("soak-")
        result = {
            "redis": redis,
            "minutes": minutes,
            "rate": rate,
            "posted": len(acknowledged) + posting.refused,
            "acknowledged": len(acknowledged),
            "refused": posting.refused,
            "acknowledged_per_second": round(len(acknowledged) / posted_for, 1),
            "delivered": len(delivered),
            "lost": len(acknowledged - set(delivered)),
            "twice_or_more": sum(1 for n in delivered.values() if n > 1),
            "worker_kills": kills,
            "failover": failed_over,
            "workers_alive": all(w.alive() for w in workers) and server.alive(),
        }
        return result
    finally:
        for line in events:
            print(line, file=sys.stderr)
        for process in processes:
            process.stop()
        sink.stop()
        fleet.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=100.0, help="posts per second")
    parser.add_argument("--redis", choices=["cluster", "one"], default="cluster")
    parser.add_argument("--kill-every", type=float, default=180.0, help="seconds between two worker kills")
    args = parser.parse_args(argv)
    result = soak(args.minutes, args.rate, args.redis, args.kill_every)
    verdict = "ok" if result["lost"] == 0 else "LOST ACKNOWLEDGED EVENTS"
    print(f"{verdict}: {result['acknowledged']} acknowledged, {result['lost']} lost, "
          f"{result['twice_or_more']} delivered twice or more, {result['refused']} refused")  # fmt: skip
    print(json.dumps(result))
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
