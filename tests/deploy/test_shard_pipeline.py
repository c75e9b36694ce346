"""Three shards end to end: three ``redis-server``s, two ``svcgw serve``, two ``svcgw worker``, 300 instances.

Every event posted to every instance is delivered once to a real HTTP sink;
dead letters on two shards are replayed by one ``svcgw dlq replay --all``;
a shard's Redis killed (SIGKILL, ``appendfsync always``) leaves the other
two delivering, and once it is back on its port and directory, everything
acknowledged is delivered.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX
from svcgw.registry.store import Scope
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import ok
from tests.conftest import run
from tests.deploy.load import Load
from tests.deploy.redis_fleet import RedisFleet, register_placed, sharded_store
from tests.support import Process, Received, Sink, start_server, wait_for

pytestmark = pytest.mark.slow

INSTANCES = 300
Placed = list[tuple[str, str, int]]  # appid, receiver token, shard


class Answering:
    """The sink's rule: events whose id starts ``dead-`` fail until ``heal``; every id answered 200 is kept."""

    def __init__(self) -> None:
        self.healed = threading.Event()
        self.delivered: Counter[str] = Counter()
        self.paths: dict[str, set[str]] = {}  # appid -> the paths its posts came to
        self.lock = threading.Lock()

    def __call__(self, post: Received, earlier: list[Received]) -> tuple[int, float]:
        envelope = orjson.loads(post.body)
        ids = [str(event["id"]) for event in envelope["events"]]
        if any(i.startswith("dead-") for i in ids) and not self.healed.is_set():
            return 500, 0.0
        with self.lock:
            self.delivered.update(ids)
            self.paths.setdefault(envelope["appid"], set()).add(post.path)
        return 200, 0.0

    def count(self, prefix: str) -> Counter[str]:
        with self.lock:
            return Counter({k: v for k, v in self.delivered.items() if k.startswith(prefix)})


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[RedisFleet]:
    with RedisFleet(tmp_path / "fleet", 3, durable=True).start() as nodes:
        yield nodes


def register(settings: Settings, sink_url: str) -> tuple[Placed, str]:
    """300 instances placed as device/create places them, an account default address, one instance's own."""

    async def action() -> tuple[Placed, str]:
        async with sharded_store(settings) as store:
            account = await store.create_account("shards")
            await store.set_callback(Scope(account=account.id), sink_url)  # copied to every shard
            placed: Placed = []
            for n in range(INSTANCES):
                appid = f"we_shard{n:04d}"
                placed.append((appid, *await register_placed(store, settings, account.id, appid)))
            own = next(appid for appid, _, shard in placed if shard == 2)
            await store.set_callback(Scope(appid=own), sink_url + "/own")  # copied to shard 2 only
            return placed, own

    return run(action())


