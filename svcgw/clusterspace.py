"""A Redis Cluster's virtual shard as a Redis of its own: every key it names carries the shard's tag.

On a Cluster, shard ``i`` is the hash tag ``{s<i>}`` (svcgw.shards). Its client is a
:class:`TaggedCluster` (blocking) or :class:`AsyncTaggedCluster` (asyncio): a Cluster client that
puts the tag in front of every key argument of every command, pipelined, in a transaction or in a
script's KEYS, and takes it off the key names a reply carries (``SCAN``). ``svcgw:log:{<appid>}``
is ``{s3}svcgw:log:{<appid>}`` on the Cluster; Redis hashes a key by its first ``{…}``, so every key
of one shard is in one slot: its scripts and transactions run there, and resharding the Cluster
moves the slot, never our data. Everything else of the service is as on one Redis per shard: the
same key names, the same scripts (each names every key it touches, which is what makes this
possible), shard 0 holding what belongs to the whole service.

Which arguments of a command are keys comes from a table of the commands' key positions (those of
Redis's ``COMMAND``), with the commands whose keys move (``EVAL``, ``ZUNIONSTORE``, ``XREAD`` …)
worked out from their arguments; a command this module cannot place is refused
(:class:`UnplaceableCommand`) rather than sent untagged to a slot of no shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterPipeline, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from .errors import Failure

__all__ = ["AsyncTaggedCluster", "TaggedCluster", "UnplaceableCommand", "key_positions", "tagged", "untagged"]


class UnplaceableCommand(Failure):
    """A command whose keys this module cannot find: it would reach a slot of no shard."""


# (first key, last key (negative: from the end), step) of the commands with fixed key positions,
# as Redis's COMMAND gives them; commands without keys are (0, 0, 0).
_FIXED: dict[str, tuple[int, int, int]] = {
    **dict.fromkeys(
        (
            "get", "set", "setnx", "setex", "psetex", "getdel", "getex", "getset", "incr", "incrby", "incrbyfloat",
            "decr", "decrby", "append", "strlen", "expire", "pexpire", "expireat", "pexpireat", "ttl", "pttl",
            "expiretime", "pexpiretime", "persist", "type", "dump", "restore",
            "hset", "hsetnx", "hget", "hmget", "hmset", "hgetall", "hdel", "hexists", "hincrby", "hincrbyfloat",
            "hkeys", "hvals", "hlen", "hstrlen", "hscan", "hrandfield", "hexpire", "hpexpire", "hexpireat",
            "hpexpireat", "httl", "hpttl", "hpersist", "hgetdel", "hgetex", "hsetex",
            "lpush", "rpush", "lpushx", "rpushx", "lpop", "rpop", "llen", "lrange", "lindex", "lset", "lrem",
            "ltrim", "linsert", "lpos",
            "sadd", "srem", "smembers", "sismember", "smismember", "scard", "spop", "srandmember", "sscan",
            "zadd", "zrem", "zscore", "zmscore", "zincrby", "zcard", "zcount", "zrange", "zrangebyscore",
            "zrevrange", "zrevrangebyscore", "zrangebylex", "zrevrangebylex", "zrank", "zrevrank",
            "zremrangebyscore", "zremrangebyrank", "zremrangebylex", "zpopmin", "zpopmax", "zscan",
            "zrandmember", "zlexcount",
            "xadd", "xrange", "xrevrange", "xlen", "xdel", "xtrim", "xack", "xclaim", "xautoclaim", "xpending",
            "xsetid",
            "pfadd", "pfcount", "setrange", "getrange", "setbit", "getbit", "bitcount",
        ),
        (1, 1, 1),
    ),
    **dict.fromkeys(("del", "unlink", "exists", "touch", "watch", "mget", "sinter", "sunion", "sdiff"), (1, -1, 1)),
    **dict.fromkeys(("rename", "renamenx", "rpoplpush", "lmove", "smove", "copy", "zrangestore"), (1, 2, 1)),
    **dict.fromkeys(("blmove", "brpoplpush"), (1, 2, 1)),
    **dict.fromkeys(("blpop", "brpop", "bzpopmin", "bzpopmax"), (1, -2, 1)),
    **dict.fromkeys(("mset", "msetnx"), (1, -1, 2)),
    **dict.fromkeys(("sinterstore", "sunionstore", "sdiffstore"), (1, -1, 1)),
    # No keys: what a client, RQ or the service sends besides data commands.
    **dict.fromkeys(
        (
            "ping", "echo", "info", "time", "multi", "exec", "discard", "unwatch", "select", "auth", "hello",
            "client", "config", "dbsize", "flushdb", "flushall", "script", "cluster", "command", "readonly",
            "readwrite", "lastsave", "role", "wait", "waitaof", "publish", "memory|stats", "memory|doctor",
        ),
        (0, 0, 0),
    ),
    "memory|usage": (2, 2, 1),
    "object|encoding": (2, 2, 1),
    "object|freq": (2, 2, 1),
    "object|idletime": (2, 2, 1),
    "object|refcount": (2, 2, 1),
    "xinfo|stream": (2, 2, 1),
    "xinfo|groups": (2, 2, 1),
    "xgroup|create": (2, 2, 1),
    "xgroup|destroy": (2, 2, 1),
    "xgroup|setid": (2, 2, 1),
}  # fmt: skip

_CONTAINERS = frozenset(("memory", "object", "xinfo", "xgroup"))


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def key_positions(args: Sequence[Any]) -> list[int]:
    """The indexes of ``args`` (a whole command, its name first) that are key names."""
    name = _text(args[0]).lower()
    if " " in name:  # redis-py sends some subcommands as one "NAME SUB" argument
        head, _, sub = name.partition(" ")
        return [i - 1 for i in key_positions([head, sub, *args[1:]])]
    n = len(args)
    if name in ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"):
        return list(range(3, 3 + int(_text(args[2]))))
    if name in ("zunionstore", "zinterstore", "zdiffstore"):
        return [1, *range(3, 3 + int(_text(args[2])))]
    if name in ("zunion", "zinter", "zdiff", "zintercard", "sintercard", "lmpop", "zmpop"):
        return list(range(2, 2 + int(_text(args[1]))))
    if name in ("blmpop", "bzmpop"):
        return list(range(3, 3 + int(_text(args[2]))))
    if name in ("xread", "xreadgroup"):
        upper = [_text(a).upper() for a in args]
        start = upper.index("STREAMS") + 1
        count = (n - start) // 2
        return list(range(start, start + count))
    if name in _CONTAINERS and n > 1:
        name = f"{name}|{_text(args[1]).lower()}"
    spec = _FIXED.get(name)
    if spec is None:
        raise UnplaceableCommand(f"{name.upper()} on a Cluster shard: its keys cannot be placed in the shard's slot")
    first, last, step = spec
    if first == 0:
        return []
    end = last if last > 0 else n + last
    return list(range(first, min(end, n - 1) + 1, step))


def tagged(tag: str, args: Sequence[Any]) -> tuple[Any, ...]:
    """``args`` with ``tag`` in front of each key name (bytes stay bytes)."""
    out = list(args)
    for i in key_positions(args):
        key = out[i]
        if isinstance(key, bytes | bytearray | memoryview):
            out[i] = tag.encode() + bytes(key)
        else:
            out[i] = f"{tag}{key}"
    return tuple(out)


def untagged(tag: str, name: Any) -> Any:
    """A key name of a reply without the shard's ``tag``."""
    if isinstance(name, bytes):
        return name.removeprefix(tag.encode())
    if isinstance(name, str):
        return name.removeprefix(tag)
    return name


