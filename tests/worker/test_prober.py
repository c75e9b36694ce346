"""The liveness prober: claiming the schedule, judging a connection, and whole workers against the simulator."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ResponseError

from svcgw.config.settings import Settings
from svcgw.intake import gapclosed
from svcgw.liveness import transitions
from svcgw.storage import scripts
from svcgw.storage.keys import PLAIN as keys
from svcgw.upstream import Upstream
from tests.conftest import Tenant, provision, run
from tests.receiver.gateway.stack import sim as sim  # the simulator, in-process behind a real HTTP server
from tests.support import Process, Sink, ThreadedWorker, wait_for
from worker import prober as prober_module
from worker.prober import Claim, Prober

INTERVAL = 0.5


@pytest.fixture
def text(redis_url: str) -> Iterator[Any]:
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def mark_started(settings: Settings, appid: str, interval: float = INTERVAL) -> None:
    async def go() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            await transitions.mark_started(client, keys, appid, interval)
        finally:
            await client.aclose()

    run(go())


def mark_stopped(settings: Settings, appid: str) -> None:
    async def go() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            await transitions.mark_stopped(client, keys, appid)
        finally:
            await client.aclose()

    run(go())


# --- the capability layer, faked in-process -------------------------------------------
class FakeLayer:
    """Answers long/check, login/reconnect and the business read from a few switches."""

    def __init__(self) -> None:
        self.usable = True
        self.reconnect_heals = True
        self.building_until = 0.0
        self.http_status = 200
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.url = ""

    def count(self, operation: str) -> int:
        return sum(1 for op, _ in self.calls if op == operation)

    def handle(self, path: str, content: bytes) -> tuple[int, bytes]:
        operation = path.removeprefix("/svc/api/")
        self.calls.append((operation, orjson.loads(content)))
        if self.http_status != 200:
            return self.http_status, b"upstream down"
        building = time.time() < self.building_until
        if operation == prober_module.PROBE_READ:
            ok = self.usable and not building
        elif operation == "long/check":
            ok = not building
        elif operation == "login/reconnect":
            ok = True
            if self.reconnect_heals:
                self.usable = True
        else:
            ok = False
        message = "ok" if ok else ("long connection starting" if building else "long connection closed")
        return 200, orjson.dumps({"code": 0 if ok else -1, "message": message, "data": None})

    def serve(self) -> ThreadingHTTPServer:
        """The layer behind a real HTTP server on loopback (``self.url``)."""
        layer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                content = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, body = layer.handle(self.path, content)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        return server


@pytest.fixture
def layer() -> Iterator[FakeLayer]:
    fake = FakeLayer()
    server = fake.serve()
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def fast_gap_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prober_module, "GAP_GRACE_SECONDS", 0.0)


def fake_upstream(layer: FakeLayer) -> Upstream:
    return Upstream(layer.url, timeout=prober_module.HTTP_TIMEOUT)


class Driven:
    """A prober whose coroutines a synchronous test calls, all on one event loop of its own."""

    def __init__(self, runner: asyncio.Runner, prober: Prober) -> None:
        self.runner = runner
        self.prober = prober

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.runner.run(coro)

    def claim(self, limit: int) -> tuple[list[Claim], float | None]:
        result: tuple[list[Claim], float | None] = self.run(self.prober.claim(limit))
        return result

    def probe(self, claim: Claim) -> str:
        outcome: str = self.run(self.prober.probe(claim))
        return outcome

    def release(self, claim: Claim) -> None:
        self.run(self.prober.release(claim))


@pytest.fixture
def prober(settings: Settings, layer: FakeLayer) -> Iterator[Driven]:
    with asyncio.Runner() as runner:
        client = AsyncRedis.from_url(settings.redis_url or "")
        upstream = fake_upstream(layer)
        yield Driven(runner, Prober(settings, client, keys, upstream))
        runner.run(upstream.aclose())
        runner.run(client.aclose())


def due_now(settings: Settings, text: Any, interval: float = INTERVAL) -> str:
    appid = provision(settings).appid
    mark_started(settings, appid, interval)
    text.zadd(keys.probe_schedule, {appid: time.time() - 0.01})
    return appid


def claim_one(prober: Driven, appid: str) -> Claim:
    claims, _ = prober.claim(100)
    (claim,) = [c for c in claims if c.appid == appid]
    return claim


def queued(text: Any, settings: Settings) -> list[dict[str, Any]]:
    """Service events queued, then those waiting behind an earlier one of their instance, oldest first."""
    waiting = text.zrange(keys.rq.deferred(settings.queue_name), 0, -1)
    ids = text.lrange(keys.rq.queue(settings.queue_name), 0, -1) + waiting
    return [orjson.loads(text.hget(keys.delivery(d), "body")) for d in ids]


# --- claiming ---------------------------------------------------------------------------
def test_concurrent_claims_are_disjoint_and_reschedule_one_interval_on(
    settings: Settings, text: Any, layer: FakeLayer
) -> None:
    now = time.time()
    appids = [provision(settings).appid for _ in range(40)]
    for appid in appids:
        text.hset(keys.instance(appid), "maintained", "1")
    dues = {appid: now - 0.3 - i * 0.001 for i, appid in enumerate(appids)}
    text.zadd(keys.probe_schedule, dues)
    claimed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    async def claims() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        upstream = fake_upstream(layer)
        mine = Prober(settings, client, keys, upstream)
        barrier.wait()
        for _ in range(20):
            claims, _ = await mine.claim(3)
            with lock:
                claimed.extend(c.appid for c in claims)
        await upstream.aclose()
        await client.aclose()

    def claimer() -> None:
        asyncio.run(claims())

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == sorted(appids)
    for appid in appids:
        assert text.zscore(keys.probe_schedule, appid) == pytest.approx(dues[appid] + settings.probe_interval)


def test_an_overdue_probe_keeps_its_phase_and_runs_once(settings: Settings, text: Any, prober: Driven) -> None:
    appid = provision(settings).appid
    text.hset(keys.instance(appid), "maintained", "1")
    due = time.time() - 3.5 * settings.probe_interval
    text.zadd(keys.probe_schedule, {appid: due})
    claim_one(prober, appid)
    following = text.zscore(keys.probe_schedule, appid)
    assert following == pytest.approx(due + 4 * settings.probe_interval)
    assert float(text.hget(keys.instance(appid), "next_probe")) == pytest.approx(following)
    assert prober.claim(100)[0] == []


def test_unmaintained_instances_leave_the_schedule(settings: Settings, text: Any, prober: Driven) -> None:
    appid = due_now(settings, text)
    text.hset(keys.instance(appid), "maintained", "0")
    assert prober.claim(100)[0] == []
    assert text.zscore(keys.probe_schedule, appid) is None


def test_an_instance_being_probed_is_not_claimed_twice(
    settings: Settings, text: Any, prober: Driven, layer: FakeLayer
) -> None:
    appid = due_now(settings, text, interval=0.05)
    first = claim_one(prober, appid)
    text.zadd(keys.probe_schedule, {appid: time.time() - 0.01})
    assert prober.claim(100)[0] == []
    assert text.zscore(keys.probe_schedule, appid) <= time.time() + 1.0
    assert prober.probe(first) == "online"
    assert text.hget(keys.instance(appid), "probing") is None
    text.zadd(keys.probe_schedule, {appid: time.time() - 0.01})
    assert claim_one(prober, appid).appid == appid


def test_a_probe_handed_back_is_due_at_once(settings: Settings, text: Any, prober: Driven) -> None:
    appid = due_now(settings, text)
    claim = claim_one(prober, appid)
    prober.release(claim)
    assert text.hget(keys.instance(appid), "probing") is None
    assert text.zscore(keys.probe_schedule, appid) <= time.time()


def test_a_claim_reads_only_the_instance_hashes_it_names(settings: Settings, text: Any, prober: Driven) -> None:
    named, unnamed = due_now(settings, text), due_now(settings, text)
    unnamed_due = text.zscore(keys.probe_schedule, unnamed)
    now = time.time()
    claim_script = text.register_script(scripts.text("probe_claim"))
    # ``named`` is due and maintained, but the hash named for it is another, missing one: a script
    # that built the name from the appid would claim it. ``unnamed`` is due and not named at all.
    _, claimed = claim_script(
        keys=[keys.probe_schedule, keys.instance("we_not_this_one")],
        args=[repr(now), 10, repr(INTERVAL), repr(now + 60), 1.0, named],
    )
    assert claimed == []
    assert text.hget(keys.instance(named), "probing") is None
    # The missing hash it was given says "not maintained", so the appid left the schedule.
    assert text.zscore(keys.probe_schedule, named) is None
    assert text.exists(keys.instance("we_not_this_one")) == 0
    assert text.hget(keys.instance(unnamed), "probing") is None
    assert text.zscore(keys.probe_schedule, unnamed) == unnamed_due
    with pytest.raises(ResponseError, match="one instance key per appid"):
        claim_script(keys=[keys.probe_schedule], args=[repr(now), 10, repr(INTERVAL), repr(now + 60), 1.0, unnamed])
    assert [c.appid for c in prober.claim(100)[0]] == [unnamed]


def test_a_member_claimed_or_removed_between_the_read_and_the_script_is_left_alone(
    settings: Settings, text: Any, prober: Driven, layer: FakeLayer
) -> None:
    taken, kept, removed = (due_now(settings, text) for _ in range(3))
    text.zadd(keys.probe_schedule, {taken: time.time() - 1.0, "we_later": time.time() + 30})
    other = Prober(settings, prober.prober.redis, keys, fake_upstream(layer))
    script = prober.prober._claim
    theirs: list[Claim] = []
    rescheduled: list[float] = []

    async def raced(**call: Any) -> Any:
        # Between this prober's read and its script, another worker claims ``taken`` (the first
        # due) and ``removed`` leaves the schedule, though its hash still says maintained.
        claims, _ = await other.claim(1)
        theirs.extend(claims)
        rescheduled.append(text.zscore(keys.probe_schedule, taken))
        text.zrem(keys.probe_schedule, removed)
        return await script(**call)

    prober.prober._claim = raced  # type: ignore[assignment]
    claims, head = prober.claim(100)
    assert [c.appid for c in claims] == [kept]
    assert [c.appid for c in theirs] == [taken]
    assert text.hget(keys.instance(taken), "probing") == theirs[0].lease
    assert text.zscore(keys.probe_schedule, taken) == rescheduled[0] > time.time()
    assert text.zscore(keys.probe_schedule, removed) is None  # not brought back
    assert text.hget(keys.instance(removed), "probing") is None
    ((_, first_due),) = text.zrange(keys.probe_schedule, 0, 0, withscores=True)
    assert head == pytest.approx(first_due)
    prober.run(other.upstream.aclose())


def test_two_workers_reading_the_same_due_members_claim_different_ones(
    settings: Settings, text: Any, prober: Driven, layer: FakeLayer
) -> None:
    appids = [due_now(settings, text) for _ in range(4)]
    text.zadd(keys.probe_schedule, {appid: time.time() - 1.0 + n * 0.01 for n, appid in enumerate(appids)})
    other = Prober(settings, prober.prober.redis, keys, fake_upstream(layer))
    script = prober.prober._claim
    theirs: list[Claim] = []

    async def raced(**call: Any) -> Any:
        # The other worker read the same members as this one, and its script ran first.
        claims, _ = await other.claim(2)
        theirs.extend(claims)
        return await script(**call)

    prober.prober._claim = raced  # type: ignore[assignment]
    mine, _ = prober.claim(2)
    assert [c.appid for c in theirs] == appids[:2]
    assert [c.appid for c in mine] == appids[2:4]
    prober.run(other.upstream.aclose())


def test_nothing_due_costs_no_script_call_and_says_when_the_first_is_due(
    settings: Settings, text: Any, prober: Driven
) -> None:
    calls: list[int] = []
    script = prober.prober._claim

    async def counted(**call: Any) -> Any:
        calls.append(len(call["keys"]))
        return await script(**call)

    prober.prober._claim = counted  # type: ignore[assignment]
    assert prober.claim(100) == ([], None)
    appid = due_now(settings, text)
    due = time.time() + 30
    text.zadd(keys.probe_schedule, {appid: due})
    claims, head = prober.claim(100)
    assert claims == [] and head == pytest.approx(due)
    assert calls == []
    text.zadd(keys.probe_schedule, {appid: time.time() - 0.01})
    assert [c.appid for c in prober.claim(100)[0]] == [appid]
    assert calls == [2]  # the schedule and the one due instance's hash


# --- judging ---------------------------------------------------------------------------------
def test_a_usable_connection_costs_one_read(settings: Settings, text: Any, prober: Driven, layer: FakeLayer) -> None:
    appid = due_now(settings, text)
    text.hset(keys.instance(appid), "since", repr(time.time() - 60))
    assert prober.probe(claim_one(prober, appid)) == "online"
    assert [op for op, _ in layer.calls] == [prober_module.PROBE_READ]
    state = text.hgetall(keys.instance(appid))
    assert float(state["last_seen"]) == pytest.approx(time.time(), abs=2)
    assert "probing" not in state and "probe_error" not in state


def test_a_connection_still_being_built_is_waited_for(
    settings: Settings, text: Any, prober: Driven, layer: FakeLayer
) -> None:
    appid = due_now(settings, text)  # just started: inside the warm-up
    layer.building_until = time.time() + 0.6
    assert prober.probe(claim_one(prober, appid)) == "online"
    assert layer.count("login/reconnect") == 0
    assert layer.count("long/check") >= 1
    assert queued(text, settings) == []


def test_a_loss_healed_by_reconnect_sends_nothing(
    settings: Settings, text: Any, prober: Driven, layer: FakeLayer
) -> None:
    appid = due_now(settings, text)
    text.hset(keys.instance(appid), mapping={"since": repr(time.time() - 60), "proxy": "http://egress:3128"})
    layer.usable = False
    assert prober.probe(claim_one(prober, appid)) == "reconnected"
    reconnects = [body for op, body in layer.calls if op == "login/reconnect"]
    assert reconnects == [{"appid": appid, "proxy": "http://egress:3128"}]
    assert queued(text, settings) == []
    assert text.hget(keys.instance(appid), "status") == "online"


@pytest.mark.usefixtures("fast_gap_grace")
def test_a_failed_reconnect_is_offline_relogin_and_a_later_heal_recovers(
    settings: Settings, text: Any, prober: Driven, layer: FakeLayer
) -> None:
    appid = due_now(settings, text)
    text.hset(keys.instance(appid), "since", repr(time.time() - 60))
    layer.usable, layer.reconnect_heals = False, False
    assert prober.probe(claim_one(prober, appid)) == "offline"
    text.zadd(keys.probe_schedule, {appid: time.time() - 0.01})
    assert prober.probe(claim_one(prober, appid)) == "offline"
    (offline,) = queued(text, settings)
    assert offline["events"][0]["action_required"] == "relogin"
    assert "automatic reconnect failed" in offline["events"][0]["reason"]

    layer.reconnect_heals = True
    text.zadd(keys.probe_schedule, {appid: time.time() - 0.01})
    assert prober.probe(claim_one(prober, appid)) == "reconnected"
    _, recovered = queued(text, settings)
    assert recovered["event_type"] == "InstanceRecovered"
    assert recovered["events"][0]["auto_reconnected"] is True


def test_an_unreachable_layer_decides_nothing(settings: Settings, text: Any, prober: Driven, layer: FakeLayer) -> None:
    appid = due_now(settings, text)
    layer.http_status = 502
    assert prober.probe(claim_one(prober, appid)) == "undecided"
    state = text.hgetall(keys.instance(appid))
    assert state["status"] == "online"
    assert "HTTP 502" in state["probe_error"]
    assert layer.count("login/reconnect") == 0
    assert queued(text, settings) == []


def test_a_manual_gap_closed_goes_offline_without_calling_the_layer(
    settings: Settings, text: Any, prober: Driven, layer: FakeLayer
) -> None:
    appid = due_now(settings, text)

    async def gap() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        await gapclosed.on_gap_closed(client, keys, appid, [(-1008, "logged out on phone")])
        await client.aclose()

    run(gap())
    assert prober.probe(claim_one(prober, appid)) == "manual"
    assert layer.calls == []
    (offline,) = queued(text, settings)
    event = offline["events"][0]
    assert event["action_required"] == "manual"
    assert "-1008" in event["reason"]
    state = text.hgetall(keys.instance(appid))
    assert state["maintained"] == "0" and "gap_code" not in state
    assert text.zscore(keys.probe_schedule, appid) is None


# --- whole workers against the simulator ----------------------------------------------------
@pytest.fixture
def env(env: dict[str, str], sim: str) -> dict[str, str]:
    return dict(env, SVCGW_UPSTREAM_URL=sim, SVCGW_PROBE_INTERVAL=str(INTERVAL))


class Sim:
    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, trust_env=False, timeout=5)

    def seed(self, appid: str, callback_url: str | None = None) -> None:
        answer = self.http.post(
            "/_sim/instances", json={"appid": appid, "connected": True, "callbackUrl": callback_url}
        )
        assert answer.status_code == 201, answer.text

    def faults(self, appid: str, **faults: Any) -> None:
        answer = self.http.post("/_sim/faults", json={"appid": appid, **faults})
        assert answer.status_code == 200, answer.text

    def state(self, appid: str) -> dict[str, Any]:
        result: dict[str, Any] = self.http.get(f"/_sim/instances/{appid}").json()
        return result

    def calls(self, appid: str) -> Counter[str]:
        return Counter(self.state(appid)["calls"])

    def reads(self, appid: str) -> int:
        return self.calls(appid)[prober_module.PROBE_READ]


@pytest.fixture
def sim_control(sim: str) -> Iterator[Sim]:
    control = Sim(sim)
    yield control
    control.http.close()


def maintained(settings: Settings, sim: Sim, sink: Sink, callback_url: str | None = None) -> Tenant:
    tenant = provision(settings, url=sink.url)
    sim.seed(tenant.appid, callback_url)
    mark_started(settings, tenant.appid)
    return tenant


def events_of(sink: Sink, appid: str, event_type: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for post in sink.posts():
        envelope = orjson.loads(post.body)
        if envelope.get("appid") == appid and envelope.get("event_type") == event_type:
            found.extend(envelope["events"])
    return found


def service_events(sink: Sink, appid: str) -> list[dict[str, Any]]:
    return events_of(sink, appid, "InstanceOffline") + events_of(sink, appid, "InstanceRecovered")


def wait_rounds(sim: Sim, appid: str, rounds: int) -> None:
    """Let ``rounds`` probes of a healthy instance go by: the test's clock, counted in probe rounds."""
    start = sim.reads(appid)
    wait_for(lambda: sim.reads(appid) >= start + rounds, timeout=rounds * INTERVAL + 10, what=f"{rounds} probes")


