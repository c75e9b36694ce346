"""RQ's formats: what the service writes is what RQ's own API and command line read.

Each test writes through the service's own code (the receiver's ingest, the liveness queueing, the
worker's queue scripts, a real ``svcgw worker``) and reads back with RQ (``Job.fetch``, ``Queue``,
the registries, ``Worker.all``, ``rq info``, ``rq requeue``), so that an RQ release that changes a
format fails here rather than in production. The units at the top hold ``svcgw.storage.rqformat``'s
names to RQ's and to the Lua scripts' literals.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
import zlib
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.registry import DeferredJobRegistry, FailedJobRegistry, ScheduledJobRegistry
from rq.utils import utcformat
from rq.worker import Worker, WorkerStatus
from rq.worker_registration import WORKERS_BY_QUEUE_KEY

from svcgw.config.settings import Settings
from svcgw.delivery import chainkeys, failingorigins
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.queue import DeliveryQueue, Finish
from svcgw.delivery.queueing import queue_delivery
from svcgw.deliveryid import new_delivery_id
from svcgw.registry.store import Scope
from svcgw.storage import rqformat
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import (
    FUNC_NAME,
    SCRIPT_FIELDS,
    SCRIPT_STATUSES,
    SERIALIZER,
    WORKER_COUNTS,
    WORKER_CURRENT_JOB,
    WORKER_KEPT_DEAD,
    classes,
    exc_info_field,
    failed_score,
    job_description,
    job_fields,
    job_fields_by_rq,
    template,
    worker_death,
    worker_fields,
    worker_heartbeat,
)
from tests.conftest import Tenant, provision
from tests.support import Process, Sink, ThreadedWorker, is_delivered, missing_tool, wait_for
from tests.svcgw.delivery.fanout import ingest_fanned, kill_among
from tests.svcgw.delivery.test_deadletters import ingest, kill
from tests.worker.support import add_destination, claim, finish, with_queue
from worker.presence import Presence


# --- the job hash ------------------------------------------------------------------------
def test_job_fields_equal_what_rq_writes() -> None:
    moment = datetime(2026, 11, 22, 3, 44, 57, 123456)
    for delivery_id, description, queue, ttl in [
        ("dlv_0123456789abcdef01234567", "Msg for we_x", "svcgw", 2592000),
        ("dlv_ffffffffffffffffffffffff", "GapClosed for we_\u4f60", "other", 60),
    ]:
        ours = job_fields(delivery_id, queue_name=queue, description=description, failure_ttl=ttl, now=moment)
        theirs = job_fields_by_rq(delivery_id, queue_name=queue, description=description, failure_ttl=ttl, now=moment)
        # The data is compressed with a smaller window than RQ's (rqformat._compressed): the same
        # bytes once RQ decompresses them.
        assert zlib.decompress(ours.pop("data")) == zlib.decompress(theirs.pop("data"))
        assert ours == theirs


def test_a_stamp_and_data_are_rqs_to_the_byte() -> None:
    for moment in (datetime(2026, 1, 2, 3, 4, 5), datetime(2026, 11, 27, 23, 59, 59, 999999), datetime(1970, 1, 1)):
        assert job_fields("dlv_a", queue_name="q", description="", failure_ttl=60, now=moment)["created_at"] == (
            utcformat(moment)
        )
    for delivery_id in ("we_1-1795746297125-0", "we_1-1795746297125-0_0123456789abcdef", 'odd "id" \\ \u4f60'):
        data = job_fields(delivery_id, queue_name="q", description="", failure_ttl=60)["data"]
        assert zlib.decompress(data) == json.dumps((FUNC_NAME, None, [delivery_id], {})).encode()  # SERIALIZER.dumps


def test_each_delivery_gets_its_own_copy() -> None:
    first = job_fields("dlv_a", queue_name="svcgw", description="a", failure_ttl=60)
    first["status"] = "changed"
    assert job_fields("dlv_b", queue_name="svcgw", description="b", failure_ttl=60)["status"] == "queued"


def test_job_descriptions_carry_only_plain_names() -> None:
    assert job_description("Msg", "we_abc123") == "Msg for we_abc123"
    assert job_description("InstanceOffline", "we_x") == "InstanceOffline for we_x"
    # rq-dashboard prints descriptions unescaped: markup a sender chose never gets there.
    assert job_description("<img src=x onerror=alert(1)>", "we_x") == "event for we_x"
    assert job_description("Msg", "<b>") == "Msg for an instance"
    assert job_description("a" * 65, "we_x") == "event for we_x"


def test_a_posted_event_type_with_markup_stays_out_of_the_job(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = ingest(settings, tenant, b'{"event_type":"<script>alert(1)</script>","events":[{"id":"x1"}]}')
    job = Job.fetch(delivery_id, connection=redis, serializer=SERIALIZER)
    # The job hash holds the delivery's fields too, but RQ (and rq-dashboard, which prints a job's
    # description unescaped) reads only its own: no description, nothing the sender chose.
    assert job.description is None and "<script>" not in repr(job.to_dict())


def test_flat_fields_load_in_rq_as_the_full_ones(redis: Redis) -> None:
    flat = template("svcgw", 60).flat("dlv_flat", "Msg for we_y")
    assert b"" not in flat[1::2]
    redis.hset("rq:job:dlv_flat", mapping=dict(zip(flat[::2], flat[1::2], strict=True)))
    redis.hset("rq:job:dlv_full", mapping=job_fields("dlv_full", queue_name="svcgw", description="Msg for we_y",
                                                     failure_ttl=60))  # fmt: skip
    loaded = Job.fetch("dlv_flat", connection=redis, serializer=SERIALIZER)
    full = Job.fetch("dlv_full", connection=redis, serializer=SERIALIZER)
    assert loaded.args == ["dlv_flat"] and loaded.func_name == FUNC_NAME
    for name in ("origin", "description", "result_ttl", "failure_ttl", "worker_name", "started_at", "ended_at"):
        assert getattr(loaded, name) == getattr(full, name), name
    assert loaded.get_status() == full.get_status() == "queued"


# --- what the Lua scripts spell ------------------------------------------------------------
# A hash command of a script, up to the end of its line, and the literals in it.
_HASH_CALL = re.compile(r"redis\.call\('H(?:SET|SETNX|DEL|GET|MGET|EXISTS)',([^\n]*)")
_LITERAL = re.compile(r"'([a-z_]+)'")
# A status written (``'status', 'queued'``) or compared (``'status') == 'deferred'``).
_STATUS = re.compile(r"'status'\)?\s*(?:,|==|~=)\s*'([a-z_]+)'")


def _job_scripts() -> dict[str, str]:
    """The scripts that work on RQ's jobs: their heads name a job among their keys (an instance's
    hash has a ``status`` of its own, which the liveness scripts set)."""
    folder = resources.files("svcgw.storage").joinpath("lua")
    scripts = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir() if p.name.endswith(".lua")}
    return {name: text for name, text in scripts.items() if "job" in _head(text).lower()}


def _head(text: str) -> str:
    lines = text.splitlines()
    return "\n".join(next((lines[:i] for i, line in enumerate(lines) if not line.startswith(("--", "#!"))), lines))


def _fields_rq_knows(redis: Redis) -> set[str]:
    """Every field RQ's own API writes into a job's hash as it queues, starts, schedules and fails it,
    and every field of its whole serialization, which ``Job.fetch`` reads back (``Job.to_dict``): RQ 2
    keeps a failure's text in a results stream, and reads ``exc_info`` of the hash when there is none."""
    job = Job.create(FUNC_NAME, args=["dlv_ref"], id="dlv_ref", connection=redis, serializer=SERIALIZER,
                     description="ref", result_ttl=0, failure_ttl=60)  # fmt: skip
    Queue("ref", connection=redis, serializer=SERIALIZER).enqueue_job(job)
    with redis.pipeline() as pipe:
        job.prepare_for_execution("ref-worker", pipeline=pipe)
        pipe.execute()
    scheduled = ScheduledJobRegistry("ref", connection=redis, serializer=SERIALIZER)  # type: ignore[no-untyped-call]
    scheduled.schedule(job, datetime.now(UTC))
    job.ended_at = datetime.now(UTC)
    FailedJobRegistry("ref", connection=redis, serializer=SERIALIZER).add(job, ttl=60, exc_string="boom")
    return {name.decode() for name in redis.hgetall(job.key)} | set(job.to_dict())


