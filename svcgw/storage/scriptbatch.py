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
call's slot (every key of a call is in one slot, the client's map of slots
says whose), and each group is sent, the groups at once, as a redis-py
Cluster pipeline: down one connection of that master, a call that met
``MOVED``, ``ASK`` or ``TRYAGAIN`` sent again on its own through the Cluster
client, which follows the redirection. A group fails alone: a master that
cannot be reached (gone, its replica not yet promoted) fails the calls of
its slots, not the others'. That pipeline refuses its ``evalsha()`` method
(redis-py blocks script methods there, as the scripts' own missing-script
fallback cannot work in a pipeline); the raw ``EVALSHA`` command is routed
by the keys it names like any other, and a missing script is handled here,
so the batch sends it as such, on one Redis too.

The batch belongs to the loop of its first call, as the client's
connections do. It is made by :func:`svcgw.storage.scripts.batched`, from a
script of the registry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, SlotNotCoveredError

__all__ = ["ScriptBatch"]

_Call = tuple[Sequence[str], Sequence[str], "asyncio.Future[Any]"]


class ScriptBatch:
    def __init__(self, script: AsyncScript) -> None:
        self._script = script
        self._redis = script.registered_client
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
        task = asyncio.get_running_loop().create_task(self._run(calls))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _run(self, calls: list[_Call]) -> None:
        groups = self._by_master(calls)
        if len(groups) == 1:
            await self._run_group(calls)
        else:
            await asyncio.gather(*(self._run_group(group) for group in groups))

    def _by_master(self, calls: list[_Call]) -> list[list[_Call]]:
        """The calls in groups that fail alone: one group on one Redis; on a Cluster, one per master.

        redis-py's Cluster pipeline raises one error for all its calls when it cannot reach one
        of the masters (a master gone, its replica not yet promoted): grouped by master, the
        calls of the others are still answered. A call whose slot the client does not know yet
        goes with the first group, where the pipeline learns it.
        """
        redis = self._redis
        if len(calls) == 1 or not isinstance(redis, AsyncRedisCluster):
            return [calls]
        groups: dict[str, list[_Call]] = {}
        for call in calls:
            keys = call[0]
            try:
                node = redis.get_node_from_key(keys[0]) if keys else None
            except SlotNotCoveredError:
                node = None
            groups.setdefault(node.name if node is not None else "", []).append(call)
        return list(groups.values())

    async def _run_group(self, calls: list[_Call]) -> None:
        try:
            if len(calls) == 1:
                keys, args, future = calls[0]
                _settle(future, await self._script(keys=keys, args=args))
                return
            results = await self._pipeline(calls)
            missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
            if missing:
                await self._redis.script_load(self._script.script)
                again = await self._pipeline([calls[i] for i in missing])
                for i, result in zip(missing, again, strict=True):
                    results[i] = result
            for (_, _, future), result in zip(calls, results, strict=True):
                if isinstance(result, Exception):
                    _fail(future, result)
                else:
                    _settle(future, result)
        except BaseException as exc:
            for _, _, future in calls:
                _fail(future, exc)
            if not isinstance(exc, Exception):
                raise

    async def _pipeline(self, calls: Sequence[_Call]) -> list[Any]:
        # One Redis: one pipeline. A Cluster: the calls of one master, redirected ones sent again alone.
        pipe = self._redis.pipeline(transaction=False)
        sha = self._script.sha
        for keys, args, _ in calls:
            # The raw command, not pipe.evalsha(): a Cluster pipeline refuses that method (see above).
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


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
