"""The Lua scripts' logic, on fakeredis (with Lua): fast, one script at a time.

Integration tests run the same scripts against a real Redis; these pin down
each branch of a script without a server.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest

from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.scripts import ScriptBatch, add_to_transaction, batched, names, register, source, text


@pytest.fixture
def fake() -> Iterator[fakeredis.FakeRedis]:
    client = fakeredis.FakeRedis()
    yield client
    client.close()


def test_every_script_names_its_keys_and_arguments() -> None:
    from importlib import resources

    scripts = [p for p in resources.files("svcgw.storage").joinpath("lua").iterdir() if p.name.endswith(".lua")]
    assert scripts
    for script in scripts:
        head = script.read_text(encoding="utf-8").splitlines()[:6]
        assert any(line.startswith("-- KEYS") for line in head), script.name
        assert source(script.name[: -len(".lua")]) == script.read_text(encoding="utf-8")


def _replay(fake: fakeredis.FakeRedis, delivery_id: str, appid: str = "we_a") -> int:
    queue = keys.rq.queue("svcgw")
    script = fake.register_script(source("replay"))
    return int(
        script(
            keys=[
                keys.rq.failed("svcgw"),
                queue,
                keys.delivery(delivery_id),
                keys.delivery_attempts(delivery_id),
                keys.rq.job(delivery_id),
                keys.dead_letters_by_appid(appid),
                keys.rq.queues,
            ],
            args=[delivery_id, 6, queue],
        )
    )


def _dead(fake: fakeredis.FakeRedis, delivery_id: str) -> None:
    fake.zadd(keys.rq.failed("svcgw"), {delivery_id: 1e12})
    fake.hset(keys.delivery(delivery_id), mapping={"state": "dead", "failures": 7})
    fake.expire(keys.delivery(delivery_id), 3600)
    fake.hset(keys.rq.job(delivery_id), mapping={"status": "failed", "exc_info": b"x", "ended_at": "t"})
    fake.sadd(keys.dead_letters_by_appid("we_a"), delivery_id)


def test_replay_queues_a_dead_letter_for_one_fresh_attempt(fake: fakeredis.FakeRedis) -> None:
    _dead(fake, "dlv_1")
    assert _replay(fake, "dlv_1") == 1
    assert fake.lrange(keys.rq.queue("svcgw"), 0, -1) == [b"dlv_1"]
    assert fake.zscore(keys.rq.failed("svcgw"), "dlv_1") is None
    delivery = fake.hgetall(keys.delivery("dlv_1"))
    # failures = the schedule's length: one fresh attempt, then dead again if it fails.
    assert delivery[b"state"] == b"queued" and delivery[b"failures"] == b"6"
    assert fake.ttl(keys.delivery("dlv_1")) == -1
    job = fake.hgetall(keys.rq.job("dlv_1"))
    assert job[b"status"] == b"queued" and b"exc_info" not in job and b"ended_at" not in job
    assert fake.smembers(keys.dead_letters_by_appid("we_a")) == set()
    assert fake.sismember(keys.rq.queues, keys.rq.queue("svcgw"))


def test_replay_of_something_not_dead_changes_nothing(fake: fakeredis.FakeRedis) -> None:
    assert _replay(fake, "dlv_none") == 0
    assert fake.llen(keys.rq.queue("svcgw")) == 0


def test_replay_of_an_expired_dead_letter_says_so(fake: fakeredis.FakeRedis) -> None:
    _dead(fake, "dlv_gone")
    fake.delete(keys.delivery("dlv_gone"))
    assert _replay(fake, "dlv_gone") == -1
    assert fake.llen(keys.rq.queue("svcgw")) == 0
    assert fake.zscore(keys.rq.failed("svcgw"), "dlv_gone") is None


def test_the_registry_puts_shared_code_before_the_script_that_calls_it() -> None:
    assert text("ingest") == "\n".join((source("delivery"), source("dedup"), source("ingest")))
    assert text("queue_delivery") == "\n".join((source("delivery"), source("chain"), source("queue_delivery")))
    finish = ("chain", "breaker", "failing", "bare_outcome", "queue_finish")
    assert text("queue_finish") == "\n".join(source(part) for part in finish)
    assert text("replay") == source("replay")


def test_the_admission_script_runs_the_rate_window_as_a_function_and_names_no_key_itself() -> None:
    script = text("gateway_admit")
    assert script == "\n".join((source("clock"), "local function rate_window(KEYS, ARGV)", source("rate_window"),
                                 "end", source("gateway_admit")))  # fmt: skip
    assert "NAMES" not in script and keys.prefix not in script


def test_the_windows_of_calls_read_one_clock_written_once() -> None:
    assert text("rate_window") == source("clock") + "\n" + source("rate_window")
    assert text("signin_reserve") == source("clock") + "\n" + source("signin_reserve")
    # The admission's own clock and its rate window's are the one function, included once.
    assert text("gateway_admit").count(source("clock")) == 1
    for name in ("rate_window", "gateway_admit", "signin_reserve"):
        assert "'TIME'" not in source(name), name
        assert "clock_ms(" in source(name), name


@pytest.mark.parametrize("given, expected", [("1700000000123", 1700000000123), ("", None)])
def test_the_clock_is_the_callers_or_the_servers(fake: fakeredis.FakeRedis, given: str, expected: int | None) -> None:
    clock = fake.register_script(source("clock") + "\nreturn clock_ms(ARGV[1])")
    before = int(fake.time()[0]) * 1000
    now = int(clock(keys=[], args=[given]))
    if expected is None:
        assert before <= now <= before + 5_000
    else:
        assert now == expected


def test_the_registry_names_every_script_the_service_runs_and_no_part() -> None:
    from importlib import resources

    files = {p.name[: -len(".lua")] for p in resources.files("svcgw.storage").joinpath("lua").iterdir()
             if p.name.endswith(".lua")}  # fmt: skip
    assert set(names()) == files - {"delivery", "chain", "dedup", "clock", "breaker", "failing", "bare_outcome"}
    assert {"rate_window", "gateway_admit", "retag", "queue_delivery", "ingest"} <= set(names())


def test_a_script_added_to_a_transaction_is_an_eval_of_its_whole_text(fake: fakeredis.FakeRedis) -> None:
    fake.sadd(keys.instances, "we_a")
    with fake.pipeline(transaction=True) as pipe:
        pipe.hset(keys.instance("we_a"), "account", "acc_1")
        add_to_transaction(pipe, "liveness_registered",
                           keys=(keys.instances, keys.metrics_instances, keys.instance("we_a")), args=("we_a",))
        (command,) = [c for c in pipe.command_stack if c[0][0] == "EVAL"]  # fmt: skip
        pipe.execute()
    assert command[0][1:3] == (text("liveness_registered"), 3)
    assert fake.sismember(keys.instances, "we_a")


def test_a_batched_script_is_the_registrys(fake: fakeredis.FakeRedis) -> None:
    from redis.asyncio import Redis as AsyncRedis

    client = AsyncRedis()  # never connected: the batch only holds the script
    try:
        batch = batched(client, "gateway_admit")
        assert isinstance(batch, ScriptBatch)
        assert batch._script.script == text("gateway_admit")
    finally:
        asyncio.run(client.aclose())


# --- no script run but through the registry -------------------------------------------------
ROOT = Path(__file__).resolve().parents[3]
CODE = ("svcgw", "receiver", "worker", "cli", "simulator", "deploy")
REGISTRY = "svcgw/storage/scripts.py"
# What sends a script to Redis, or loads one; the batch sends the registry's scripts by their SHA-1 (as the raw
# command: a Cluster pipeline refuses its evalsha() method).
_SENDS = {"register_script", "eval", "eval_ro", "evalsha", "evalsha_ro", "script_load", "fcall", "fcall_ro",
          "function_load"}  # fmt: skip
# The durable post on a Cluster sends the registry's own Script object's text whole, with its WAIT, to
# the slot's master (svcgw.intake.ingest, Ingest._run_on_cluster_node).
_ALLOWED = {REGISTRY: _SENDS, "svcgw/storage/scriptbatch.py": {"evalsha", "script_load", "EVALSHA"},
            "svcgw/intake/ingest.py": {"EVAL"}}  # fmt: skip
_COMMANDS = {"EVAL", "EVAL_RO", "EVALSHA", "EVALSHA_RO", "SCRIPT", "FCALL", "FCALL_RO", "FUNCTION"}


def bypasses(path: str, code: str) -> list[str]:
    """What in ``code`` (the file ``path``) runs or reads a script other than through the registry."""
    found = []
    for node in ast.walk(ast.parse(code)):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in _SENDS and called not in _ALLOWED.get(path, set()):
                found.append(f"{where}: {called}()")
            first = node.args[0] if node.args else None
            if (called == "execute_command" and isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and first.value.upper() in _COMMANDS and first.value not in _ALLOWED.get(path, set())):  # fmt: skip
                found.append(f"{where}: execute_command({first.value!r})")
        elif isinstance(node, ast.ImportFrom) and node.module == "svcgw.storage.scripts" and path != REGISTRY:
            # The text of a script is for the registry to send; a part of one, for nobody.
            found += [f"{where}: imports {a.name}" for a in node.names if a.name in ("text", "source")]
        elif (isinstance(node, ast.Attribute) and node.attr in ("text", "source")
              and isinstance(node.value, ast.Name) and node.value.id == "scripts"):  # fmt: skip
            found.append(f"{where}: scripts.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and path != REGISTRY:
            if "redis.call(" in node.value or node.value.endswith(".lua"):
                found.append(f"{where}: Lua of its own")
    return found


def test_no_code_runs_a_script_but_through_the_registry() -> None:
    files = sorted(p for package in CODE for p in (ROOT / package).rglob("*.py"))
    assert len(files) > 100 and (ROOT / REGISTRY) in files
    found = [hit for p in files for hit in bypasses(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize(
    "code",
    [
        "pipe.eval(text('x'), 1, 'k')",
        "self._script = redis.register_script(scripts.source('signin_reserve'))",
        "from svcgw.storage.scripts import text",
        "await client.evalsha(sha, 0)",
        "await redis.execute_command('EVALSHA', sha, 0)",
        "S = \"return redis.call('GET', KEYS[1])\"",
        "await redis.script_load(body)",
    ],
)
def test_a_bypass_is_found(code: str) -> None:
    assert bypasses("receiver/gateway/somewhere.py", code)


def test_the_registrys_own_calls_are_no_bypass() -> None:
    assert bypasses(REGISTRY, (ROOT / REGISTRY).read_text(encoding="utf-8")) == []
    assert bypasses("svcgw/storage/scriptbatch.py", "pipe.evalsha(sha, 1, 'k')") == []
    assert bypasses("svcgw/storage/scriptbatch.py", "pipe.execute_command('EVALSHA', sha, 1, 'k')") == []
    assert bypasses("svcgw/storage/scriptbatch.py", "pipe.execute_command('EVAL', body, 1, 'k')")
    assert bypasses("svcgw/storage/scriptbatch.py", "redis.register_script('x')")


def test_a_script_registered_by_name_runs(fake: fakeredis.FakeRedis) -> None:
    _dead(fake, "dlv_2")
    replayed = register(fake, "replay")
    queue = keys.rq.queue("svcgw")
    keys_ = [keys.rq.failed("svcgw"), queue, keys.delivery("dlv_2"), keys.delivery_attempts("dlv_2"),
             keys.rq.job("dlv_2"), keys.dead_letters_by_appid("we_a"), keys.rq.queues]  # fmt: skip
    assert replayed(keys=keys_, args=["dlv_2", 6, queue]) == 1


def test_the_claim_holds_back_the_ids_of_the_instances_it_is_given_and_leases_the_rest(
    fake: fakeredis.FakeRedis,
) -> None:
    queue, inflight, scheduled = keys.rq.queue("svcgw"), keys.inflight("svcgw"), keys.rq.scheduled("svcgw")
    ids = ["we-a-1-1700000000000-0", "we_b-1700000000001-0", "dlv_" + "0" * 24, "we-a-1-1700000000002-3", "we-a-2"]
    fake.rpush(queue, *ids)
    claim = fake.register_script(source("queue_claim"))
    # "we-a-1" holds back its own ids only: not "we-a" (a prefix) nor an id of no instance.
    head: list[str | float] = [10, 500, 100, 0.5, 120]  # count, lease until, now, seed, seconds a parked set is kept
    holds: list[str | float] = ["we-a-1", 900, 0, 0, "we-a", 800, 0, 0, "", 700, 0, 0]
    answer = claim(keys=[queue, inflight, scheduled], args=[*head, *holds])
    assert answer[0] == 2
    assert [i.decode() for i in answer[1:]] == ["we_b-1700000000001-0", "dlv_" + "0" * 24, "we-a-2"]
    assert fake.zrange(scheduled, 0, -1, withscores=True) == [
        (b"we-a-1-1700000000000-0", 900.0),
        (b"we-a-1-1700000000002-3", 900.0),
    ]
    assert {m.decode() for m in fake.zrange(inflight, 0, -1)} == set(ids) - {ids[0], ids[3]}
    assert fake.llen(queue) == 0
    assert claim(keys=[queue, inflight, scheduled], args=head) == [0]


def test_the_claim_lines_the_jobs_of_a_destination_being_probed_up_in_its_parked_set(
    fake: fakeredis.FakeRedis,
) -> None:
    queue, inflight, scheduled = keys.rq.queue("svcgw"), keys.inflight("svcgw"), keys.rq.scheduled("svcgw")
    parked = keys.parked("http://hung.test:80")
    fake.zadd(parked, {"gone-1700000000000-0": 50.0})  # due before now: it came back already
    ids = [f"we_h-17000000000{n:02d}-0" for n in range(20)]
    fake.rpush(queue, *ids)
    claim = fake.register_script(source("queue_claim"))
    answer = claim(keys=[queue, inflight, scheduled, parked], args=[100, 500, 100, 0.25, 120, "we_h", 130, 60, 4])
    assert answer == [20]
    dues = dict(fake.zrange(scheduled, 0, -1, withscores=True))
    assert len(dues) == 20 and all(130 <= due <= 190 and due == int(due) for due in dues.values())  # whole seconds
    assert len({round(due) for due in dues.values()}) > 15  # spread over the minute
    assert dict(fake.zrange(parked, 0, -1, withscores=True)) == dues
    assert 0 < fake.ttl(parked) <= 120
