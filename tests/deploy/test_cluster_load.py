"""Concurrent posts on a real local Redis Cluster: none refused, every one delivered once.

Three masters started by the test (``--cluster-enabled yes``, joined with ``redis-cli --cluster
create``), sixteen virtual shards, a real ``svcgw serve`` and a real ``svcgw worker``, and 32
threads posting at once over 32 instances placed over the shards. The receiver sends the ingest
scripts of one turn of its event loop together (``svcgw.storage.scriptbatch``): on a Cluster, one
pipeline per master. Every post is acknowledged (no 503), none is counted in
``svcgw_posts_not_stored_total``, and the worker delivers each acknowledged event once.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from svcgw.config.settings import Settings
from svcgw.intake.receivers import RECEIVER_PREFIX
from svcgw.registry.store import Scope
from svcgw.shards.placement import shard_of_token
from tests.conftest import run
from tests.deploy.load import Load, event_ids
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture, register_placed, sharded_store
from tests.support import Process, Sink, free_port, wait_for

pytestmark = pytest.mark.slow

SHARDS = 16
INSTANCES = 32
POSTERS = 32
POSTS = 1600


cluster = cluster_fixture("module")


def _instances(settings: Settings, sink_url: str) -> dict[str, str]:
    """``INSTANCES`` instances of one account, placed as ``device/create`` places them: appid to token."""

    async def action() -> dict[str, str]:
        async with sharded_store(settings) as store:
            account = await store.create_account("cluster load", devices=None)
            await store.set_callback(Scope(account=account.id), sink_url)  # copied to every shard
            tokens = {}
            for n in range(INSTANCES):
                appid = f"we_load{n:02d}"
                tokens[appid] = (await register_placed(store, settings, account.id, appid))[0]
            return tokens

    return run(action())


def _serve(env: dict[str, str]) -> tuple[Process, str]:
    """``svcgw serve`` once its /readyz answers 200: on a loaded machine its start, which connects every
    virtual shard's client, can take longer than ``tests.support.start_server`` waits."""
    port = free_port()
    server = Process(["serve"], dict(env, SVCGW_PORT=str(port)), f"serve-{port}").start()
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if not server.alive():
            raise AssertionError(f"svcgw serve exited:\n{server.output()}")
        try:
            return httpx.get(f"{base}/readyz", timeout=2, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, timeout=120, interval=0.1, what="svcgw serve ready")
    except BaseException:
        print(server.output()[-3000:])
        server.stop()
        raise
    return server, base


def test_32_concurrent_posters_are_all_acknowledged_and_each_event_delivered_once(
    env: dict[str, str], cluster: RedisClusterFleet
) -> None:
    service_env = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    service_env.update(
        SVCGW_REDIS_SHARDS=cluster.setting,
        SVCGW_CLUSTER_SHARDS=str(SHARDS),
        SVCGW_RATE_LIMIT="100000/minute",
    )
    sink = Sink().start()
    tokens = _instances(Settings.from_env(service_env), sink.url)
    assert len({shard_of_token(token) for token in tokens.values()}) == SHARDS  # every virtual shard has some
    server, base = _serve(service_env)
    worker = Process(["worker"], service_env, "worker").start()
    try:
        urls = [f"{base}{RECEIVER_PREFIX}{appid}/{token}" for appid, token in tokens.items()]
        with Load(urls, prefix="c32", limit=POSTS, threads=POSTERS, duration=180) as load:
            wait_for(lambda: load.acked() + load.refusals() >= POSTS, timeout=180, what="the posts")
        assert (load.acked(), load.refusals()) == (POSTS, 0)
        acknowledged = set(load.acknowledged)
        wait_for(lambda: not acknowledged - set(event_ids(sink.posts())), timeout=120,
                 what="every acknowledged event delivered")  # fmt: skip
        delivered = event_ids(sink.posts())
        assert set(delivered) == acknowledged and set(delivered.values()) == {1}
        scrape = httpx.get(f"{base}/metrics", timeout=10).text  # loopback: no token needed
        families = {f.name: f for f in text_string_to_metric_families(scrape)}
        assert [s for s in families["svcgw_posts_not_stored"].samples if s.value] == []
        assert "post not stored" not in server.output()
    except BaseException:
        for process in (server, worker):
            print(f"--- {process.name}\n{process.output()[-3000:]}")
        raise
    finally:
        worker.stop()
        server.stop()
        sink.stop()
