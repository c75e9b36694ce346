"""The calls of one turn of the event loop go to Redis as one pipeline, each with its own answer."""

from __future__ import annotations

import asyncio
import gc
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from svcgw.storage.scriptbatch import ScriptBatch
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture
from tests.support import free_port

# Counts its calls per key and fails on demand: every answer says which call it was.
COUNTING = """
if ARGV[1] == 'fail' then return redis.error_reply('asked to fail') end
return {ARGV[1], redis.call('INCR', KEYS[1])}
"""


def fresh(script: str) -> str:
    """The script under a name Redis has never seen, so that its first calls find it missing."""
    return f"-- {uuid.uuid4()}\n{script}"


def run(redis_url: str, body: Callable[[AsyncRedis, AsyncRedis], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        name = f"batch-{uuid.uuid4().hex[:8]}"
        client = AsyncRedis.from_url(redis_url, decode_responses=True, client_name=name)
        observer = AsyncRedis.from_url(redis_url, decode_responses=True)
        try:
            return await body(client, observer)
        finally:
            await client.aclose()
            await observer.aclose()

    return asyncio.run(main())


async def connections_named(observer: AsyncRedis, client: AsyncRedis) -> int:
    name = client.get_connection_kwargs()["client_name"]  # type: ignore[no-untyped-call]
    return sum(1 for entry in await observer.client_list() if entry["name"] == name)


def test_calls_of_one_turn_share_one_connection_and_each_gets_its_own_answer(redis_url: str) -> None:
    async def body(client: AsyncRedis, observer: AsyncRedis) -> None:
        batch = ScriptBatch(client.register_script(fresh(COUNTING)))
        # The first turn finds the script missing: it is loaded and the calls run once each.
        first = await asyncio.gather(*(batch(keys=["counter"], args=[f"call-{i}"]) for i in range(20)))
        assert first == [[f"call-{i}", i + 1] for i in range(20)]  # each its own, in the order made
        second = await asyncio.gather(*(batch(keys=["counter"], args=[f"again-{i}"]) for i in range(20)))
        assert second == [[f"again-{i}", 21 + i] for i in range(20)]
        assert await observer.get("counter") == "40"
        # Forty concurrent calls, one connection: they went as pipelines, not one by one.
        assert await connections_named(observer, client) == 1

    run(redis_url, body)


def test_a_call_alone_in_its_turn_is_answered(redis_url: str) -> None:
    async def body(client: AsyncRedis, observer: AsyncRedis) -> None:
        batch = ScriptBatch(client.register_script(fresh(COUNTING)))
        assert await batch(keys=["alone"], args=["a"]) == ["a", 1]
        assert await batch(keys=["alone"], args=["b"]) == ["b", 2]

    run(redis_url, body)


def test_a_script_error_answers_only_the_call_that_caused_it(redis_url: str) -> None:
    async def body(client: AsyncRedis, observer: AsyncRedis) -> None:
        batch = ScriptBatch(client.register_script(fresh(COUNTING)))
        answers = await asyncio.gather(
            batch(keys=["k"], args=["one"]), batch(keys=["k"], args=["fail"]), batch(keys=["k"], args=["two"]),
            return_exceptions=True,
        )  # fmt: skip
        assert answers[0] == ["one", 1] and answers[2] == ["two", 2]
        assert isinstance(answers[1], ResponseError) and "asked to fail" in str(answers[1])
        with pytest.raises(ResponseError, match="asked to fail"):
            await batch(keys=["k"], args=["fail"])  # alone, too

    run(redis_url, body)


def test_an_unreachable_redis_fails_every_call_of_the_batch() -> None:
    async def main() -> None:
        # No retries with back-off: the outcome is the same, sooner.
        client = AsyncRedis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
        try:
            batch = ScriptBatch(client.register_script(COUNTING))
            answers = await asyncio.gather(
                *(batch(keys=["k"], args=[str(i)]) for i in range(5)), return_exceptions=True
            )
            assert all(isinstance(answer, RedisConnectionError) for answer in answers), answers
            with pytest.raises(RedisConnectionError):
                await batch(keys=["k"], args=["alone"])
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_caller_that_leaves_does_not_disturb_the_others(redis_url: str) -> None:
    async def body(client: AsyncRedis, observer: AsyncRedis) -> None:
        batch = ScriptBatch(client.register_script(fresh(COUNTING)))
        leaving = asyncio.ensure_future(batch(keys=["c"], args=["leaving"]))
        staying = asyncio.ensure_future(batch(keys=["c"], args=["staying"]))
        await asyncio.sleep(0)
        leaving.cancel()
        assert await staying == ["staying", 2]  # the cancelled call was sent all the same
        with pytest.raises(asyncio.CancelledError):
            await leaving

    run(redis_url, body)


def test_a_batch_left_unsent_by_a_stopped_loop_does_not_hold_up_the_next_loop(redis_url: str) -> None:
    client = AsyncRedis.from_url(redis_url, decode_responses=True)
    batch = ScriptBatch(client.register_script(fresh(COUNTING)))

    stranded: list[asyncio.Future[Any]] = []

    async def start_one() -> None:
        stranded.append(asyncio.ensure_future(batch(keys=["n"], args=["stranded"])))
        await asyncio.sleep(0)  # the call is made...
        loop = asyncio.get_running_loop()
        loop.stop()  # ...and its loop stops before the turn that would send it ends
        await loop.create_future()

    stopped = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError, match="stopped before"):
            stopped.run_until_complete(start_one())
    finally:
        stopped.close()
    assert not stranded[0].done()

    async def next_loop() -> Any:
        try:
            return await asyncio.wait_for(batch(keys=["n"], args=["next"]), 5)
        finally:
            await client.aclose()

    assert asyncio.run(next_loop()) == ["next", 1]  # the stranded call never ran


# --- on a Redis Cluster -----------------------------------------------------------------------
cluster = cluster_fixture("module")


def on_cluster(cluster: RedisClusterFleet, body: Callable[[AsyncRedisCluster], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        seed = cluster.nodes[0]
        name = f"batch-{uuid.uuid4().hex[:8]}"
        client = AsyncRedisCluster(host=seed.host, port=seed.port, decode_responses=True, client_name=name)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def named_connections(cluster: RedisClusterFleet, name: str) -> dict[str, int]:
    """Each master's connections named ``name``."""
    counts = {}
    for node in cluster.nodes:
        client = node.client(decode_responses=True)
        try:
            counts[node.address] = sum(1 for entry in client.client_list() if entry["name"] == name)
        finally:
            client.close()
    return counts


def test_on_a_cluster_the_calls_of_one_turn_go_to_each_master_down_one_connection(
    cluster: RedisClusterFleet,
) -> None:
    """redis-py's Cluster pipeline refuses its ``evalsha()``: the batch must still send the calls of a turn
    together, each to the master of its slot, and each call gets its own answer."""
    tags = [f"{{s{i}}}" for i in range(16)]  # the virtual shards' tags: spread over the three masters

    async def body(client: AsyncRedisCluster) -> None:
        batch = ScriptBatch(client.register_script(fresh(COUNTING)))
        # The first turn finds the script missing on every master: it is loaded and each call runs once.
        first = await asyncio.gather(*(batch(keys=[f"{tags[i % 16]}n"], args=[f"call-{i}"]) for i in range(48)))
        assert first == [[f"call-{i}", i // 16 + 1] for i in range(48)]
        second = await asyncio.gather(*(batch(keys=[f"{tags[i % 16]}n"], args=[f"again-{i}"]) for i in range(48)))
        assert second == [[f"again-{i}", i // 16 + 4] for i in range(48)]
        with pytest.raises(ResponseError, match="asked to fail"):
            await asyncio.gather(batch(keys=[f"{tags[0]}n"], args=["one"]), batch(keys=[f"{tags[1]}n"], args=["fail"]))
        # Ninety-six concurrent calls over three masters: one connection to each (the seed has one more, which
        # learnt the slots), not one per call.
        name = client.get_connection_kwargs()["client_name"]
        per_node = named_connections(cluster, name)
        assert len(per_node) == 3 and max(per_node.values()) <= 2 and sum(per_node.values()) <= 4, per_node

    on_cluster(cluster, body)


def test_on_a_cluster_a_call_alone_in_its_turn_is_answered(cluster: RedisClusterFleet) -> None:
    async def body(client: AsyncRedisCluster) -> None:
        batch = ScriptBatch(client.register_script(fresh(COUNTING)))
        assert await batch(keys=["{s5}alone"], args=["a"]) == ["a", 1]
        assert await batch(keys=["{s5}alone"], args=["b"]) == ["b", 2]

    on_cluster(cluster, body)


def test_on_a_cluster_a_master_that_is_gone_fails_only_the_calls_of_its_slots(tmp_path: Path) -> None:
    """The calls of a turn for the masters that answer get their answers; only those for the one killed fail.

    The Cluster keeps serving the slots it still covers (``cluster-require-full-coverage no``), as it
    does for a slot while its replica takes over.
    """
    cluster = RedisClusterFleet(tmp_path / "cluster", extra=["--cluster-require-full-coverage", "no"]).start()
    tags = [f"{{s{i}}}" for i in range(16)]

    async def body(client: AsyncRedisCluster) -> None:
        batch = ScriptBatch(client.register_script(fresh(COUNTING)))
        await asyncio.gather(*(batch(keys=[f"{tag}n"], args=["first"]) for tag in tags))  # the map learnt
        holders = {tag: client.get_node_from_key(f"{tag}n") for tag in tags}
        gone = holders[tags[1]]
        assert gone is not None
        next(node for node in cluster.nodes if node.port == int(gone.port)).kill()
        # The first turn finds its connection to the killed master broken, the next has none to open.
        for turn, word in enumerate(("after", "again"), 2):
            answers = await asyncio.gather(*(batch(keys=[f"{tag}n"], args=[word]) for tag in tags),
                                           return_exceptions=True)  # fmt: skip
            for tag, answer in zip(tags, answers, strict=True):
                holder = holders[tag]
                if holder is not None and holder.name == gone.name:
                    assert isinstance(answer, Exception), (tag, answer)
                else:
                    assert answer == [word, turn], (tag, answer)

    try:
        on_cluster(cluster, body)
    finally:
        cluster.close()
        # Learning the map again after the master was lost, redis-py's Cluster client drops node objects whose
        # connections only the garbage collector closes: collected here, not in whatever test runs next.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
