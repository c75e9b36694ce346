"""``svcgw up --demo`` on a real local Redis Cluster: the demo data is prepared, its traffic delivered,
and what it prints for the command line names the Cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.commands import ok
from tests.deploy.redis_fleet import RedisClusterFleet
from tests.support import start_up_demo, wait_for

pytestmark = pytest.mark.slow


def test_up_demo_on_a_cluster_prepares_the_demo_and_names_the_cluster(env: dict[str, str], tmp_path: Path) -> None:
    cluster = RedisClusterFleet(tmp_path / "cluster").start()
    demo = start_up_demo(env, SVCGW_REDIS_SHARDS=cluster.setting, SVCGW_CLUSTER_SHARDS="4")
    up = demo.process
    try:
        demo.wait_for_msg(timeout=90)
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