def test_the_scripts_spell_rqs_own_statuses_and_fields(redis: Redis) -> None:
    """Every status a script writes or compares, and every field of RQ's job hash it names, is rqformat's;
    rqformat's are RQ's: RQ renaming one fails here, not in a script."""
    assert SCRIPT_STATUSES <= {status.value for status in JobStatus}
    rq_fields = _fields_rq_knows(redis)
    assert rq_fields >= SCRIPT_FIELDS, sorted(SCRIPT_FIELDS - rq_fields)
    scripts = _job_scripts()
    assert {"queue_finish.lua", "queue_read.lua", "chain.lua", "replay.lua"} <= set(scripts)
    statuses: set[str] = set()
    named: set[str] = set()
    for name, text in scripts.items():
        spelt = set(_STATUS.findall(text))
        fields = {literal for call in _HASH_CALL.findall(text) for literal in _LITERAL.findall(call)} & rq_fields
        assert spelt <= SCRIPT_STATUSES, (name, spelt - SCRIPT_STATUSES)
        # A script that spells them says where they are named.
        assert not (spelt or fields) or "svcgw.storage.rqformat" in _head(text), name
        statuses |= spelt
        named |= fields
    assert statuses == SCRIPT_STATUSES  # each one rqformat names is one a script spells
    assert named == SCRIPT_FIELDS
    # The scripts set the status the worker's queue names when it asks for a job's status (queue_mark.lua).
    assert {rqformat.STARTED, rqformat.SCHEDULED, rqformat.QUEUED} <= SCRIPT_STATUSES


