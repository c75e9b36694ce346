"""The upgrade to tagged names: an instance's log, dead index and service-event list and seq of before get ``{appid}``.

Versions before the shard tags named these four keys without the tag
(:func:`svcgw.keys.untagged_instance_keys`). Rather than every reader looking
under both names for as long as they may live (a dead index for the dead-letter
retention, a service-event list and its seq for ever), the first process of
this version renames them once, before it writes anything (from
:func:`svcgw.layout.read`, which then sets the marker's ``tags``):

* the instances are found by ``SCAN`` of the old names, not by the registry
  (``svcgw:instances``): on several deployments the registry is on the first
  only, and an instance's dead letters outlive its registration;
* ``retag.lua`` moves a batch of instances per call, every key it touches named
  in KEYS, and is idempotent: processes starting at once, or a start that
  stopped half way, move each key once;
* a key under both names (a process of this version wrote before it moved the
  old one, e.g. a worker whose start found Redis down) is merged: sets are
  united, lists put the old ids first, the seq keeps the higher count, a log
  takes the new one's entries after its own when they are later, else the new
  log stays and the old one keeps its name until its retention ends (logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.asyncio import Redis

from . import keys
from .scripts import register

__all__ = ["BATCH", "Retagged", "run"]

log = logging.getLogger("svcgw")

BATCH = 100  # instances per script call: 800 keys, a short call even for full logs
SCAN_COUNT = 10_000


@dataclass(frozen=True)
class Retagged:
    instances: int
    renamed: int
    merged: int
    left: int


async def untagged_appids(redis: Redis) -> list[str]:
    """Every appid that has one of the four keys under its untagged name."""
    found: set[str] = set()
    for pattern in keys.UNTAGGED_PATTERNS:
        async for name in redis.scan_iter(match=pattern, count=SCAN_COUNT):
            appid = keys.untagged_appid(name.decode() if isinstance(name, bytes) else name)
            if appid is not None:
                found.add(appid)
    return sorted(found)


async def run(redis: Redis) -> Retagged:
    """Rename every instance's untagged keys; what was done, for the log."""
    appids = await untagged_appids(redis)
    script = register(redis, "retag")
    renamed = merged = left = 0
    for start in range(0, len(appids), BATCH):
        names: list[str] = []
        for appid in appids[start : start + BATCH]:
            for old, new in zip(keys.untagged_instance_keys(appid), keys.tagged_instance_keys(appid), strict=True):
                names.extend((old, new))
        moved = await script(keys=names, args=[])
        renamed, merged, left = renamed + int(moved[0]), merged + int(moved[1]), left + int(moved[2])
    done = Retagged(len(appids), renamed, merged, left)
    if appids:
        log.info("instance keys tagged", extra={"instances": done.instances, "renamed": renamed, "merged": merged})
    if left:
        log.warning("callback logs written under both names while old and new processes ran: the old ones "
                    "keep their names until their retention ends", extra={"logs": left})  # fmt: skip
    return done