def test_a_brief_drop_healed_by_reconnect_sends_no_event(
    settings: Settings, text: Any, sim_control: Sim, worker: ThreadedWorker, sink: Sink
) -> None:
    appid = maintained(settings, sim_control, sink).appid
    wait_rounds(sim_control, appid, 1)
    sim_control.faults(appid, drop=True)
    wait_for(lambda: sim_control.calls(appid)["login/reconnect"] >= 1, what="the reconnect")
    wait_for(lambda: sim_control.state(appid)["usable"], what="the connection to be back")
    wait_rounds(sim_control, appid, 3)
    assert sim_control.calls(appid)["login/reconnect"] == 1
    assert service_events(sink, appid) == []
    assert transitions.describe(text.hgetall(keys.instance(appid)))["status"] == "online"


def test_a_failed_reconnect_sends_one_offline_and_the_heal_one_recovered(
    settings: Settings, sim_control: Sim, worker: ThreadedWorker, sink: Sink
) -> None:
    appid = maintained(settings, sim_control, sink).appid
    wait_rounds(sim_control, appid, 1)
    dropped = time.time()
    sim_control.faults(appid, drop=True, reconnect_fails=True)
    (offline,) = wait_for(lambda: events_of(sink, appid, "InstanceOffline"), timeout=15, what="InstanceOffline")
    assert offline["action_required"] == "relogin"
    assert offline["id"].startswith(f"InstanceOffline:{appid}:")
    # Retries go on while offline, without another event.
    retried = sim_control.calls(appid)["login/reconnect"]
    wait_for(lambda: sim_control.calls(appid)["login/reconnect"] >= retried + 3, what="further reconnects")

    healed = time.time()
    sim_control.faults(appid, reconnect_fails=False)
    (recovered,) = wait_for(lambda: events_of(sink, appid, "InstanceRecovered"), timeout=15, what="InstanceRecovered")
    assert recovered["auto_reconnected"] is True
    assert int(healed - dropped) - 2 <= recovered["offline_seconds"] <= time.time() - dropped + 1
    assert len(events_of(sink, appid, "InstanceOffline")) == 1
    signed = [p for p in sink.posts() if b"InstanceRecovered" in p.body]
    assert signed and all(p.headers.get("x-svc-signature") for p in signed)