# --- deliveries in RQ's queue and registries ------------------------------------------------
def _service_event(redis: Redis, settings: Settings, tenant: Tenant, kind: str = "InstanceOffline",
                   space: KeySpace = keys) -> str:  # fmt: skip
    """A service event queued as a liveness flip queues it, on the shard named by ``space``."""
    delivery_id = new_delivery_id()
    chain = chainkeys.members(redis.lrange(space.service_events(tenant.appid), 0, -1))
    with redis.pipeline(transaction=True) as pipe:
        queue_delivery(pipe, space, settings, appid=tenant.appid, account=tenant.account, event_type=kind,
                       events=[{"id": kind}], delivery_id=delivery_id, now=time.time(), chain=chain)  # fmt: skip
        pipe.execute()
    return delivery_id


def _fetch(redis: Redis, delivery_id: str) -> Job:
    return Job.fetch(delivery_id, connection=redis, serializer=SERIALIZER)


def _attempt(ok: bool = False) -> bytes:
    return Attempt(ok=ok, at=time.time(), duration=0.01, status=200 if ok else 500,
                   error=None if ok else "HTTP 500", destination="x").record(1)  # fmt: skip


def test_a_queued_delivery_is_an_rq_job_of_its_queue(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    from_post = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')
    from_service = _service_event(redis, settings, tenant)
    for delivery_id in (from_post, from_service):
        job = _fetch(redis, delivery_id)
        assert job.func_name == FUNC_NAME == "worker.jobs.deliver" and job.args == [delivery_id]
        assert job.get_status() == "queued" and job.origin == settings.queue_name
    # A post's job hash holds its delivery's fields too; RQ reads only its own (no description).
    assert _fetch(redis, from_post).description is None
    assert _fetch(redis, from_service).description == f"InstanceOffline for {tenant.appid}"
    queue = Queue(settings.queue_name, connection=redis, serializer=SERIALIZER)
    assert queue.job_ids == [from_post, from_service] and queue.count == 2
    assert [q.name for q in Queue.all(connection=redis, serializer=SERIALIZER)] == [settings.queue_name]


def test_a_retrying_delivery_waits_in_rqs_scheduled_registry_until_due(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"r1"}]}')
    assert claim(settings, 1) == [delivery_id]
    assert _fetch(redis, delivery_id).get_status() == "started"
    due = time.time() - 0.5  # due already: the next promotion queues it
    assert finish(settings, Finish(delivery_id, tenant.appid, "retry", _attempt(), due=due, retention=3600))

    registry = ScheduledJobRegistry(settings.queue_name, connection=redis, serializer=SERIALIZER)  # type: ignore[no-untyped-call]
    assert registry.get_job_ids() == [delivery_id]
    assert abs(registry.get_scheduled_time(delivery_id).timestamp() - due) < 0.001
    assert _fetch(redis, delivery_id).get_status() == "scheduled"

    assert with_queue(settings, lambda queue: queue.promote_due()).moved == 1
    assert registry.get_job_ids() == []
    assert _fetch(redis, delivery_id).get_status() == "queued"
    assert Queue(settings.queue_name, connection=redis, serializer=SERIALIZER).job_ids == [delivery_id]


