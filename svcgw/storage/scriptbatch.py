"""Calls of one Lua script made in the same turn of the event loop, sent to Redis together.

At c=50 a server process reads several gateway calls (or receiver posts) per
turn of its event loop, and each needs the admission (or ingest) script once. Sent one by one, every
call pays redis-py's whole command path (pool, retry, connection, parser)
and a write and a read of its own: about 50 µs of CPU a call. A
:class:`ScriptBatch` collects the calls made in one turn and sends them as
one pipeline (``transaction=False``) when the turn ends: one connection,
one write, one read for all of them, each call still its own ``EVALSHA``
(atomic on its own; Redis runs them in the order they were made). A call
alone in its turn is sent alone, with the client's ordinary command path.

Each call gets its own result or its own error: a script error answers
only the call that caused it; a connection error (after the client's own
retries) answers every call of the batch, as it would have answered each
on its own. A script missing from Redis (after a restart or ``SCRIPT
FLUSH``) is loaded, and the calls it refused, which did not run, are sent
again once.

On a Redis Cluster the calls are grouped by the master that holds each
call's slot (every key of a call is in one slot; the client's map of slots,
``get_node_from_key``, says whose), and each group goes down one connection
of its master (the client's ``ClusterNode.execute_pipeline``, with redis-py's
own ``PipelineCommand``), the groups at once: one write and one read per
master. A call that met ``MOVED``, ``ASK``, ``TRYAGAIN`` or ``CLUSTERDOWN``,
or whose master was not reached, is sent again alone through the Cluster
client, which follows the redirection, waits the others out with its
retries and learns the map again; a call already answered is never sent
again, and a call whose answer was lost with its connection may have run
(at least once, as a single call retried by redis-py). So a master that
cannot be reached fails the calls of its slots, not the others': redis-py's
own Cluster pipeline resets every connection of the client when one master
cannot be reached, cutting off the other masters' answers too, and it
refuses its ``evalsha()`` method. Calls whose slot the map does not know
yet (a client that has not learnt it) go as a Cluster pipeline of raw
``EVALSHA`` commands, which learns it.

The batch belongs to the loop of its first call, as the client's
connections do. It is made by :func:`svcgw.storage.scripts.batched`, from a
script of the registry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import ClusterNode, PipelineCommand
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import AskError, ClusterDownError, NoScriptError, SlotNotCoveredError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["ScriptBatch"]

_Call = tuple[Sequence[str], Sequence[str], "asyncio.Future[Any]"]

# What a call sent down a master's connection may meet that the Cluster client deals with when the call
# is sent alone: a redirection (MOVED is an AskError), a slot being moved or failed over, a master not
# reached. Sent alone, it follows the redirection, waits the others out with its retries, and learns
# the map again.
_ALONE = (AskError, TryAgainError, ClusterDownError, RedisConnectionError, RedisTimeoutError)


class ScriptBatch:
    def __init__(self, script: AsyncScript) -> None:
        self._script = script
        self._redis = script.registered_client
        # Known once: on one Redis a batch goes straight to _run_group, without a coroutine more per turn.
        self._cluster = isinstance(self._redis, AsyncRedisCluster)
        self._calls: list[_Call] = []  # made in this turn of self._loop, sent when it ends
        self._loop: asyncio.AbstractEventLoop | None = None
        # The batches being sent: a task must be referenced until it is done.
        self._sending: set[asyncio.Task[None]] = set()

    async def __call__(self, *, keys: Sequence[str], args: Sequence[str]) -> Any:
        """The script's result for ``keys`` and ``args``, sent with the other calls of this turn."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        calls = self._calls
        # A batch of another loop was left unsent when that loop stopped: this loop starts its own.
        if not calls or self._loop is not loop:
            calls = self._calls = []
            self._loop = loop
            loop.call_soon(self._send, calls)
        calls.append((keys, args, future))
        return await future

    def _send(self, calls: list[_Call]) -> None:
        if calls is self._calls:
            self._calls = []
        run = self._run(calls) if self._cluster else self._run_group(calls, None)
        task = asyncio.get_running_loop().create_task(run)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _run(self, calls: list[_Call]) -> None:
        """On a Cluster: the calls grouped by master, each group sent at once."""
        redis = self._redis
        if len(calls) > 1 and isinstance(redis, AsyncRedisCluster):
            await asyncio.gather(*(self._run_group(group, node) for node, group in _by_master(redis, calls)))
        else:
            await self._run_group(calls, None)

    async def _run_group(self, calls: list[_Call], node: ClusterNode | None) -> None:
        """Send ``calls`` together (on a Cluster, to ``node``, the master of their slots) and answer each."""
        try:
            if len(calls) == 1:
                keys, args, future = calls[0]
                _settle(future, await self._script(keys=keys, args=args))
                return
            results = await self._pipeline(calls, node)
            missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
            if missing:
                await self._redis.script_load(self._script.script)
                again = await self._pipeline([calls[i] for i in missing], node)
                for i, result in zip(missing, again, strict=True):
                    results[i] = result
            if node is not None:
                # Redirected, or the master not reached: each again alone, through the Cluster client.
                alone = [i for i, result in enumerate(results) if isinstance(result, _ALONE)]
                answers = await asyncio.gather(
                    *(self._script(keys=calls[i][0], args=calls[i][1]) for i in alone), return_exceptions=True
                )
                for i, answer in zip(alone, answers, strict=True):
                    results[i] = answer
            for (_, _, future), result in zip(calls, results, strict=True):
                if isinstance(result, BaseException):
                    _fail(future, result)
                else:
                    _settle(future, result)
        except BaseException as exc:
            for _, _, future in calls:
                _fail(future, exc)
            if not isinstance(exc, Exception):
                raise

    async def _pipeline(self, calls: Sequence[_Call], node: ClusterNode | None) -> list[Any]:
        """Each call's result or error: in one pipeline of the client, or down one connection of ``node``."""
        sha = self._script.sha
        if node is not None:
            commands = [PipelineCommand(i, "EVALSHA", sha, len(keys), *keys, *args)
                        for i, (keys, args, _) in enumerate(calls)]  # fmt: skip
            try:
                await node.execute_pipeline(commands)
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                return [exc] * len(calls)  # not sent: each goes alone through the Cluster client
            return [command.result for command in commands]
        pipe = self._redis.pipeline(transaction=False)
        for keys, args, _ in calls:
            # The raw command, not pipe.evalsha(): a Cluster pipeline refuses that method (see above).
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


def _by_master(redis: AsyncRedisCluster, calls: list[_Call]) -> list[tuple[ClusterNode | None, list[_Call]]]:
    """The calls by the master of their slot, as the client's map has it; those it does not know yet, apart."""
    groups: dict[str, tuple[ClusterNode | None, list[_Call]]] = {}
    for call in calls:
        keys = call[0]
        try:
            node = redis.get_node_from_key(keys[0]) if keys else None
        except SlotNotCoveredError:  # the map not learnt yet, or a slot no master holds
            node = None
        groups.setdefault(node.name if node is not None else "", (node, []))[1].append(call)
    return list(groups.values())


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # a caller that went away (cancelled) wants nothing
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if future.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        future.cancel()  # the loop is shutting down: the callers are cancelled too
    else:
        future.set_exception(exc)
