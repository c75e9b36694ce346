"""/healthz and /readyz: readiness is every shard's Redis answering, within a deadline, named by index only."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from receiver.app import create_app
from receiver.health import READY_TIMEOUT
from svcgw.config.settings import Settings
from svcgw.storage import serverconfig
from tests.deploy.redis_fleet import RedisFleet
from tests.deploy.redis_nodes import Node, require_binaries
from tests.support import ThreadedServer, ThreadedWorker, wait_for

ONE_OK = {"status": "ok", "redis": "ok", "shards": [{"shard": 0, "redis": "ok"}], "unreachable": []}
ONE_DOWN = {
    "status": "unavailable",
    "redis": "unreachable",
    "shards": [{"shard": 0, "redis": "unreachable"}],
    "unreachable": [0],
}


def test_with_one_shard_the_answers_are_those_of_before_with_the_shards_added(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == ONE_OK


def test_a_shard_that_does_not_answer_is_reported_within_the_deadline(
    env: dict[str, str], redis_url: str, silent: int
) -> None:
    hung = f"redis://:hunter2@127.0.0.1:{silent}/0"
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    settings = Settings.from_env({**configured, "SVCGW_REDIS_SHARDS": f"{redis_url} {hung}"})
    with TestClient(create_app(settings)) as client:
        started = time.monotonic()
        ready = client.get("/readyz")
        took = time.monotonic() - started
    assert ready.status_code == 200  # ready: shard 0 answers, and the gateway and shard 0's posts with it
    assert ready.json() == {
        "status": "degraded",
        "redis": "unreachable",
        "shards": [{"shard": 0, "redis": "ok"}, {"shard": 1, "redis": "unreachable"}],
        "unreachable": [1],
    }
    assert READY_TIMEOUT <= took < READY_TIMEOUT + 1.5, took  # the deadline, not the hung socket's
    assert "hunter2" not in ready.text and str(silent) not in ready.text


@pytest.mark.slow
def test_one_shard_going_down_and_coming_back(env: dict[str, str], tmp_path: Path) -> None:
    with RedisFleet(tmp_path / "fleet", 1).start() as fleet:
        settings = Settings.from_env({**env, "SVCGW_REDIS_URL": fleet.urls()[0]})
        server = ThreadedServer(create_app(settings)).start()
        try:
            ready = httpx.get(server.base + "/readyz", timeout=10)
            assert ready.status_code == 200 and ready.json() == ONE_OK
            fleet.nodes[0].kill()
            down = httpx.get(server.base + "/readyz", timeout=10)
            assert down.status_code == 503 and down.json() == ONE_DOWN
            fleet.nodes[0].start()
            wait_for(lambda: httpx.get(server.base + "/readyz", timeout=10).status_code == 200, timeout=10,
                     what="/readyz once the shard is back")  # fmt: skip
        finally:
            server.stop()


@pytest.mark.slow
def test_a_redis_that_evicts_is_warned_about_at_start_and_makes_readyz_degraded(
    env: dict[str, str], tmp_path: Path
) -> None:
    require_binaries("redis-server")
    node = Node("redis-server", tmp_path / "redis", ["--save", "", "--appendonly", "no", *serverconfig.server_args()])
    node.start()
    admin = node.client()
    try:
        admin.config_set("maxmemory", "200mb")
        admin.config_set("maxmemory-policy", "allkeys-lru")
        settings = Settings.from_env({**env, "SVCGW_REDIS_URL": f"redis://{node.address}/0"})
        app = create_app(settings)
        server = ThreadedServer(app).start()
        worker = ThreadedWorker(settings).start()
        try:
            ready = httpx.get(server.base + "/readyz", timeout=10)
            assert ready.status_code == 200, ready.text
            body = ready.json()
            assert body["status"] == "degraded" and body["unreachable"] == []
            ((finding),) = body["redis_settings"]
            assert (finding["shard"], finding["setting"], finding["severity"]) == (0, "maxmemory-policy", "loses-data")
            assert "allkeys-lru" in finding["problem"] and str(node.port) not in ready.text
            # Said in both roles' logs at start, with the fix.
            assert "maxmemory-policy is allkeys-lru" in server.output()
            assert "CONFIG SET maxmemory-policy noeviction" in server.output()
            warned = "maxmemory-policy is allkeys-lru"
            wait_for(lambda: warned in worker.output(), timeout=10, what="the worker's warning")

            admin.config_set("maxmemory-policy", "noeviction")
            app.state.redis_settings.max_age = 0  # read again now, not in 30 s
            wait_for(lambda: httpx.get(server.base + "/readyz", timeout=10).json() == ONE_OK, timeout=10,
                     what="/readyz once the policy is noeviction")  # fmt: skip
        finally:
            worker.stop()
            server.stop()
    finally:
        admin.close()
        node.kill()