def test_a_dead_letter_is_in_rqs_failed_registry_with_its_error_and_expiry(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    died_at = time.time()
    delivery_id = kill(settings, tenant, "d1", died_at=died_at)
    registry = FailedJobRegistry(settings.queue_name, connection=redis, serializer=SERIALIZER)
    assert registry.get_job_ids() == [delivery_id]
    job = _fetch(redis, delivery_id)
    assert job.get_status() == "failed"
    # What rq-dashboard shows of a failed job.
    assert job.exc_info == "HTTP 500"
    assert job.ended_at is not None and abs(job.ended_at - datetime.now(UTC)) < timedelta(minutes=1)
    expires = died_at + settings.dead_letter_retention
    assert abs(registry.get_expiration_time(job).timestamp() - expires) < 0.001
    # The job hash lives as long as its place in the registry (FailedJobRegistry.add: job.cleanup(ttl)).
    assert settings.dead_letter_retention - 60 < redis.ttl(keys.rq.job(delivery_id)) <= settings.dead_letter_retention


def _rq_command() -> str:
    """The ``rq`` command of the interpreter running the tests."""
    beside = Path(sys.executable).parent / "rq"
    found = str(beside) if beside.exists() else shutil.which("rq")
    if found is None:
        missing_tool("needs rq's command line, `rq` (pip install rq)")
    return found


def _rq(settings: Settings, *args: str) -> str:
    done = subprocess.run([_rq_command(), *args, "--url", settings.redis_url or ""], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_rq_requeue_sends_a_dead_letter_back_and_the_worker_delivers_it(
    settings: Settings, redis: Redis, sink: Sink
) -> None:
    """`rq requeue` rewrites RQ's fields of the job hash that holds the delivery's too; the worker then
    gives it one fresh attempt, as it does a dead letter replayed with `svcgw dlq replay`."""
    tenant = provision(settings, url=sink.url)
    delivery_id = kill(settings, tenant, "requeued", died_at=time.time())
    assert keys.delivery(delivery_id) == keys.rq.job(delivery_id)

    said = _rq(settings, "requeue", "--all", "--queue", settings.queue_name,
               "--serializer", "rq.serializers.JSONSerializer")  # fmt: skip
    assert "Requeueing 1 jobs" in said, said
    assert FailedJobRegistry(settings.queue_name, connection=redis, serializer=SERIALIZER).get_job_ids() == []
    assert _fetch(redis, delivery_id).get_status() == "queued"
    assert Queue(settings.queue_name, connection=redis, serializer=SERIALIZER).job_ids == [delivery_id]

    worker = ThreadedWorker(settings).start()
    try:
        (received,) = wait_for(sink.posts, timeout=20, what="the requeued delivery")
        wait_for(lambda: is_delivered(redis, delivery_id), timeout=20, what="the delivery recorded delivered")
    finally:
        worker.stop()
    assert received.headers["x-svc-delivery-id"] == delivery_id
    assert [event["id"] for event in orjson.loads(received.body)["events"]] == ["requeued"]


def test_a_further_destinations_delivery_is_one_rq_job_that_rq_requeue_sends_back(
    settings: Settings, redis: Redis, sink: Sink
) -> None:
    """A post's delivery to a further destination, named by the post: one hash, RQ's lean fields and the
    delivery's, read by ``Job.fetch`` and the registries as the primary's is; `rq requeue` of it as a dead
    letter, and the worker delivers it to that destination alone."""
    tenant = provision(settings, url=sink.url)
    further = Sink().start()
    try:
        destination = add_destination(settings, Scope(account=tenant.account), further.url)
        body = b'{"event_type":"Msg","events":[{"id":"to-further"}]}'
        primary, (delivery_id,) = ingest_fanned(settings, tenant, body, [destination.id])
        assert keys.delivery(delivery_id) == keys.rq.job(delivery_id)
        job = _fetch(redis, delivery_id)
        assert job.func_name == FUNC_NAME and job.args == [delivery_id] and job.get_status() == "queued"
        assert job.origin == settings.queue_name and job.description is None
        assert Queue(settings.queue_name, connection=redis, serializer=SERIALIZER).job_ids == [primary, delivery_id]

        kill_among(settings, delivery_id, tenant.appid, 2)
        failed = FailedJobRegistry(settings.queue_name, connection=redis, serializer=SERIALIZER)
        assert failed.get_job_ids() == [delivery_id] and _fetch(redis, delivery_id).exc_info == "HTTP 500"
        said = _rq(settings, "requeue", "--all", "--queue", settings.queue_name,
                   "--serializer", "rq.serializers.JSONSerializer")  # fmt: skip
        assert "Requeueing 1 jobs" in said, said
        assert _fetch(redis, delivery_id).get_status() == "queued"

        worker = ThreadedWorker(settings).start()
        try:
            (received,) = wait_for(further.posts, timeout=20, what="the requeued delivery")
            wait_for(lambda: is_delivered(redis, delivery_id), timeout=20, what="the delivery recorded delivered")
        finally:
            worker.stop()
        assert received.headers["x-svc-delivery-id"] == delivery_id
        assert received.headers["x-svc-destination"] == destination.id
    finally:
        further.stop()


def test_a_later_service_event_waits_in_rqs_deferred_registry(settings: Settings, redis: Redis) -> None:
    one, other = provision(settings), provision(settings)
    offline = _service_event(redis, settings, one)
    recovered = _service_event(redis, settings, one, kind="InstanceRecovered")
    elsewhere = _service_event(redis, settings, other)
    deferred = DeferredJobRegistry(settings.queue_name, connection=redis, serializer=SERIALIZER)
    queue = Queue(settings.queue_name, connection=redis, serializer=SERIALIZER)
    assert deferred.get_job_ids() == [recovered] and queue.job_ids == [offline, elsewhere]
    assert (_fetch(redis, offline).get_status(), _fetch(redis, recovered).get_status()) == ("queued", "deferred")
    assert redis.hget(keys.delivery(recovered), "state") == b"queued"  # pending, for people

    # The earlier one delivered, the later one is queued.
    assert claim(settings, 1) == [offline]
    assert finish(settings, Finish(offline, one.appid, "delivered", _attempt(ok=True), retention=3600))
    assert deferred.get_job_ids() == []
    assert _fetch(redis, recovered).get_status() == "queued"
    assert queue.job_ids == [elsewhere, recovered]


# --- a worker's registration ---------------------------------------------------------------
def test_a_workers_hash_has_the_fields_rqs_own_worker_writes(redis: Redis) -> None:
    reference = Worker(["svcgw"], connection=redis, name="reference")
    reference.register_birth()  # type: ignore[no-untyped-call]
    reference.set_state(WorkerStatus.BUSY)
    reference.set_current_job_id("dlv_x")
    reference.heartbeat()
    with redis.pipeline() as pipe:
        reference.increment_successful_job_count(pipe)
        reference.increment_failed_job_count(pipe)
        reference.increment_total_working_time(timedelta(seconds=1), pipe)
        pipe.execute()
    theirs = {name.decode() for name in redis.hgetall(reference.key)}
    now = rqformat.rq_now()
    ours = {*worker_fields("svcgw", pid=1, hostname="h", now=now), *worker_heartbeat(now, busy=True),
            WORKER_CURRENT_JOB, *WORKER_COUNTS}  # fmt: skip
    assert ours == theirs
    assert {worker_heartbeat(now, busy=b)["state"] for b in (True, False)} <= {s.value for s in WorkerStatus}
    reference.register_death()  # type: ignore[no-untyped-call]
    assert set(worker_death(now)) - {"state"} <= {name.decode() for name in redis.hgetall(reference.key)}
    assert WORKER_KEPT_DEAD - 5 < redis.ttl(reference.key) <= WORKER_KEPT_DEAD

    # What the service writes, RQ reads: born, then a heartbeat while it holds a job.
    key = keys.rq.worker_prefix + "svcgw.ours"
    redis.hset(key, mapping=worker_fields("svcgw", pid=4242, hostname="host", now=now))
    redis.hset(key, mapping={**worker_heartbeat(now, busy=True), WORKER_CURRENT_JOB: "dlv_y"})
    redis.sadd(keys.rq.workers, key)
    redis.sadd(keys.rq.workers_of("svcgw"), key)
    (found,) = [w for w in Worker.all(connection=redis) if w.name == "svcgw.ours"]
    assert (found.pid, found.hostname, found.queue_names()) == (4242, "host", ["svcgw"])
    assert found.get_state() == "busy" and found.get_current_job_id() == "dlv_y"
    assert found.birth_date is not None and found.last_heartbeat is not None
    assert [w.name for w in Worker.all(queue=Queue("svcgw", connection=redis), connection=redis)] == ["svcgw.ours"]


@pytest.mark.slow
def test_a_running_svcgw_worker_is_listed_by_worker_all_and_rq_info(
    settings: Settings, redis: Redis, env: dict[str, str]
) -> None:
    process = Process(["worker"], env, "worker-rq").start()
    try:
        assert process.proc is not None
        pid = process.proc.pid

        def listed() -> Worker | None:
            return next((w for w in Worker.all(connection=redis) if w.pid == pid), None)

        worker = wait_for(listed, timeout=20, what="the worker in rq's registry")
        assert worker.queue_names() == [settings.queue_name]
        assert worker.key.encode() in redis.smembers(WORKERS_BY_QUEUE_KEY % settings.queue_name)
        shown = _rq(settings, "info", "--raw", "--serializer", "rq.serializers.JSONSerializer", settings.queue_name)
    finally:
        process.stop()
    line = next((line for line in shown.splitlines() if line.startswith(f"worker {worker.name} ")), None)
    assert line is not None, shown
    assert f"{pid})" in line and f" {settings.queue_name}." in line and " idle " in line


# --- a Cluster's shard: RQ's classes with its tag in front ---------------------------------------
def test_on_a_cluster_shard_rqs_subclasses_name_exactly_the_keys_the_service_writes(
    settings: Settings, redis: Redis
) -> None:
    """A Cluster's shard 3 (``{s3}``), its keys written on one Redis: tags are part of a key's name."""
    space, tag, name = KeySpace("{s3}"), "{s3}", settings.queue_name
    rq = classes(tag)
    assert rq.job.key_for("dlv_x") == space.rq.job("dlv_x") == "{s3}rq:job:dlv_x"
    assert rq.job.key_for("dlv_x") != Job.key_for("dlv_x") and classes("").job is Job

    one, other = Tenant("acc_1", "we_one", ""), Tenant("acc_2", "we_two", "")
    retrying = _service_event(redis, settings, one, space=space)
    waiting = _service_event(redis, settings, one, kind="InstanceRecovered", space=space)
    dead = _service_event(redis, settings, other, space=space)
    queued = _service_event(redis, settings, Tenant("acc_3", "we_three", ""), space=space)

    async def on_the_shard() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            queue = DeliveryQueue(client, space, name, failing_argument=failingorigins.script_argument(settings))
            claimed = [job.delivery_id for job in await queue.claim_batch(2, "test")]
            assert claimed == [retrying, dead]
            await queue.finish_detailed([
                Finish(retrying, one.appid, "retry", _attempt(), due=time.time() + 600, retention=3600),
                Finish(dead, other.appid, "dead", _attempt(), due=failed_score(time.time(), 3600), retention=3600,
                       error=exc_info_field("HTTP 500")),
            ])  # fmt: skip
            presence = Presence(settings, client, space, "svcgw.shard3")
            await presence.start()
        finally:
            await client.aclose()

    asyncio.run(on_the_shard())
    ids = (retrying, waiting, dead, queued)
    named = {
        *(rq.job.key_for(i) for i in ids),
        rq.queue(name, connection=redis).key,
        rq.queue.redis_queues_keys,
        rq.scheduled(name, connection=redis).key,
        rq.failed(name, connection=redis).key,
        rq.deferred(name, connection=redis).key,
        tag + Worker.redis_worker_namespace_prefix + "svcgw.shard3",
        tag + Worker.redis_workers_keys,
        tag + WORKERS_BY_QUEUE_KEY % name,
    }
    written = {k.decode() for k in redis.scan_iter(match="*rq:*", count=1000)}
    assert written == named
    assert all(key.startswith(tag) and key.count("{") == 1 for key in written)

    # RQ's API, given the shard's classes, reads what the service wrote there.
    def read(cls: Any) -> Any:
        return cls(name, connection=redis, serializer=SERIALIZER)

    assert read(rq.queue).job_ids == [queued]
    assert [q.name for q in rq.queue.all(connection=redis, serializer=SERIALIZER)] == [name]
    assert read(rq.scheduled).get_job_ids() == [retrying]
    assert read(rq.deferred).get_job_ids() == [waiting]
    assert read(rq.failed).get_job_ids() == [dead]
    statuses = [rq.job.fetch(i, connection=redis, serializer=SERIALIZER).get_status() for i in ids]
    assert statuses == ["scheduled", "deferred", "failed", "queued"]
    assert rq.job.fetch(dead, connection=redis, serializer=SERIALIZER).exc_info == "HTTP 500"
