"""svcgw.delivery.recording: what a dead letter tells rq-dashboard (RQ's results stream: why it died, which delivery
it is), and the task that stores attempts' outcomes, which tries a batch again whatever a call raises.

That task's queue is a stand-in whose first call raises what redis-py's Cluster client raised for a
command cut off by a node's reset; the task ending there left every later attempt of the engine
waiting for ever, its delivery leased and never finished.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from rq.job import Job
from rq.results import Result

from svcgw.config.settings import Settings
from svcgw.delivery.attempt import Attempt, Prepared
from svcgw.delivery.queue import DeliveryQueue, Finish, Finished
from svcgw.delivery.recording import Outcomes, dead_letter_shown, why_dead
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.rqformat import SERIALIZER
from tests.conftest import provision
from tests.support import Sink, ThreadedWorker, free_port, is_delivered, wait_for
from tests.svcgw.delivery.test_deadletters import ingest, replay

T = TypeVar("T")


def attempt(**values: object) -> Attempt:
    return Attempt(**{"ok": False, "at": 1.0, "duration": 0.1, **values})


@pytest.mark.parametrize(
    ("tried", "said"),
    [
        (attempt(status=500, error="HTTP 500", destination="http://h/hook"), "HTTP 500 from http://h/hook"),
        (attempt(error="timed out after 2.0s", destination="http://h/hook", timed_out=True), "timed out after 2.0s"),
        (attempt(error="destination refused: 10.0.0.1 is private", destination="http://h/"), "refused: 10.0.0.1"),
        (attempt(status=502), "HTTP 502"),
        (attempt(error="no callback address configured"), "no callback address configured"),
    ],
)
def test_why_a_dead_letter_died_names_the_delivery_its_last_attempt_and_the_outcome(tried: Attempt, said: str) -> None:
    text = why_dead("we_x-1700000000000-0", 7, tried)
    assert text.startswith("delivery we_x-1700000000000-0 died after attempt 7: ") and said in text


def test_no_markup_reaches_the_dashboard_from_an_error_text() -> None:
    # rq-dashboard prints a job's exc_info into its page unescaped.
    text = why_dead("dlv_1", 1, attempt(error='Boom: <img src=x onerror="go()"> & more\nsecond line'))
    assert not set('<>&"\n') & set(text) and "img src=x" in text


def test_what_the_dashboard_is_given_is_rqs_failed_result_and_a_description_naming_the_delivery() -> None:
    prepared = Prepared("we_x-1-0_00ff", "we_x", "acc", "Msg", b"{}", 6, 6, 0.0, False, None, destination_id="dst_ab")
    why = why_dead(prepared.delivery_id, 7, attempt(status=500, error="HTTP 500"))
    shown = orjson.loads(dead_letter_shown(prepared, why))
    assert shown["d"] == "Msg for we_x to dst_ab"
    fields = dict(zip(shown["r"][::2], shown["r"][1::2], strict=True))
    result = Result.restore("we_x-1-0_00ff", "1-0", {k.encode(): v.encode() for k, v in fields.items()},
                            connection=Redis(), serializer=SERIALIZER)  # fmt: skip
    assert result.type == Result.Type.FAILED and result.exc_string is not None
    assert "HTTP 500" in result.exc_string and "attempt 7" in result.exc_string


def test_a_dead_letter_shows_why_it_died_in_rq_and_its_failure_goes_once_it_is_delivered(
    settings: Settings, redis: Redis, sink: Sink
) -> None:
    """As rq-dashboard reads it (``Job.latest_result``); replayed and delivered, nothing of it is left."""
    tenant = provision(settings, url=sink.url)
    sink.set(status=500)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"why1"}]}')
    worker = ThreadedWorker(settings).start()
    try:
        wait_for(lambda: redis.zcard(keys.rq.failed(settings.queue_name)) == 1, timeout=30, what="a dead letter")
        job = Job.fetch(delivery_id, connection=redis, serializer=SERIALIZER)
        result = job.latest_result()
        assert result is not None and result.type == Result.Type.FAILED
        assert result.exc_string == f"delivery {delivery_id} died after attempt 7: HTTP 500 from {sink.url}"
        assert job.description == f"Msg for {tenant.appid}"
        # Kept as long as the dead letter, written back compact: a new stream's node is 4 KB allocated up front.
        assert abs(redis.ttl(keys.rq.result(delivery_id)) - redis.ttl(keys.rq.job(delivery_id))) <= 1
        usage = redis.memory_usage(keys.rq.result(delivery_id), samples=0)
        assert usage is not None and usage < 1500, usage

        sink.set(status=200)
        assert [r.status for r in replay(settings, ids=[delivery_id])] == ["replayed"]
        wait_for(lambda: is_delivered(redis, delivery_id), timeout=30, what="the replayed delivery")
    finally:
        worker.stop()
    assert not redis.exists(keys.rq.result(delivery_id))


def test_a_dead_letter_to_an_address_that_refuses_connections_says_so(settings: Settings, redis: Redis) -> None:
    closed = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    tenant = provision(settings, url=closed)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"why2"}]}')
    worker = ThreadedWorker(settings).start()
    try:
        wait_for(lambda: redis.zcard(keys.rq.failed(settings.queue_name)) == 1, timeout=30, what="a dead letter")
    finally:
        worker.stop()
    result = Job.fetch(delivery_id, connection=redis, serializer=SERIALIZER).latest_result()
    assert result is not None and result.exc_string is not None
    assert result.exc_string.startswith(f"delivery {delivery_id} died after attempt 7: ")
    assert "refused" in result.exc_string.lower() and result.exc_string.endswith(f"from {closed}")


# --- the task that stores outcomes ------------------------------------------------------------
class FailsFirst:
    """A queue whose first ``finish_detailed`` raises ``error``; the later ones store every item."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls: list[list[str]] = []

    async def finish_detailed(self, items: Sequence[Finish]) -> list[Finished]:
        self.calls.append([item.delivery_id for item in items])
        if len(self.calls) == 1:
            raise self.error
        return [Finished(held=True) for _ in items]


