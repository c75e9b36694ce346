"""A claim whose attempt never ends is found by the engine, handed back, logged, counted and shown by /readyz.

The engine runs in a thread of the test process on the test's Redis. Its sender's first POST
never returns, whatever its timeout (the attempt's task waits for ever, as one waited on an
outcome that was never stored after a Cluster failover); the later POSTs answer 200 once the
test lets them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping

import pytest
from redis import Redis
from starlette.testclient import TestClient

from receiver.app import create_app
from svcgw.callbacks.outbound import Response
from svcgw.config.settings import Settings
from svcgw.counters import STRANDED
from svcgw.delivery import stranded
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.support import LogCapture, wait_for
from tests.worker.test_engine import Running, _post
from worker.concurrencycaps import LINE_WAIT

TOKEN = "m" * 32


class FirstHangs:
    """A sender whose first POST never returns; the others answer 200 once ``answer`` is set."""

    timeout = 0.5

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.calls = 0

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        self.calls += 1
        if self.calls == 1:
            await asyncio.Event().wait()  # never set: the attempt's task waits for ever
        while not self.answer.is_set():
            await asyncio.sleep(0.01)
        return Response(200, "ok")

    async def aclose(self) -> None:
        return None


@pytest.fixture
def quick(env: dict[str, str]) -> Settings:
    return Settings.from_env(
        {**env, "SVCGW_LEASE_SECONDS": "1", "SVCGW_DELIVERY_TIMEOUT": "0.5", "SVCGW_METRICS_TOKEN": TOKEN}
    )


def test_a_claim_whose_attempt_never_ends_is_handed_back_counted_and_shown_until_attempted(
    quick: Settings, redis: Redis
) -> None:
    tenant = provision(quick, url="http://127.0.0.1:9/hook")
    delivery_id = _post(quick, tenant, "x1")
    sender = FirstHangs()
    logs = LogCapture()
    logging.getLogger("svcgw.delivery").addHandler(logs)
    try:
        with Running(quick, client=sender), TestClient(create_app(quick)) as client:
            # Handed back after the lease, the longest attempt and some slack, and claimed again.
            wait_for(lambda: redis.hexists(keys.stranded, delivery_id), timeout=20, what="the hand-back noted")
            wait_for(lambda: sender.calls >= 2, timeout=10, what="a second attempt")
            assert "1 deliveries held for more than" in logs.output() and delivery_id in logs.output()
            assert int(redis.hget(keys.metrics_counters, STRANDED) or 0) == 1
            scrape = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
            assert f"svcgw_{STRANDED}_total 1.0" in scrape
            ready = client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["status"] == "degraded" and ready.json()["stranded"] == [0]

            # Its next attempt is recorded: the shard's record is resolved, /readyz is ok again.
            sender.answer.set()
            wait_for(lambda: not redis.exists(keys.rq.job(delivery_id)), timeout=10, what="the delivery")
            wait_for(lambda: not redis.exists(keys.stranded), timeout=stranded.RESOLVE_EVERY + 5,
                     what="the record resolved")  # fmt: skip
            ready = client.get("/readyz")
            assert ready.json()["status"] == "ok" and "stranded" not in ready.json()
    finally:
        logging.getLogger("svcgw.delivery").removeHandler(logs)
    assert redis.zcard(keys.inflight(quick.queue_name)) == 0
    assert sender.calls == 2  # handed back once, attempted once more: no third


def test_the_longest_hold_is_the_lease_the_longest_attempt_and_some_slack(quick: Settings) -> None:
    assert stranded.ceiling(quick, LINE_WAIT) == 1 + LINE_WAIT + 0.5 + stranded.SLACK
    held = {"old": 0.0, "waiting": 0.0, "new": 9.0}
    assert stranded.overdue(held, 10.0, 5.0, exempt={"waiting"}) == ["old"]
