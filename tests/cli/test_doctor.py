"""``svcgw doctor``: each shard's Redis settings, what is wrong and how to fix it, non-zero when data can be lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.cli.commands import fails, ok, svcgw
from tests.deploy.redis_fleet import RedisClusterFleet
from tests.deploy.redis_nodes import Node, plain_server
from tests.support import free_port

# A redis-server of its own, whose settings the test changes: `-m 'not slow'` skips it.
pytestmark = pytest.mark.slow


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with plain_server(tmp_path / "redis") as started:
        yield started


def test_a_redis_with_the_services_settings_passes_with_its_advice(env: dict[str, str], node: Node) -> None:
    own = {**env, "SVCGW_REDIS_URL": f"redis://{node.address}/0"}
    (report,) = ok(own, "doctor")
    assert report["shard"] == 0 and report["error"] is None and report["name"] == own["SVCGW_REDIS_URL"]
    assert [(f["setting"], f["severity"], f["harmful"]) for f in report["findings"]] == [
        ("appendonly", "advice", False)
    ]
    table = svcgw(own, "doctor")
    assert table.exit_code == 0 and "appendonly" in table.stdout and "CONFIG SET appendonly yes" in table.stdout


def test_settings_that_lose_data_are_printed_with_their_fix_and_exit_1(env: dict[str, str], node: Node) -> None:
    admin = node.client()
    admin.config_set("maxmemory", "100mb")
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.close()
    own = {**env, "SVCGW_REDIS_URL": f"redis://{node.address}/0", "SVCGW_REDIS_PERSISTENCE": "required"}
    result = svcgw(own, "doctor")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "allkeys-lru" in result.stdout and "noeviction" in result.stdout and "appendonly" in result.stdout
    assert "2 Redis setting(s) can lose data" in result.stderr
    as_json = svcgw(own, "doctor", "--json")
    assert as_json.exit_code == 1
    (report,) = orjson.loads(as_json.stdout)
    harmful = [(f["setting"], f["severity"]) for f in report["findings"] if f["harmful"]]
    assert harmful == [("maxmemory-policy", "loses-data"), ("appendonly", "loses-data")]


def test_a_redis_refusing_config_is_said_to_be_unchecked_not_a_crash(env: dict[str, str], node: Node) -> None:
    admin = node.client()
    admin.acl_setuser(
        "limited",
        enabled=True,
        passwords=["+limited-password"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-config"],
    )
    admin.close()
    own = {**env, "SVCGW_REDIS_URL": f"redis://limited:limited-password@{node.address}/0"}
    (report,) = ok(own, "doctor")
    unchecked = [f for f in report["findings"] if f["severity"] == "unchecked"]
    assert [f["setting"] for f in unchecked] == ["CONFIG"] and "CONFIG GET was refused" in unchecked[0]["problem"]
    assert "limited-password" not in orjson.dumps(report).decode()


def test_a_shard_that_does_not_answer_is_not_checked_and_exits_1(env: dict[str, str]) -> None:
    stderr = fails({**env, "SVCGW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}, "doctor")
    assert "did not answer" in stderr


def test_a_bad_persistence_setting_names_itself(env: dict[str, str]) -> None:
    assert "SVCGW_REDIS_PERSISTENCE" in fails({**env, "SVCGW_REDIS_PERSISTENCE": "always"}, "doctor")


def test_on_a_cluster_each_virtual_shard_is_judged_on_its_own_master(env: dict[str, str], tmp_path: Path) -> None:
    cluster = RedisClusterFleet(tmp_path / "cluster").start()
    try:
        evicting = next(node for node in cluster.nodes if node.address in cluster.masters())
        admin = evicting.client()
        admin.config_set("maxmemory", "100mb")
        admin.config_set("maxmemory-policy", "allkeys-lru")
        admin.close()
        configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
        own = {**configured, "SVCGW_REDIS_SHARDS": cluster.setting, "SVCGW_CLUSTER_SHARDS": "8"}
        result = svcgw(own, "doctor", "--json")
        assert result.exit_code == 1, (result.stdout, result.stderr)
        reports = orjson.loads(result.stdout)
        assert [report["shard"] for report in reports] == list(range(8))
        assert all(report["error"] is None for report in reports)
        harmful = {report["shard"] for report in reports if any(f["harmful"] for f in report["findings"])}
        shards = shard_nodes(own)
        assert harmful == {shard for shard, node in shards.items() if node == evicting.address}
        assert harmful and harmful != set(range(8))  # three masters: some shards on each
    finally:
        cluster.close()


def shard_nodes(env: dict[str, str]) -> dict[int, str]:
    """Each virtual shard's master, as ``svcgw shards`` names it."""
    return {row["index"]: row["node"] for row in ok(env, "shards")}