def test_three_shards_deliver_once_replay_across_shards_and_survive_one_shard_killed(
    env: dict[str, str], tmp_path: Path, fleet: RedisFleet
) -> None:
    service_env = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    service_env.update(SVCGW_REDIS_SHARDS=fleet.setting, SVCGW_RETRY_SCHEDULE="0.1,0.1,0.1")
    settings = Settings.from_env(service_env)
    answering = Answering()
    sink = Sink(rule=answering).start()
    processes: list[Process] = []
    try:
        placed, own = register(settings, sink.url)
        per_shard = Counter(shard for _, _, shard in placed)
        print(f"placement of {INSTANCES} over 3 shards: {dict(sorted(per_shard.items()))}")
        assert all(0.85 * INSTANCES / 3 <= per_shard[i] <= 1.15 * INSTANCES / 3 for i in range(3)), per_shard

        bases = []
        for name in ("serve-a", "serve-b"):
            server, base = start_server(service_env, name)
            processes.append(server)
            bases.append(base)
        for name in ("worker-a", "worker-b"):
            processes.append(Process(["worker"], service_env, name).start())
        urls = [f"{bases[n % 2]}{RECEIVER_PREFIX}{appid}/{token}" for n, (appid, token, _) in enumerate(placed)]

        # 1. Two events for each instance, half through each server: each delivered once.
        with Load(urls, prefix="ev", limit=2 * INSTANCES, threads=4, duration=60) as load:
            wait_for(lambda: load.acked() + load.refusals() >= 2 * INSTANCES, timeout=60, what="the posts")
        assert load.refusals() == 0 and load.acked() == 2 * INSTANCES
        wait_for(lambda: len(answering.count("ev-")) == 2 * INSTANCES, timeout=30, what="every event delivered")
        twice = {i: placed[int(i.split("-")[1]) % INSTANCES][2] for i, n in answering.count("ev-").items() if n > 1}
        assert not twice, twice
        # Each instance's data is on its shard alone; its own address (copied to shard 2) is used.
        clients = [node.client() for node in fleet.nodes]
        for appid, _, shard in placed[:30]:
            assert [bool(c.exists(keys.callback_log(appid))) for c in clients] == [i == shard for i in range(3)]
        assert answering.paths[own] == {"/hook/own"}
        assert all(paths == {"/hook"} for appid, paths in answering.paths.items() if appid != own)
        # The operator's commands read each instance on its shard.
        for appid, _, _ in (next(p for p in placed if p[2] == shard) for shard in (1, 2)):
            assert len(ok(service_env, "log", appid)) == 2
            states = [d["state"] for d in ok(service_env, "deliveries", "list", appid)["deliveries"]]
            assert states == ["delivered", "delivered"]
        assert len(ok(service_env, "instances", "list")) == INSTANCES

        # 2. A dead letter on shard 1 and one on shard 2, replayed by one command.
        dying = {shard: next(n for n, p in enumerate(placed) if p[2] == shard) for shard in (1, 2)}
        for shard, n in dying.items():
            body = orjson.dumps({"event_type": "Msg", "events": [{"id": f"dead-{shard}"}]})
            assert httpx.post(urls[n], content=body, timeout=10).status_code == 200
        wait_for(lambda: len(ok(service_env, "dlq", "list")) == 2, timeout=20, interval=0.2, what="two dead letters")
        assert {row["appid"] for row in ok(service_env, "dlq", "list")} == {placed[n][0] for n in dying.values()}
        answering.healed.set()
        replayed = ok(service_env, "dlq", "replay", "--all")
        assert sorted(row["status"] for row in replayed) == ["replayed", "replayed"]
        wait_for(lambda: answering.count("dead-") == Counter({"dead-1": 1, "dead-2": 1}), timeout=20,
                 what="the replayed dead letters delivered")  # fmt: skip

        # 3. Shard 2's Redis killed: the other two keep delivering; back on its port and dir, nothing is lost.
        fleet.nodes[2].kill()
        live = {n for n, p in enumerate(placed) if p[2] != 2}
        with Load(urls, prefix="down", limit=100_000, threads=4, duration=60) as load:

            def delivered_on_live_shards() -> int:
                return sum(1 for i in answering.count("down-") if int(i.split("-")[1]) % INSTANCES in live)

            wait_for(lambda: delivered_on_live_shards() >= 300, timeout=30, what="deliveries with shard 2 down")
            killed = fleet.nodes[2].proc
            assert killed is not None and killed.poll() is not None  # still down: the deliveries came without it
            assert load.refusals() > 0  # shard 2's posts refused (503), not acknowledged and lost
            scrape = httpx.get(f"{bases[0]}/metrics", timeout=10).text
            assert 'svcgw_shard_up{shard="2"} 0.0' in scrape and 'svcgw_shard_up{shard="1"} 1.0' in scrape
            fleet.nodes[2].start()

            def acked_on_shard_2() -> int:
                return sum(1 for i in list(load.acknowledged) if placed[int(i.split("-")[1]) % INSTANCES][2] == 2)

            wait_for(lambda: acked_on_shard_2() >= 50, timeout=30, what="shard 2 taking posts again")
        acknowledged = set(load.acknowledged)
        wait_for(lambda: not acknowledged - set(answering.count("down-")), timeout=30,
                 what="every acknowledged event delivered")  # fmt: skip
        # The live shards' deliveries never waited on shard 2: each of theirs arrived once.
        on_live = {i: n for i, n in answering.count("down-").items() if int(i.split("-")[1]) % INSTANCES in live}
        assert set(on_live.values()) == {1}
        print(f"shard 2 down: {load.acked()} acknowledged, {load.refusals()} refused; all delivered")
        for client in clients:
            client.close()
    except BaseException:
        for process in processes:
            print(f"--- {process.name}\n{process.output()[-3000:]}")
        raise
    finally:
        for process in processes:
            process.stop()
        sink.stop()
