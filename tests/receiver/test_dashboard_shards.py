"""rq-dashboard per shard under concurrent requests: each answer is its own shard's.

rq-dashboard keeps the Redis of the request's shard on the Flask app itself
(``current_app.redis_conn``, set before each request), so two requests for
different shards at once could read each other's. Its page sends several at
once, and an operator may have a page of each shard open.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from rq.job import Job
from rq.queue import Queue

from receiver.app import create_app
from svcgw.config.settings import Settings
from svcgw.storage.rqformat import FUNC_NAME, SERIALIZER
from tests.deploy.redis_fleet import RedisFleet
from tests.support import ThreadedServer

pytestmark = pytest.mark.slow

USER, PASSWORD = "operator", "dashboard-pass-123"
REQUESTS = 800


def test_concurrent_requests_for_two_shards_each_read_their_own(env: dict[str, str], tmp_path: Path) -> None:
    fleet = RedisFleet(tmp_path / "fleet", 2).start()
    try:
        for shard, node in enumerate(fleet.nodes):
            client = node.client()
            # A queued job only this shard has, as RQ writes it.
            job = Job.create(FUNC_NAME, args=[shard], id=f"only{shard}", connection=client, serializer=SERIALIZER)
            Queue("svcgw", connection=client, serializer=SERIALIZER).enqueue_job(job)
            client.close()
        configured = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
        configured.update(
            SVCGW_REDIS_SHARDS=fleet.setting, SVCGW_DASHBOARD_USER=USER, SVCGW_DASHBOARD_PASSWORD=PASSWORD
        )
        served = ThreadedServer(create_app(Settings.from_env(configured))).start()
        try:
            with httpx.Client(timeout=30, auth=(USER, PASSWORD)) as http:

                def read(n: int) -> tuple[int, list[str]]:
                    shard = n % 2
                    answer = http.get(f"{served.base}/rq/{shard}/data/jobs/svcgw/queued/8/asc/1.json")
                    answer.raise_for_status()
                    return shard, [job["id"] for job in answer.json()["jobs"]]

                with ThreadPoolExecutor(16) as pool:
                    seen = list(pool.map(read, range(REQUESTS)))
        finally:
            served.stop()
    finally:
        fleet.close()
    wrong = [(shard, names) for shard, names in seen if names != [f"only{shard}"]]
    assert not wrong, f"{len(wrong)} of {REQUESTS} answers read another shard: {wrong[:3]}"