def test_logged_in_elsewhere_is_offline_manual_until_the_next_start(
    settings: Settings, sim_control: Sim, server: str, worker: ThreadedWorker, sink: Sink
) -> None:
    tenant = provision(settings, url=sink.url)
    appid = tenant.appid
    sim_control.seed(appid, tenant.receiver_url(server))
    mark_started(settings, appid)
    witness = maintained(settings, sim_control, sink).appid  # its probes are the test's clock
    wait_rounds(sim_control, appid, 1)

    sim_control.faults(appid, gap_closed=-11002)
    (offline,) = wait_for(lambda: events_of(sink, appid, "InstanceOffline"), timeout=15, what="InstanceOffline")
    assert offline["action_required"] == "manual"
    assert "-11002" in offline["reason"]
    wait_for(lambda: events_of(sink, appid, "GapClosed"), what="the GapClosed forward")

    calls = sim_control.calls(appid)
    wait_rounds(sim_control, witness, 4)
    assert sim_control.calls(appid) == calls
    # A probe that ran between the drop and the GapClosed's arrival may have
    # tried one reconnect; after the InstanceOffline nothing is tried again.
    assert calls["login/reconnect"] <= 1
    text = Redis.from_url(settings.redis_url or "", decode_responses=True)
    assert text.zscore(keys.probe_schedule, appid) is None
    described = transitions.describe(text.hgetall(keys.instance(appid)))
    assert (described["status"], described["action_required"], described["maintained"]) == ("offline", "manual", False)
    text.close()

    # A new login and long/start: maintained again, and the recovery is reported.
    sim_control.seed(appid, tenant.receiver_url(server))
    mark_started(settings, appid)
    (recovered,) = wait_for(lambda: events_of(sink, appid, "InstanceRecovered"), what="InstanceRecovered")
    assert recovered["auto_reconnected"] is False
    wait_rounds(sim_control, appid, 2)
    assert len(events_of(sink, appid, "InstanceOffline")) == 1


