"""A Redis at ``maxmemory`` with ``noeviction``: the receiver answers 503 with Retry-After and loses nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from redis import Redis

from receiver.app import create_app
from svcgw.config.settings import Settings
from svcgw.intake.calllog import body_of
from svcgw.intake.envelope import parse_post
from svcgw.storage import serverconfig
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.deploy.redis_nodes import Node, require_binaries
from tests.support import Sink, ThreadedServer, ThreadedWorker, wait_for

# A redis-server of its own: run by .ci/run with the rest; `-m 'not slow'` skips it.
pytestmark = pytest.mark.slow

# Room for this many bytes of posts above what the service's connections use at the start.
HEADROOM = 1024 * 1024


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[Node]:
    """A redis-server of the test's own, with the service's settings (noeviction among them)."""
    require_binaries("redis-server")
    node = Node("redis-server", tmp_path / "redis", ["--save", "", "--appendonly", "no", *serverconfig.server_args()])
    node.start()
    yield node
    node.kill()


def test_a_full_redis_refuses_posts_with_503_and_loses_none(
    env: dict[str, str], full_redis: Node, sink: Sink, tmp_path: Path
) -> None:
    own = Settings.from_env(dict(env, SVCGW_REDIS_URL=f"redis://{full_redis.address}/0"))
    tenant = provision(own, url=sink.url)
    # The real app and worker, in threads of the test process; the Redis is what this test is about.
    server = ThreadedServer(create_app(own)).start()
    base = server.base
    client: Redis = full_redis.client(decode_responses=False)
    acknowledged: list[str] = []
    try:
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        with httpx.Client(timeout=5) as http:
            # The first post opens the server's connections and loads the script: not a post's cost.
            first = orjson.dumps({"event_type": "Msg", "events": [{"id": "ev-first"}]})
            assert http.post(tenant.receiver_url(base), content=first).status_code == 200
            acknowledged.append("ev-first")
            client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + HEADROOM)
            refused = None
            for n in range(5000):  # about 1 KB each: far more than the headroom holds
                body = orjson.dumps({"event_type": "Msg", "events": [{"id": f"ev-{n}", "text": "x" * 900}]})
                answer = http.post(tenant.receiver_url(base), content=body)
                if answer.status_code != 200:
                    refused = (f"ev-{n}", body, answer)
                    break
                acknowledged.append(f"ev-{n}")
            assert refused is not None, "the posts never filled Redis"
            event_id, body, answer = refused
            assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
            assert answer.json()["code"] < 0 and answer.json()["data"] is None
            assert len(acknowledged) >= 20
            # Nothing of the refused post was stored: not in the log, its id not taken.
            entries = client.xrange(keys.callback_log(tenant.appid))
            logged = [orjson.loads(body_of(fields[b"body"]))["events"][0]["id"] for _, fields in entries]
            assert logged == acknowledged
            (refused_event,) = parse_post(body, max_bytes=len(body)).events
            windows = client.keys(keys.dedup_container(tenant.appid) + "*")
            assert windows and not any(client.hexists(key, refused_event.digest or b"") for key in windows)
        # Still full: the workers deliver what was acknowledged (claiming and finishing start
        # with commands that free memory, so Redis lets those scripts run).
        worker = ThreadedWorker(own).start()
        try:

            def delivered() -> list[str]:
                return [e["id"] for p in sink.posts() for e in orjson.loads(p.body)["events"]]

            wait_for(lambda: set(acknowledged) <= set(delivered()), timeout=60,
                     what=f"all {len(acknowledged)} acknowledged events to be delivered")  # fmt: skip
            # Room again: the sender's repeat is stored and delivered too.
            client.config_set("maxmemory", 0)
            with httpx.Client(timeout=5) as http:
                assert http.post(tenant.receiver_url(base), content=body).status_code == 200
            acknowledged.append(event_id)
            wait_for(lambda: event_id in delivered(), timeout=30, what="the repeat to be delivered")
        finally:
            worker.stop()
        assert sorted(delivered()) == sorted(acknowledged)
    finally:
        server.stop()
        client.close()
