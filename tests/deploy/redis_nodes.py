"""Redis servers and sentinels of a test's own: Debian's binaries, temporary directories, loopback ports.

Every process started here is stopped by the ``close()`` of what started
it, and the fixtures call that whatever happens to the test.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from redis import Redis
from redis.exceptions import RedisError

from svcgw.storage import serverconfig
from tests.support import free_port, missing_tool, wait_for

MASTER = "mymaster"


def require_binaries(*names: str) -> None:
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        missing_tool(f"needs {', '.join(missing)} (Debian: apt-get install -y redis-server redis-sentinel)")


class Node:
    """One ``redis-server`` or ``redis-sentinel`` process; it can be killed and started again on its port."""

    def __init__(self, binary: str, directory: Path, args: list[str], *, host: str = "127.0.0.1") -> None:
        self.binary = binary
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        # Below the ephemeral range, which outgoing connections draw from: a node killed and started
        # again finds its port free.
        self.port = free_port()
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [self.binary, *self.args, "--bind", self.host, "--port", str(self.port), "--dir", str(self.dir),
                "--logfile", str(self.dir / "log.txt")]  # fmt: skip

    def start(self) -> Node:
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        wait_for(self.answers, timeout=10, interval=0.05, what=f"{self.binary} on port {self.port}")
        return self

    def client(self, *, decode_responses: bool = False) -> Redis:
        return Redis(host=self.host, port=self.port, socket_connect_timeout=0.5, socket_timeout=2,
                     decode_responses=decode_responses)  # fmt: skip

    def answers(self) -> bool:
        """Whether this node's own process answers on its port (another's, on a port taken meanwhile, does not)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.binary} exited:\n{self.log()}")
        client = self.client()
        try:
            pid = client.info("server").get("process_id")
            return self.proc is None or pid == self.proc.pid
        except RedisError:
            return False
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last fsync, no goodbye to the replicas."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        path = self.dir / "log.txt"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


class SentinelCluster:
    """One primary, one replica and three sentinels that fail over within a few seconds."""

    def __init__(self, root: Path, *, fsync: str = "everysec") -> None:
        require_binaries("redis-server", "redis-sentinel")
        data = ["--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--protected-mode", "no"]
        self.master = Node("redis-server", root / "master", data)
        self.replica = Node("redis-server", root / "replica", data)
        self.sentinels = [Node("redis-sentinel", root / f"sentinel-{n}", []) for n in range(3)]
        self.nodes = [self.master, self.replica, *self.sentinels]

    def start(self) -> SentinelCluster:
        try:
            self.master.start()
            self.replica.args += ["--replicaof", self.master.host, str(self.master.port)]
            self.replica.start()
            wait_for(self._replica_in_sync, timeout=10, what="the replica to sync")
            for sentinel in self.sentinels:
                config = sentinel.dir / "sentinel.conf"
                # Sentinel rewrites its configuration file: it must be writable and its own.
                config.write_text(
                    f"sentinel monitor {MASTER} {self.master.host} {self.master.port} 2\n"
                    f"sentinel down-after-milliseconds {MASTER} 1000\n"
                    f"sentinel failover-timeout {MASTER} 4000\n"
                    f"sentinel parallel-syncs {MASTER} 1\n"
                )
                sentinel.args = [str(config)]
                sentinel.start()
            wait_for(self._sentinels_agree, timeout=15, what="the sentinels to see each other and the replica")
        except BaseException:
            self.close()
            raise
        return self

    @property
    def addresses(self) -> str:
        return ",".join(s.address for s in self.sentinels)

    def primary(self) -> tuple[str, int] | None:
        """The primary as the first answering sentinel names it."""
        for sentinel in self.sentinels:
            if sentinel.proc is None or sentinel.proc.poll() is not None:
                continue
            client = sentinel.client(decode_responses=True)
            try:
                host, port = cast(tuple[str, int], client.sentinel_get_master_addr_by_name(MASTER))
                return str(host), int(port)
            except (RedisError, ValueError, TypeError):
                continue
            finally:
                client.close()
        return None

    def node_at(self, address: tuple[str, int]) -> Node:
        return next(n for n in (self.master, self.replica) if (n.host, n.port) == address)

    def _replica_in_sync(self) -> bool:
        client = self.replica.client(decode_responses=True)
        try:
            return client.info("replication").get("master_link_status") == "up"
        except RedisError:
            return False
        finally:
            client.close()

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            client = sentinel.client(decode_responses=True)
            try:
                state = cast(dict[str, Any], client.sentinel_master(MASTER))
                if int(state["num-other-sentinels"]) < 2 or int(state["num-slaves"]) < 1:
                    return False
            except RedisError:
                return False
            finally:
                client.close()
        return True

    def wait_for_failover(self, old: tuple[str, int], timeout: float = 30) -> tuple[str, int]:
        def promoted() -> tuple[str, int] | None:
            current = self.primary()
            if current is None or current == old:
                return None
            client = self.node_at(current).client(decode_responses=True)
            try:
                return current if client.info("replication").get("role") == "master" else None
            except RedisError:
                return None
            finally:
                client.close()

        started = time.monotonic()
        new = wait_for(promoted, timeout=timeout, interval=0.1, what="a promoted replica")
        print(f"failover: {old[1]} -> {new[1]} in {time.monotonic() - started:.1f}s")
        return new

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.kill()


@contextmanager
def plain_server(directory: Path) -> Iterator[Node]:
    """A redis-server of a test's own, as the service configures one, nothing on disk; killed after."""
    require_binaries("redis-server")
    started = Node("redis-server", directory, ["--save", "", "--appendonly", "no", *serverconfig.server_args()])
    started.start()
    try:
        yield started
    finally:
        started.kill()