def test_long_stop_stops_probing_and_long_start_resumes_it(
    settings: Settings, sim_control: Sim, worker: ThreadedWorker, sink: Sink
) -> None:
    appid = maintained(settings, sim_control, sink).appid
    witness = maintained(settings, sim_control, sink).appid
    wait_rounds(sim_control, appid, 1)
    mark_stopped(settings, appid)
    wait_rounds(sim_control, witness, 1)  # a probe already under way may still finish
    stopped = sim_control.calls(appid)
    wait_rounds(sim_control, witness, 4)
    assert sim_control.calls(appid) == stopped

    mark_started(settings, appid)
    wait_rounds(sim_control, appid, 2)
    assert service_events(sink, appid) == []


def read_counts(sim: Sim, appids: list[str]) -> tuple[float, dict[str, int]]:
    return time.monotonic(), {appid: sim.reads(appid) for appid in appids}


def assert_once_per_interval(sim: Sim, appids: list[str], rounds: int) -> None:
    started, before = read_counts(sim, appids)
    wait_for(
        lambda: all(sim.reads(a) >= before[a] + rounds for a in appids),
        timeout=rounds * INTERVAL + 10,
        what="probe rounds",
    )
    ended, after = read_counts(sim, appids)
    # Counted between two clock readings that enclose both samples. A probe runs at its due time or
    # later (a loaded machine), and the next one is due an interval after the due time, not after the
    # late run: so one late probe just inside the window can add up to one more, hence half an interval
    # of slack. Two workers probing one instance would count twice as many.
    most = (ended - started) / INTERVAL + 1.5
    for appid in appids:
        assert after[appid] - before[appid] <= most, (appid, after[appid] - before[appid], most)


def test_workers_share_the_schedule_and_a_restart_keeps_it(
    settings: Settings, env: dict[str, str], sim_control: Sim, sink: Sink, tmp_path: Path
) -> None:
    appids = [maintained(settings, sim_control, sink).appid for _ in range(6)]
    workers = [Process(["worker"], env, f"worker-{n}").start() for n in range(2)]
    try:
        wait_for(lambda: all(sim_control.reads(a) >= 1 for a in appids), timeout=20, what="first probes")
        assert_once_per_interval(sim_control, appids, 6)

        for process in workers:
            process.stop()
        text = Redis.from_url(settings.redis_url or "", decode_responses=True)
        assert set(text.zrange(keys.probe_schedule, 0, -1)) >= set(appids)
        assert all(text.hget(keys.instance(a), "probing") is None for a in appids)
        text.close()
        before = {a: sim_control.reads(a) for a in appids}

        workers = [Process(["worker"], env, f"worker-again-{n}").start() for n in range(2)]
        wait_for(lambda: all(sim_control.reads(a) > before[a] for a in appids), timeout=20, what="probes again")
        assert_once_per_interval(sim_control, appids, 6)
        assert all(service_events(sink, a) == [] for a in appids)
    finally:
        for process in workers:
            process.stop()
