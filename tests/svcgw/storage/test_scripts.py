"""The Lua scripts' logic, on fakeredis (with Lua): fast, one script at a time.

Integration tests run the same scripts against a real Redis; these pin down
each branch of a script without a server.
"""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest

from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.scripts import register, source, text


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
    assert text("queue_finish") == "\n".join((source("chain"), source("probing"), source("queue_finish")))
    assert text("replay") == source("replay")


def test_the_admission_script_runs_the_rate_window_as_a_function_and_names_no_key_itself() -> None:
    script = text("gateway_admit")
    assert script == "local function rate_window(KEYS, ARGV)\n" + source("rate_window") + "\nend\n" + source(
        "gateway_admit"
    )
    assert "NAMES" not in script and keys.prefix not in script


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
    head = [10, 500, 100, 0.5, 120]  # count, lease until, now, seed, seconds a parked set is kept
    holds = ["we-a-1", 900, 0, 0, "we-a", 800, 0, 0, "", 700, 0, 0]
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
    assert len(dues) == 20 and all(130 <= due < 190 for due in dues.values())
    assert len({round(due) for due in dues.values()}) > 15  # spread over the minute
    assert dict(fake.zrange(parked, 0, -1, withscores=True)) == dues
    assert 0 < fake.ttl(parked) <= 120
