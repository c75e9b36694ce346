"""``svcgw up --demo`` on a real local Redis Cluster: the demo data is prepared, its traffic delivered,
and what it prints for the command line names the Cluster."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.cli.commands import ok
from tests.deploy.redis_fleet import RedisClusterFleet
from tests.support import Process, free_port, wait_for

pytestmark = pytest.mark.slow


def test_up_demo_on_a_cluster_prepares_the_demo_and_names_the_cluster(env: dict[str, str], tmp_path: Path) -> None:
    cluster = RedisClusterFleet(tmp_path / "cluster").start()
    port, sim_port = free_port(), free_port()
    up_env = {k: v for k, v in env.items() if k not in ("SVCGW_REDIS_URL", "SVCGW_UPSTREAM_URL")}
    up_env.update(
        SVCGW_REDIS_SHARDS=cluster.setting,
        SVCGW_CLUSTER_SHARDS="4",
        SVCGW_PORT=str(port),
        SVCGW_SIM_PORT=str(sim_port),
        SVCGW_PUBLIC_URL=f"http://127.0.0.1:{port}",
    )
    sim = f"http://127.0.0.1:{sim_port}"
    up = Process(["up", "--demo"], up_env, "up").start()
    try:

        def msg_callbacks() -> list[dict[str, str]]:
            if not up.alive():
                raise AssertionError(f"up exited:\n{up.output()}")
            try:
                entries = httpx.get(f"{sim}/_sim/sink", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return []
            return [e for e in entries if json.loads(e["body"]).get("event_type") == "Msg"]

        wait_for(msg_callbacks, timeout=90, interval=0.2, what="a signed Msg callback of the demo at the sink")
        output = wait_for(lambda: "svcgw is up" in up.output() and up.output(), timeout=30, what="svcgw is up")
        assert "could not prepare the demo data" not in output, output
        assert f"export SVCGW_REDIS_SHARDS={cluster.setting}" in output and "export SVCGW_CLUSTER_SHARDS=4" in output
        assert "export SVCGW_REDIS_URL" not in output
        # The printed settings are what the commands need: they find the demo's instance.
        commands = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
        commands.update(SVCGW_REDIS_SHARDS=cluster.setting, SVCGW_CLUSTER_SHARDS="4")
        listed = ok(commands, "instances", "list")
        assert len(listed) == 1 and listed[0]["appid"] in output
    except BaseException:
        print(up.output()[-4000:])
        raise
    finally:
        up.stop(timeout=60)
        cluster.close()