# Commands about the server: on a shard's client they go to the master of its slot (MEMORY USAGE,
# whose key is the shard's, goes there too).
_OF_THE_NODE = frozenset(("INFO", "PING", "DBSIZE", "MEMORY", "TIME", "ROLE", "LASTSAVE", "WAIT", "WAITAOF"))


def _of_the_node(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    return "target_nodes" not in kwargs and _text(args[0]).upper().split(" ")[0] in _OF_THE_NODE


def _scan_args(tag: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """SCAN's MATCH pattern under the tag (``{`` is no pattern character); without one, the tag's keys."""
    out = list(args)
    upper = [_text(a).upper() for a in out]
    if "MATCH" in upper:
        at = upper.index("MATCH") + 1
        out[at] = tag + _text(out[at])
    else:
        out += ["MATCH", tag + "*"]
    return tuple(out)


class _OneSlot:
    """Multi-key commands split by slot (``EXISTS``, ``DEL``, ``MGET`` …): every key of a shard is in one.

    redis-py splits them by each key's own slot and sends each part to that slot's master;
    the keys it would send are tagged on their way, so the slot that counts is the tag's.
    """

    tag: str

    def _partition_keys_by_slot(self, keys: Any) -> dict[int, list[Any]]:
        return {key_slot(self.tag.encode()): list(keys)}

    def _partition_pairs_by_slot(self, mapping: Any) -> dict[int, list[Any]]:
        return {key_slot(self.tag.encode()): [item for pair in mapping.items() for item in pair]}


class TaggedCluster(_OneSlot, RedisCluster):
    """A blocking Cluster client of one virtual shard: every key it names carries ``tag``."""

    def __init__(self, *args: Any, tag: str, **kwargs: Any) -> None:
        self.tag = tag
        super().__init__(*args, **kwargs)

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if _text(args[0]).upper() == "SCAN":
            cursor, names = super().execute_command(*_scan_args(self.tag, args), **kwargs)  # type: ignore[no-untyped-call]
            return cursor, [untagged(self.tag, name) for name in names]
        if _of_the_node(args, kwargs):
            kwargs["target_nodes"] = self.get_node_from_key(self.tag)  # type: ignore[no-untyped-call]
        return super().execute_command(*tagged(self.tag, args), **kwargs)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe: Any = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        # The pipeline redis-py builds, with the tagging execute_command: its constructor takes
        # the client's internals, which only redis-py's own pipeline() knows how to pass.
        pipe.__class__ = _TaggedPipeline
        pipe.tag = self.tag
        return cast(ClusterPipeline, pipe)


class _TaggedPipeline(ClusterPipeline):
    tag: str

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return super().execute_command(*tagged(self.tag, args), **kwargs)  # type: ignore[no-untyped-call]

    def watch(self, *names: Any) -> Any:
        return super().watch(*(tagged(self.tag, ("WATCH", *names))[1:]))  # type: ignore[no-untyped-call]


class AsyncTaggedCluster(_OneSlot, AsyncRedisCluster):  # type: ignore[misc]  # redis-py's own bases disagree
    """An asyncio Cluster client of one virtual shard: every key it names carries ``tag``."""

    def __init__(self, *args: Any, tag: str, **kwargs: Any) -> None:
        self.tag = tag
        super().__init__(*args, **kwargs)

    async def initialize(self, *args: Any, **kwargs: Any) -> AsyncRedisCluster:
        # A Cluster none of whose nodes answers is an unreachable Redis to the roles, which wait
        # and try again on a ConnectionError; redis-py says it with an error of its own.
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            raise RedisConnectionError(str(exc)) from exc

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if _text(args[0]).upper() == "SCAN":
            cursor, names = await super().execute_command(*_scan_args(self.tag, args), **kwargs)
            return cursor, [untagged(self.tag, name) for name in names]
        if _of_the_node(args, kwargs):
            await self.initialize()  # the slots' masters, known once initialized
            kwargs["target_nodes"] = self.get_node_from_key(self.tag)
        return await super().execute_command(*tagged(self.tag, args), **kwargs)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> AsyncClusterPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")  # as redis-py's own
        return _AsyncTaggedPipeline(self, transaction, tag=self.tag)  # type: ignore[abstract]


class _AsyncTaggedPipeline(AsyncClusterPipeline):
    def __init__(self, client: AsyncRedisCluster, transaction: bool | None = None, *, tag: str) -> None:
        super().__init__(client, transaction)
        self.tag = tag

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return super().execute_command(*tagged(self.tag, args), **kwargs)

    async def watch(self, *names: Any) -> Any:  # type: ignore[override]
        return await super().watch(*(tagged(self.tag, ("WATCH", *names))[1:]))  # type: ignore[no-untyped-call]
