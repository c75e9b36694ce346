"""Upgrades of key names in place: each shard's keys carry exactly one hash tag.

Two renames, each run once per shard by the first process of a version that needs it, before it
writes anything (from :func:`svcgw.storage.layoutversion.read`, which then records it in the layout marker):

* **``tags``** (one Redis, Sentinel, separate deployments): versions before the shard tags named
  an instance's log, dead index, service-event list and seq without ``{<appid>}``
  (:func:`untagged_instance_keys`); they get it (:func:`tag_instances`);
* **``one_tag``** (a Redis Cluster): earlier versions put the shard's tag in front of every name
  and kept the instance's inside, ``{s3}svcgw:log:{<appid>}``; the instance's braces go, so that
  the shard's tag is the name's only one, ``{s3}svcgw:log:<appid>`` (:func:`one_tag`). Both names
  hash to the slot of ``s3``: the rename stays on its master.

Either way, the old names are found by ``SCAN`` (on a Cluster, of the master of the shard's slot
only), not by the registry: on several deployments the registry is on the first only, and an
instance's dead letters outlive its registration. ``retag.lua`` moves a batch of names per call,
every key it touches named in KEYS, and is idempotent: processes starting at once, or a start that
stopped half way, move each key once. A key under both names (a process of this version wrote
before it moved the old one, e.g. a worker whose start found Redis down) is merged by its type:
sets are united, lists put the old ids first, a counter keeps the higher count, hashes keep the
new one's fields and take the old one's others, a log takes the new one's entries after its own
when they are later, else the new log stays and the old one keeps its name until its retention
ends (logged).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register
from svcgw.storage.servers import shard_node

__all__ = ["BATCH", "Retagged", "one_tag", "tag_instances", "untagged_instance_keys"]

log = logging.getLogger("svcgw")

BATCH = 400  # old and new names per script call: a short call even for full logs
SCAN_COUNT = 10_000


@dataclass(frozen=True)
class Retagged:
    keys: int
    renamed: int
    merged: int
    left: int


# --- the names before the instance tags (one Redis; a Cluster never had them) ------------------
_PREFIX = "svcgw:"
# SCAN patterns that find them (a tagged name has ``{`` where the appid starts).
UNTAGGED_PATTERNS = (f"{_PREFIX}log:[^{{]*", f"{_PREFIX}dead:[^{{]*", f"{_PREFIX}instance:[^{{]*:seq")


def untagged_instance_keys(appid: str) -> tuple[str, str, str, str]:
    """The instance's log, dead index, service-event list and seq as versions before the instance tags named them."""
    return (f"{_PREFIX}log:{appid}", f"{_PREFIX}dead:{appid}",
            f"{_PREFIX}instance:{appid}:service-events", f"{_PREFIX}instance:{appid}:seq")  # fmt: skip


def tagged_instance_keys(keys: KeySpace, appid: str) -> tuple[str, str, str, str]:
    """The same four keys as ``keys`` names them now."""
    return (keys.callback_log(appid), keys.dead_letters_by_appid(appid),
            keys.service_events(appid), keys.service_event_seq(appid))  # fmt: skip


def untagged_appid(name: str) -> str | None:
    """The appid an untagged key of :data:`UNTAGGED_PATTERNS` belongs to; None for any other name."""
    for head, tail in ((f"{_PREFIX}log:", ""), (f"{_PREFIX}dead:", ""), (f"{_PREFIX}instance:", ":seq")):
        if name.startswith(head) and name.endswith(tail):
            appid = name[len(head) : len(name) - len(tail)]
            if appid and "{" not in appid:
                return appid
    return None


async def tag_instances(redis: Redis, keys: KeySpace) -> Retagged:
    """Give every instance's untagged keys their ``{<appid>}`` tag; what was done, for the log."""
    found: set[str] = set()
    for pattern in UNTAGGED_PATTERNS:
        async for name in redis.scan_iter(match=pattern, count=SCAN_COUNT):
            appid = untagged_appid(_text(name))
            if appid is not None:
                found.add(appid)
    pairs = [
        pair
        for appid in sorted(found)
        for pair in zip(untagged_instance_keys(appid), tagged_instance_keys(keys, appid), strict=True)
    ]
    return await _rename(redis, pairs, what="instance keys tagged")


# --- a Cluster's names with two tags -----------------------------------------------------------
# The names that carried the instance's tag inside the shard's (``KeySpace._own``), by family: the
# log, the outcomes, the dead index, the de-duplication window (a container, or a bucket ``:<n>``),
# the late outcomes ``:<n>``, the service-event list and its seq.
_TWO_TAGS = re.compile(r"(\{[^{}]*\}svcgw:(log|out|dead|dd|late|instance):)\{([^{}]+)\}(.*)", re.DOTALL)
_TAILS = {
    "log": re.compile(""), "out": re.compile(""), "dead": re.compile(""), "dd": re.compile(r"(?::\d+)?"),
    "late": re.compile(r":\d+"), "instance": re.compile(":(?:service-events|seq)"),
}  # fmt: skip


def one_tag_name(name: str) -> str | None:
    """``name`` with its second tag's braces taken out (``{s3}svcgw:log:{we_1}`` -> ``{s3}svcgw:log:we_1``);
    None for any other name.

    Only an instance's own names had a second tag. Braces anywhere else are data, kept as they are
    under every version: an e-mail login ``a{b}c@example.com`` is ``{s0}svcgw:login:a{b}c@example.com``.
    """
    match = _TWO_TAGS.fullmatch(name)
    if match is None or _TAILS[match.group(2)].fullmatch(match.group(4)) is None:
        return None
    return match.group(1) + match.group(3) + match.group(4)


async def one_tag(redis: AsyncRedisCluster, keys: KeySpace) -> Retagged:
    """On a Cluster, give every key of ``keys``' shard its shard's tag alone; what was done, for the log."""
    node = await shard_node(redis, keys)
    pairs: list[tuple[str, str]] = []
    # ``{`` is no glob character: the pattern is the shard's names that hold a second tag.
    async for name in redis.scan_iter(match=f"{keys.prefix}*{{*", count=SCAN_COUNT, target_nodes=node):
        new = one_tag_name(_text(name))
        if new is not None:
            pairs.append((_text(name), new))
    return await _rename(redis, sorted(pairs), what="shard keys given one tag")


async def _rename(redis: Any, pairs: Iterable[tuple[str, str]], *, what: str) -> Retagged:
    script = register(redis, "retag")
    names = [name for pair in pairs for name in pair]
    renamed = merged = left = 0
    for start in range(0, len(names), BATCH):
        moved = await script(keys=names[start : start + BATCH], args=[])
        renamed, merged, left = renamed + int(moved[0]), merged + int(moved[1]), left + int(moved[2])
    done = Retagged(len(names) // 2, renamed, merged, left)
    if names:
        log.info(what, extra={"keys": done.keys, "renamed": renamed, "merged": merged})
    if left:
        log.warning("callback logs written under both names while old and new processes ran: the old ones "
                    "keep their names until their retention ends", extra={"logs": left})  # fmt: skip
    return done


def _text(name: bytes | str) -> str:
    return name.decode("utf-8", "surrogateescape") if isinstance(name, bytes) else name
