"""rq-dashboard at ``/rq`` in real headless Chromium, as an operator meets it.

Behind its Basic credentials, against the real app served by uvicorn, a real
worker and a real Redis (and, per shard, two ``redis-server``s): its Queues,
Workers and Jobs tables fill, a dead letter says why it died, and no page
raises an error or breaks its Content-Security-Policy. Its JSON answers alone
(``tests/receiver/test_dashboard.py``) cannot tell: the tables are built by
the page's scripts, which the policy must let run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis
from rq.job import Job
from rq.queue import Queue

from receiver.app import create_app
from svcgw.config.settings import Settings
from svcgw.registry.store import Scope
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import FUNC_NAME, SERIALIZER
from tests.conftest import provision, run
from tests.deploy.redis_fleet import RedisFleet, register_placed, sharded_store
from tests.receiver.console.test_browser import ARGS, CHROMIUM, HAS_CHROMIUM, NO_CHROMIUM
from tests.support import Sink, ThreadedServer, ThreadedWorker, missing_tool, tools_required, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_CHROMIUM and not tools_required(), reason=NO_CHROMIUM),
]

USER, PASSWORD = "operator", "dashboard-pass-123"

# Installed before any script of a page runs: a policy violation is recorded even when no script reports it.
WATCH_POLICY = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__violations.push(e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile);
});
"""


def with_dashboard(env: dict[str, str]) -> dict[str, str]:
    return dict(env, SVCGW_DASHBOARD_USER=USER, SVCGW_DASHBOARD_PASSWORD=PASSWORD)


@contextmanager
def chromium() -> Iterator[Any]:
    """Entered after every setup that uses asyncio: Playwright runs an event loop in this thread."""
    from playwright.sync_api import sync_playwright

    if not HAS_CHROMIUM:
        missing_tool(NO_CHROMIUM)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield launched
        launched.close()


class Operator:
    """One signed-in browser context; every page error, console error and policy violation is kept."""

    def __init__(self, browser: Any, base: str) -> None:
        self.base = base
        self.problems: list[str] = []
        self.context = browser.new_context(http_credentials={"username": USER, "password": PASSWORD})
        self.context.add_init_script(WATCH_POLICY)
        self.page = self.context.new_page()
        self.page.set_default_timeout(20_000)
        self.page.on("console", lambda m: self.problems.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda error: self.problems.append(str(error)))

    def open(self, path: str, filled: str) -> Any:
        """Open ``/rq<path>`` and wait for a row matching ``filled`` in place of "Loading…"."""
        self.page.goto(self.base + "/rq" + path)
        self.page.wait_for_selector(filled)
        self.check()
        return self.page

    def check(self) -> None:
        violations = self.page.evaluate("window.__violations")
        assert not violations and not self.problems, (violations, self.problems)

    def close(self) -> None:
        self.check()
        self.context.close()


def dead_letter(settings: Settings, sink: Sink, server: str, redis: Redis) -> str:
    """One delivery that failed every attempt at the sink (HTTP 500): its id."""
    tenant = provision(settings, sink.url)
    body = b'{"event_type":"Msg","events":[{"id":"dead1"}]}'
    httpx.post(tenant.receiver_url(server), content=body, timeout=10).raise_for_status()
    wait_for(lambda: redis.zcard(keys.rq.failed("svcgw")) == 1, timeout=40, what="a dead letter")
    (member,) = redis.zrange(keys.rq.failed("svcgw"), 0, -1)
    return str(member.decode())


def test_the_dashboard_fills_its_tables_in_a_browser_and_shows_why_a_dead_letter_died(
    env: dict[str, str], redis: Redis, sink: Sink
) -> None:
    configured = with_dashboard(env)
    settings = Settings.from_env(configured)
    served = ThreadedServer(create_app(settings)).start()
    server = served.base
    worker = ThreadedWorker(settings).start()
    try:
        sink.set(status=500)
        delivery = dead_letter(settings, sink, server, redis)
        with chromium() as browser:
            operator = Operator(browser, server)
            queues = operator.open("/", "table#queues tr[data-role=queue]")
            row = queues.inner_text("table#queues tr[data-role=queue]")
            assert row.split()[0] == "svcgw" and "Loading" not in queues.inner_text("table#queues")

            workers = operator.open("/0/view/workers", "table#workers tr[data-role=worker]")
            assert "svcgw" in workers.inner_text("table#workers tr[data-role=worker]")

            failed = operator.open("/0/view/jobs/svcgw/failed/8/asc/1", "table#jobs tr[data-role=job]")
            job = failed.locator(f"table#jobs tr[data-job-id='{delivery}']")
            assert "HTTP 500" in job.locator("pre.exc_info").inner_text()
            assert "Msg for " in job.locator(".description").inner_text()

            one = operator.open(f"/0/view/job/{delivery}", "#job-data pre.exc_info")
            why = one.inner_text("#job-data pre.exc_info")
            assert "HTTP 500" in why and "attempt 7" in why and delivery in why
            assert "Msg for " in one.inner_text("#job-data .description-scroll")
            operator.close()
    finally:
        worker.stop()
        served.stop()


