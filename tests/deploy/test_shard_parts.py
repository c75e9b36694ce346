"""The parts of a sharded deployment, on two ``redis-server``s of the test's own.

The receiver routes by the token's shard and refuses a shard it does not
have; callback settings are copied where the delivery claim reads them; a
worker started while a shard is down delivers for the other at once and for
that one once it is back; ``/metrics`` sums the shards and says which
answered; ``/readyz`` is degraded (still ready) while a shard other than 0
does not answer, and names it by its index.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from receiver.app import create_app
from svcgw.config.settings import Settings
from svcgw.registry.store import Scope
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, run
from tests.deploy.redis_fleet import RedisFleet, sharded_store
from tests.deploy.redis_nodes import Node
from tests.support import Sink, ThreadedServer, ThreadedWorker, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[RedisFleet]:
    with RedisFleet(tmp_path / "fleet", 2).start() as nodes:
        yield nodes


@pytest.fixture
def two(env: dict[str, str], fleet: RedisFleet) -> Settings:
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    return Settings.from_env({**configured, "SVCGW_REDIS_SHARDS": fleet.setting})


def on_shards(settings: Settings, url: str) -> tuple[Tenant, Tenant]:
    """An account whose default address is ``url``, with one instance on each shard."""

    async def action() -> tuple[Tenant, Tenant]:
        async with sharded_store(settings) as store:
            account = await store.create_account("two shards")
            await store.set_callback(Scope(account=account.id), url)
            zero = await store.register_instance("we_zero", account.id, 0)
            one = await store.register_instance("we_one", account.id, 1)
            return Tenant(account.id, "we_zero", zero), Tenant(account.id, "we_one", one)

    return run(action())


def post(url: str, event_id: str) -> int:
    body = orjson.dumps({"event_type": "Msg", "events": [{"id": event_id}]})
    return httpx.post(url, content=body, timeout=10).status_code


def delivered(sink: Sink) -> set[str]:
    return {str(event["id"]) for p in sink.posts() for event in orjson.loads(p.body)["events"]}


def test_posts_go_to_their_tokens_shard_and_a_shard_the_deployment_lacks_is_no_receiver(
    two: Settings, fleet: RedisFleet, sink: Sink
) -> None:
    zero, one = on_shards(two, sink.url)
    with_dashboard = replace(two, dashboard_user="operator", dashboard_password="dashboard-pass-123")
    server = ThreadedServer(create_app(with_dashboard)).start()
    try:
        assert one.receiver_token.startswith("s1.")
        assert post(zero.receiver_url(server.base), "a") == 200
        assert post(one.receiver_url(server.base), "b") == 200
        secret = one.receiver_token.removeprefix("s1.")
        assert post(f"{server.base}/svc/receiver/we_one/s7.{secret}", "c") == 404  # no shard 7 here
        assert post(f"{server.base}/svc/receiver/we_one/{secret}", "d") == 404  # shard 0 has no such token
        assert post(one.receiver_url(server.base), "e") == 200
        # rq-dashboard switches between the shards: its instance number is the shard's index.
        auth = ("operator", "dashboard-pass-123")
        for shard, queued in ((0, 1), (1, 2)):
            data = httpx.get(f"{server.base}/rq/{shard}/data/queues.json", auth=auth, timeout=10).json()
            assert [q["count"] for q in data["queues"] if q["name"] == "svcgw"] == [queued]
    finally:
        server.stop()
    first, second = (node.client() for node in fleet.nodes)
    try:
        assert first.exists(keys.callback_log("we_zero")) and not second.exists(keys.callback_log("we_zero"))
        assert second.exists(keys.callback_log("we_one")) and not first.exists(keys.callback_log("we_one"))
        assert first.llen("rq:queue:svcgw") == 1 and second.llen("rq:queue:svcgw") == 2
    finally:
        first.close()
        second.close()


def test_callback_settings_are_copied_to_the_shards_whose_claims_read_them(two: Settings, fleet: RedisFleet) -> None:
    zero, one = on_shards(two, "http://127.0.0.1:9/default")
    first, second = (node.client(decode_responses=True) for node in fleet.nodes)

    async def change(step: str) -> None:
        async with sharded_store(two) as store:
            if step == "own":
                await store.set_callback(Scope(appid="we_one"), "http://127.0.0.1:9/own", bearer_token="t0ken")
            elif step == "rotate":
                await store.rotate_secret(Scope(account=zero.account))
            else:
                await store.clear_callback(Scope(appid="we_one"))

    try:
        account_key = keys.callback_account(zero.account)
        assert second.hgetall(account_key) == first.hgetall(account_key) != {}
        assert second.hgetall(keys.instance("we_one")) == {"account": one.account, "shard": "1"}
        run(change("own"))
        own = keys.callback_instance("we_one")
        assert second.hgetall(own) == first.hgetall(own) and second.hget(own, "url") == "http://127.0.0.1:9/own"
        assert not any(c.exists(keys.callback_instance("we_zero")) for c in (first, second))
        before = second.hget(account_key, "secret")
        run(change("rotate"))
        assert second.hget(account_key, "secret") == first.hget(account_key, "secret") != before
        run(change("clear"))
        assert second.hget(own, "url") is None and second.hgetall(own) == first.hgetall(own)
    finally:
        first.close()
        second.close()


def test_a_worker_started_with_a_shard_down_delivers_the_other_and_that_one_once_back(
    two: Settings, fleet: RedisFleet, sink: Sink
) -> None:
    zero, one = on_shards(two, sink.url)
    server = ThreadedServer(create_app(two)).start()
    fleet.nodes[1].kill()
    worker = ThreadedWorker(two).start()
    try:
        assert post(one.receiver_url(server.base), "lost") == 503  # not stored, so not acknowledged
        assert post(zero.receiver_url(server.base), "first") == 200
        wait_for(lambda: "first" in delivered(sink), timeout=15, what="shard 0 delivering with shard 1 down")
        scrape = httpx.get(f"{server.base}/metrics", timeout=10)
        assert scrape.status_code == 200 and 'svcgw_shard_up{shard="1"} 0.0' in scrape.text
        assert 'svcgw_shard_up{shard="0"} 1.0' in scrape.text

        fleet.nodes[1].start()  # same port, empty: the registry's copies were on it (ephemeral), so rewrite them
        run(_recopy(two, one))
        assert post(one.receiver_url(server.base), "second") == 200
        wait_for(lambda: "second" in delivered(sink), timeout=20, what="shard 1 delivering once back")
        assert worker.alive() and "lost" not in delivered(sink)
        scrape = httpx.get(f"{server.base}/metrics", timeout=10)
        assert 'svcgw_shard_up{shard="1"} 1.0' in scrape.text
    finally:
        worker.stop()
        server.stop()
    assert worker.error is None, worker.output()


async def _recopy(settings: Settings, tenant: Tenant) -> None:
    async with sharded_store(settings) as store:
        assert store.copies is not None
        await store.copies.instance(tenant.appid, tenant.account, tenant.receiver_token, 1)
        await store.copies.callback(Scope(account=tenant.account))


def test_readyz_names_the_shard_that_does_not_answer_and_stays_ready_while_shard_0_answers(
    env: dict[str, str], fleet: RedisFleet
) -> None:
    second = fleet.nodes[1]
    with_password(second)  # which /readyz must never show
    configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    shards = f"{fleet.urls()[0]} {fleet.urls(password='hunter2')[1]}"
    server = ThreadedServer(create_app(Settings.from_env({**configured, "SVCGW_REDIS_SHARDS": shards}))).start()

    def ready() -> httpx.Response:
        return httpx.get(f"{server.base}/readyz", timeout=10)

    try:
        both = ready()
        assert both.status_code == 200
        shards_ok = [{"shard": 0, "redis": "ok"}, {"shard": 1, "redis": "ok"}]
        assert both.json() == {"status": "ok", "redis": "ok", "shards": shards_ok, "unreachable": []}
        second.kill()
        down = ready()
        assert down.status_code == 200  # still ready: shard 0, which every gateway call reads, answers
        shards_down = [{"shard": 0, "redis": "ok"}, {"shard": 1, "redis": "unreachable"}]
        degraded = {"status": "degraded", "redis": "unreachable"}
        assert down.json() == {**degraded, "shards": shards_down, "unreachable": [1]}
        assert "hunter2" not in down.text and "redis://" not in down.text and str(second.port) not in down.text
        with_password(second.start())  # empty, as a new server
        wait_for(lambda: ready().json()["status"] == "ok", timeout=10, what="/readyz once shard 1 is back")
        fleet.nodes[0].kill()
        first_down = ready()
        assert first_down.status_code == 503 and first_down.json()["status"] == "unavailable"
        assert first_down.json()["unreachable"] == [0]
    finally:
        server.stop()


def with_password(node: Node) -> None:
    client = node.client()
    try:
        client.config_set("requirepass", "hunter2")
    finally:
        client.close()


def test_a_post_to_a_shard_that_is_down_is_refused_logged_with_its_cause_and_counted_on_shard_0(
    two: Settings, fleet: RedisFleet, sink: Sink, caplog: pytest.LogCaptureFixture
) -> None:
    zero, one = on_shards(two, sink.url)
    server = ThreadedServer(create_app(two)).start()
    try:
        assert post(one.receiver_url(server.base), "before") == 200
        fleet.nodes[1].kill()
        with caplog.at_level(logging.INFO, logger="svcgw.receiver"):
            assert [post(one.receiver_url(server.base), f"down-{i}") for i in range(3)] == [503] * 3
            assert post(zero.receiver_url(server.base), "zero") == 200  # the other shard takes its posts
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("post not stored")]
        assert len(lines) == 1 and lines[0].startswith("post not stored, answered 503: ConnectionError: "), lines

        def not_stored() -> float | None:
            scrape = httpx.get(f"{server.base}/metrics", timeout=10).text
            (family,) = [f for f in text_string_to_metric_families(scrape) if f.name == "svcgw_posts_not_stored"]
            counted = {sample.labels["cause"]: sample.value for sample in family.samples}
            return counted.get("ConnectionError") or None

        # Counted as they are answered, in the background: read until all three are there.
        wait_for(lambda: not_stored() == 3, timeout=10, what="the three refusals counted in /metrics")
    finally:
        server.stop()
