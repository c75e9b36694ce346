"""Several Redis deployments of a test's own: k ``redis-server``s, or a real local Redis Cluster.

Debian's binaries on loopback ports, data in the test's temporary directory
(``tests.deploy.redis_nodes.Node``). ``close()`` stops every process it
started (SIGTERM, then SIGKILL after a deadline), and the fixtures call it
whatever happens to the test.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from redis.exceptions import RedisError

from svcgw.config.settings import Settings
from svcgw.registry.copies import ShardCopies
from svcgw.registry.store import Scope, Store
from svcgw.shards.clients import aclose_all, role_clients
from svcgw.shards.placement import place
from svcgw.vault import TokenVault
from tests.conftest import run
from tests.deploy.redis_nodes import Node, require_binaries
from tests.support import free_port, wait_for

__all__ = ["RedisClusterFleet", "RedisFleet", "cluster_fixture", "sharded_store", "stop"]

# Neither keeps data on disk: a test's Redis lives as long as the test.
_EPHEMERAL = ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
# ``durable``: every write on disk before it is answered, so a SIGKILLed shard restarted on its dir has it all.
_DURABLE = ["--save", "", "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "no"]


def stop(node: Node, timeout: float = 10.0) -> None:
    """SIGTERM and wait (a clean shutdown); SIGKILL past the deadline."""
    proc = node.proc
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class RedisFleet:
    """``k`` independent ``redis-server``s: the deployments of ``SVCGW_REDIS_SHARDS``."""

    def __init__(self, root: Path, k: int, *, durable: bool = False) -> None:
        require_binaries("redis-server")
        args = _DURABLE if durable else _EPHEMERAL
        self.nodes = [Node("redis-server", root / f"shard-{i}", list(args)) for i in range(k)]

    def start(self) -> RedisFleet:
        try:
            for node in self.nodes:
                node.start()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> RedisFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def urls(self, password: str | None = None) -> list[str]:
        auth = f":{password}@" if password else ""
        return [f"redis://{auth}{node.address}/0" for node in self.nodes]

    @property
    def setting(self) -> str:
        """The value of ``SVCGW_REDIS_SHARDS``."""
        return " ".join(self.urls())

    def close(self) -> None:
        for node in self.nodes:
            stop(node)


class RedisClusterFleet:
    """A Redis Cluster: ``masters`` masters (``replicas`` replicas each), joined by ``redis-cli --cluster create``."""

    def __init__(
        self, root: Path, *, masters: int = 3, replicas: int = 0, appendfsync: str | None = None,
        extra: Sequence[str] = (),
    ) -> None:  # fmt: skip
        """``appendfsync``: an append-only file synced so (the benchmarks'); without it, nothing on disk.
        ``extra``: more ``redis-server`` arguments for every node."""
        require_binaries("redis-server", "redis-cli")
        self.master_count = masters
        self.replicas = replicas
        count = masters * (1 + replicas)
        data = list(_EPHEMERAL)
        if appendfsync is not None:
            data = ["--save", "", "--appendonly", "yes", "--appendfsync", appendfsync, "--protected-mode", "no"]
        self.nodes = [
            Node("redis-server", root / f"node-{i}", [*data, *extra, "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"])
            for i in range(count)
        ]  # fmt: skip
        for node in self.nodes:
            # The bus port defaults to the port + 10000, in the ephemeral range for the nodes' ports: give it
            # its own, below that range too.
            node.args += ["--cluster-port", str(free_port())]

    def start(self) -> RedisClusterFleet:
        try:
            for node in self.nodes:
                node.start()
            created = subprocess.run(
                ["redis-cli", "--cluster", "create", *(n.address for n in self.nodes),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            if created.returncode != 0:
                raise AssertionError(f"redis-cli --cluster create failed:\n{created.stdout}\n{created.stderr}")
            wait_for(self._ok, timeout=30, interval=0.1, what="cluster_state:ok on every node")
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> RedisClusterFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def seeds(self) -> str:
        return ",".join(node.address for node in self.nodes[:2])

    @property
    def setting(self) -> str:
        """The value of ``SVCGW_REDIS_SHARDS``: the Cluster from two of its nodes."""
        return f"cluster://{self.seeds}"

    def masters(self) -> set[str]:
        """The addresses of the masters that hold slots, as the first node sees them."""
        return self._view(self.nodes[0])[0]

    def replica_nodes(self) -> list[Node]:
        """The nodes that are replicas now, as the first node sees them."""
        replicas = self._view(self.nodes[0])[1]
        return [node for node in self.nodes if node.address in replicas]

    def _view(self, node: Node) -> tuple[set[str], set[str]]:
        """(masters holding slots, replicas) in ``node``'s ``CLUSTER NODES``."""
        client = node.client(decode_responses=True)
        try:
            text = str(client.execute_command("CLUSTER", "NODES"))  # type: ignore[no-untyped-call]
        finally:
            client.close()
        masters: set[str] = set()
        replicas: set[str] = set()
        for line in text.splitlines():
            fields = line.split()
            address, flags = fields[1].split("@")[0], fields[2].split(",")
            if "master" in flags and len(fields) > 8:  # slot ranges follow the eighth field
                masters.add(address)
            elif "slave" in flags:
                replicas.add(address)
        return masters, replicas

    def _ok(self) -> bool:
        """Every node: the slots all served, and the masters and replicas as created (the gossip settled)."""
        for node in self.nodes:
            client = node.client(decode_responses=True)
            try:
                info = str(client.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
            except RedisError:
                return False
            finally:
                client.close()
            if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                return False
            masters, replicas = self._view(node)
            if len(masters) != self.master_count or len(replicas) != self.master_count * self.replicas:
                return False
        return True

    def close(self) -> None:
        for node in self.nodes:
            stop(node)


def cluster_fixture(scope: Literal["function", "module"] = "function", *, replicas: int = 0) -> Any:
    """A fixture ``cluster``: a :class:`RedisClusterFleet` of its own for each test (``scope="function"``)
    or one shared by the module's tests, closed whatever happens to them.

    A test module takes it as ``cluster = cluster_fixture(...)``; the fixture's name is ``cluster`` whatever
    the attribute's (pytest's own type for it is not public, hence ``Any``).
    """

    @pytest.fixture(scope=scope, name="cluster")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterFleet]:
        with RedisClusterFleet(tmp_path_factory.mktemp("cluster"), replicas=replicas).start() as nodes:
            yield nodes

    return fixture


@contextlib.asynccontextmanager
async def sharded_store(settings: Settings) -> AsyncIterator[Store]:
    """The registry's ``Store`` of a sharded deployment, writing the copies instances' shards read, as serve does."""
    texts = role_clients(settings, decode=True)
    try:
        store = Store(texts[0].redis, TokenVault.from_settings(settings), texts[0].keys)
        store.copies = ShardCopies([client for client, _ in texts], [names for _, names in texts])
        yield store
    finally:
        await aclose_all(texts)


async def register_placed(store: Store, settings: Settings, account_id: str, appid: str) -> tuple[str, int]:
    """Register ``appid`` on the shard ``device/create`` would place it on: its receiver token and that shard."""
    shards = settings.shard_layout.shards
    _, counts = await store.owner_and_counts(appid, shards)
    shard = place(shards, counts).index
    return await store.register_instance(appid, account_id, shard), shard


def one_instance_per_shard(settings: Settings, sink_url: str, name: str) -> list[tuple[str, str, int]]:
    """An account ``name`` whose address is the sink, and as many instances as the deployment has shards, each
    registered where ``device/create`` places it: (appid, receiver token, shard) each."""
    async def action() -> list[tuple[str, str, int]]:
        async with sharded_store(settings) as store:
            account = await store.create_account(name)
            await store.set_callback(Scope(account=account.id), sink_url)
            appids = [f"we_{name}{n:04d}" for n in range(len(settings.shard_layout.shards))]
            return [(appid, *await register_placed(store, settings, account.id, appid)) for appid in appids]

    return run(action())


def sharded(env: dict[str, str], setting: str, **extra: str) -> dict[str, str]:
    """The test's ``env`` for a service on ``setting`` (``SVCGW_REDIS_SHARDS``) instead of its own Redis, plus
    ``extra`` settings."""
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    configured.update(SVCGW_REDIS_SHARDS=setting, **extra)
    return configured