def one_instance_per_shard(settings: Settings, url: str, shards: int) -> dict[int, tuple[str, str]]:
    """An instance on each shard, placed as ``device/create`` places them, sending to ``url``: shard -> appid, token."""

    async def action() -> dict[int, tuple[str, str]]:
        async with sharded_store(settings) as store:
            account = await store.create_account("shards")
            await store.set_callback(Scope(account=account.id), url)  # copied to every shard
            placed: dict[int, tuple[str, str]] = {}
            for n in range(8 * shards):
                appid = f"we_dash{n:04d}"
                token, shard = await register_placed(store, settings, account.id, appid)
                placed.setdefault(shard, (appid, token))
                if len(placed) == shards:
                    return placed
            raise AssertionError(f"instances placed on shards {sorted(placed)} only")

    return run(action())


def test_the_dashboard_fills_its_tables_for_each_shard(env: dict[str, str], tmp_path: Path, sink: Sink) -> None:
    fleet = RedisFleet(tmp_path / "fleet", 2).start()
    try:
        configured = {k: v for k, v in with_dashboard(env).items() if k != "SVCGW_REDIS_URL"}
        configured["SVCGW_REDIS_SHARDS"] = fleet.setting
        settings = Settings.from_env(configured)
        placed = one_instance_per_shard(settings, sink.url, 2)
        sink.set(status=503)
        served = ThreadedServer(create_app(settings)).start()
        server = served.base
        worker = ThreadedWorker(settings).start()
        clients = [node.client() for node in fleet.nodes]
        try:
            for appid, token in placed.values():
                body = b'{"event_type":"Msg","events":[{"id":"dead1"}]}'
                httpx.post(f"{server}/svc/receiver/{appid}/{token}", content=body, timeout=10).raise_for_status()
            for shard, client in enumerate(clients):
                failed = keys.rq.failed(settings.queue_name)
                wait_for(lambda c=client: c.zcard(failed) == 1, timeout=40, what=f"a dead letter on shard {shard}")
            with chromium() as browser:
                operator = Operator(browser, server)
                for shard in (0, 1):
                    queues = operator.open(f"/{shard}/view/queues", "table#queues tr[data-role=queue]")
                    assert "Loading" not in queues.inner_text("table#queues")
                    workers = operator.open(f"/{shard}/view/workers", "table#workers tr[data-role=worker]")
                    assert "svcgw" in workers.inner_text("table#workers tr[data-role=worker]")
                    jobs = operator.open(f"/{shard}/view/jobs/svcgw/failed/8/asc/1", "table#jobs tr[data-role=job]")
                    (row,) = jobs.locator("table#jobs tr[data-role=job]").all()
                    assert placed[shard][0] in row.locator(".description").inner_text()
                    assert "HTTP 503" in row.locator("pre.exc_info").inner_text()
                operator.close()
        finally:
            for client in clients:
                client.close()
            worker.stop()
            served.stop()
    finally:
        fleet.close()


def test_markup_in_job_data_still_does_not_run_under_the_dashboards_policy(env: dict[str, str], redis: Redis) -> None:
    """'unsafe-eval' lets the page compile its own templates; a job's description printed raw into the
    job's page (rq-dashboard does not escape it there) still runs nothing: no nonce."""
    markup = '<img src="x" onerror="window.__ran = 1"><script>window.__ran = 2</script>'
    job = Job.create(FUNC_NAME, args=["markup1"], id="markup1", description=markup, connection=redis,
                     serializer=SERIALIZER)  # fmt: skip
    Queue("svcgw", connection=redis, serializer=SERIALIZER).enqueue_job(job)
    served = ThreadedServer(create_app(Settings.from_env(with_dashboard(env)))).start()
    server = served.base
    try:
        with chromium() as browser:
            operator = Operator(browser, server)
            page = operator.open("/0/view/jobs/svcgw/queued/8/asc/1", "table#jobs tr[data-role=job]")
            assert markup in page.inner_text("table#jobs tr[data-job-id='markup1'] .description")
            page.goto(server + "/rq/0/view/job/markup1")
            page.wait_for_selector("#job-data .description-scroll img")
            wait_for(lambda: page.evaluate("window.__violations.length") >= 2, timeout=10, what="both blocked")
            assert page.evaluate("window.__ran") is None
            violations = page.evaluate("window.__violations")
            assert all(v.startswith(("script-src-attr", "script-src-elem")) for v in violations), violations
            operator.context.close()
    finally:
        served.stop()