@pytest.mark.parametrize("error", [AttributeError("'NoneType' object has no attribute 'writelines'"), KeyError("x")])
def test_an_unexpected_error_while_storing_is_retried_not_the_end_of_the_task(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    queue = FailsFirst(error)

    async def main() -> tuple[Finished, bool, bool]:
        outcomes = Outcomes(Settings(), queue, None)
        task = asyncio.create_task(outcomes.run())
        try:
            stored = await asyncio.wait_for(outcomes.finish(Finish("d1", "we_a", "drop")), timeout=10)
            return stored, task.done(), outcomes.stalled(time.monotonic(), 60)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    stored, ended, stalled = asyncio.run(main())
    assert stored.held and not ended and not stalled
    assert queue.calls == [["d1"], ["d1"]]
    assert f"could not record 1 attempts ({type(error).__name__}); retrying" in caplog.text


def test_ends_of_claims_handed_back_are_dropped_and_their_waiters_cancelled() -> None:
    async def main() -> tuple[set[str], bool, set[str]]:
        outcomes = Outcomes(Settings(), DeliveryQueue.__new__(DeliveryQueue), None)
        waiting = [asyncio.ensure_future(outcomes.finish(Finish(i, "we_a", "drop"))) for i in ("d1", "d2")]
        await asyncio.sleep(0)
        before = outcomes.waiting_ids()
        outcomes.forget({"d1"})
        await asyncio.sleep(0)
        cancelled = waiting[0].cancelled()
        waiting[1].cancel()
        return before, cancelled, outcomes.waiting_ids()

    before, cancelled, after = asyncio.run(main())
    assert before == {"d1", "d2"} and cancelled and after == {"d2"}


# --- attempts' outcomes told once their batch is stored --------------------------------------
class Held:
    """A queue whose ``finish_detailed`` stores nothing until ``release`` is set (Redis slow to answer)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[list[str]] = []

    async def finish_detailed(self, items: Sequence[Finish]) -> list[Finished]:
        self.calls.append([item.delivery_id for item in items])
        await self.release.wait()
        return [Finished(held=True) for _ in items]


def prepared(delivery_id: str) -> Prepared:
    return Prepared(delivery_id, "we_a", "acc_a", "Msg", b'{"events":[]}', 0, 0, 0.0, False, None)


def test_an_attempts_log_line_hook_and_end_wait_until_its_batch_is_stored(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="svcgw.delivery")
    told: list[tuple[str, str]] = []

    async def main() -> tuple[list[tuple[str, str]], set[str], list[list[str]]]:
        queue = Held()
        outcomes = Outcomes(
            Settings(), queue,
            lambda p, a, step: told.append(("hook " + step, p.delivery_id)),
            lambda delivery_id, finished, origin: told.append(("ended " + origin, delivery_id)),
        )  # fmt: skip
        task = asyncio.create_task(outcomes.run())
        try:
            for n in (1, 2, 3):
                outcomes.record(prepared(f"d{n}"), attempt(ok=True, status=200), origin="acc_a http://h:80")
            deadline = time.monotonic() + 10
            while not queue.calls and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            before = list(told)
            waiting = outcomes.waiting_ids()
            queue.release.set()
            await asyncio.wait_for(outcomes.drained(), timeout=10)
            return before, waiting, queue.calls
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    before, waiting, calls = asyncio.run(main())
    # Queued without waiting, stored in one call, and nothing told while Redis had not answered.
    assert before == [] and waiting == {"d1", "d2", "d3"} and calls == [["d1", "d2", "d3"]]
    assert told == [(kind, f"d{n}") for n in (1, 2, 3) for kind in ("hook delivered", "ended acc_a http://h:80")]
    lines = [r for r in caplog.records if r.getMessage() == "delivery attempt"]
    assert [(r.delivery_id, r.outcome, r.attempt, r.status) for r in lines] == [  # type: ignore[attr-defined]
        (f"d{n}", "delivered", 1, 200) for n in (1, 2, 3)
    ]


def test_an_outcome_redis_did_not_store_is_told_once_a_retry_stores_it() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    queue = FailsFirst(RedisConnectionError("reset"))
    ended: list[str] = []

    async def main() -> None:
        outcomes = Outcomes(Settings(), queue, None, lambda delivery_id, finished, origin: ended.append(delivery_id))
        task = asyncio.create_task(outcomes.run())
        try:
            outcomes.record(prepared("d1"), attempt(status=500, error="HTTP 500"))
            await asyncio.wait_for(outcomes.drained(), timeout=10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert queue.calls == [["d1"], ["d1"]] and ended == ["d1"]


def test_a_handed_back_claims_queued_end_is_neither_stored_nor_told() -> None:
    queue = Held()
    ended: list[str] = []

    async def main() -> list[list[str]]:
        outcomes = Outcomes(Settings(), queue, None, lambda delivery_id, finished, origin: ended.append(delivery_id))
        outcomes.record(prepared("d1"), attempt(ok=True, status=200))
        outcomes.end(Finish("d2", "we_a", "defer", due=time.time() + 1))
        outcomes.forget({"d1"})
        queue.release.set()
        task = asyncio.create_task(outcomes.run())
        try:
            await asyncio.wait_for(outcomes.drained(), timeout=10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return queue.calls

    assert asyncio.run(main()) == [["d2"]] and ended == ["d2"]


def test_an_outcome_queued_but_never_stored_leaves_the_delivery_to_be_handed_back(
    settings: Settings, redis: Redis
) -> None:
    """A worker killed between an attempt and the store of its batch: the claim is still leased in Redis, so
    the lease runs out and the job goes back to the queue, nothing counted or marked delivered."""
    tenant = provision(settings)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"crash1"}]}')
    told: list[str] = []

    async def killed(client: AsyncRedis) -> list[str]:
        queue = DeliveryQueue(client, keys, settings.queue_name, lease_seconds=0.2)
        claimed = await queue.claim_batch(10, "killed")
        outcomes = Outcomes(settings, queue, lambda p, a, step: told.append(p.delivery_id))
        # Its task never ran (the process died): the outcome stays queued in memory only.
        for job in claimed:
            outcomes.record(prepared(job.delivery_id), attempt(ok=True, status=200))
        return [job.delivery_id for job in claimed]

    assert asyncio.run(with_client(settings, killed)) == [delivery_id]

    async def reclaimed(client: AsyncRedis) -> int:
        queue = DeliveryQueue(client, keys, settings.queue_name)
        return (await queue.reclaim_expired()).moved

    wait_for(lambda: asyncio.run(with_client(settings, reclaimed)) == 1, timeout=10, what="the lease to run out")
    assert redis.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [delivery_id.encode()]
    assert told == [] and not is_delivered(redis, delivery_id)


async def with_client(settings: Settings, action: Callable[[AsyncRedis], Awaitable[T]]) -> T:
    client = AsyncRedis.from_url(settings.redis_url or "")
    try:
        return await action(client)
    finally:
        await client.aclose()
