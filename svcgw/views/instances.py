"""The view of a registered instance: owner, transitions, forward address, dead letters, last post.

One read model for everyone who looks at instances. It is built from the
instance hash (``Store.get_instance``, which already leaves out the receiver
token), the callback configuration in use (``Store.destination``: the
instance's own address, else the account default), and, when asked for, the
dead-letter count (``svcgw.delivery.deadletters.count_dead``) and the time of the
newest post in the callback log.

It has two projections, because its two audiences are told different things:

* :meth:`InstanceView.for_owner` (the console's Instances page and API):
  liveness as ``svcgw.liveness.transitions.describe`` explains it, the forward address
  with its source (None without one), and when the last post arrived;
* :meth:`InstanceView.for_operator` (``svcgw instances list/show``): the
  stored liveness fields as they are, every other non-secret field of the
  instance hash, the forward address with its source ("none" without one),
  and the dead-letter count.

A missing instance raises ``svcgw.errors.NotFound``; :func:`load_many` skips
ids that an index still lists but whose record is gone.

With several shards (``shards``: clients by shard index), the liveness
fields, dead letters and log are read on the instance's shard, which the
registry's hash names (:func:`svcgw.shards.routing.shard_client`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from svcgw.callbacks.recipients import Recipient
from svcgw.config.settings import Settings
from svcgw.delivery import deadletters
from svcgw.delivery.view import field_float
from svcgw.errors import NotFound
from svcgw.intake import calllog
from svcgw.liveness import transitions
from svcgw.registry.store import Store
from svcgw.shards.clients import ShardRedis
from svcgw.shards.routing import shard_client
from svcgw.storage.keys import KeySpace

__all__ = ["TIMES", "InstanceView", "load", "load_many"]

# The liveness fields the operator sees first, in this order, present or not.
_STATUS_FIELDS = ("status", "reason", "since", "last_probe", "next_probe")
# The fields of :meth:`InstanceView.for_operator` that hold a Unix time (seconds, as stored).
TIMES = frozenset(("created_at", "since", "last_probe", "next_probe", "last_seen", "offline_since", "gap_at"))
# Fields stored as a number that are no time: the capability layer's code of a gap.
_NUMBERS = frozenset(("gap_code",))
# Shown elsewhere in the operator's record, or not worth a line of it.
_HIDDEN_FIELDS = ("account", "created_at")


def _stored(name: str, value: str | None) -> object:
    """A stored field for the operator: a time as Unix seconds, a JSON number as every ``--json`` gives times.

    Redis keeps every field as text, and a time may be stored as ``1.7959e+9``; the number is the
    same whatever its spelling. Text that is no number stays as it is, for the operator to see.
    """
    if value is None or (name not in TIMES and name not in _NUMBERS):
        return value
    number = field_float(value)
    if number is None or not math.isfinite(number):
        return value
    return int(number) if name in _NUMBERS and number.is_integer() else number


@dataclass(frozen=True)
class InstanceView:
    appid: str
    account: str
    created_at: float
    fields: Mapping[str, str] = field(repr=False)  # the instance hash, receiver token left out
    destination: Recipient | None
    dead_letters: int | None = None  # counted only when asked for
    last_event_at: float | None = None  # read only when asked for; None also when nothing was posted

    def for_owner(self) -> dict[str, Any]:
        """What the account's developer sees (console): liveness described, never a secret."""
        return {
            "appid": self.appid,
            "created_at": self.created_at,
            **transitions.describe(self.fields),
            "forward_url": self.destination.url if self.destination else None,
            "forward_source": self.destination.source if self.destination else None,
            "last_event_at": self.last_event_at,
        }

    def for_operator(self) -> dict[str, object]:
        """What the operator sees (CLI): stored fields (times as numbers) minus tokens and digests; its ``shard``."""
        data: dict[str, object] = {
            "appid": self.appid,
            "account": self.account,
            "created_at": self.created_at,
        }
        for name in _STATUS_FIELDS:
            data[name] = _stored(name, self.fields.get(name))
        for name, value in sorted(self.fields.items()):
            if name in data or name in _HIDDEN_FIELDS or "token" in name or name.endswith("hash"):
                continue
            data[name] = _stored(name, value)
        data["shard"] = self.fields.get("shard") or "0"  # registered before shards: shard 0's
        data["forward_url"] = self.destination.url if self.destination else None
        data["forward_source"] = self.destination.source if self.destination else "none"
        data["dead_letters"] = self.dead_letters
        return data


async def load(
    store: Store,
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    appid: str,
    *,
    dead_letters: bool = False,
    last_event: bool = False,
    shards: Sequence[ShardRedis] = (),
) -> InstanceView:
    """The view of one instance; ``NotFound`` if it has no record.

    ``redis`` (and ``shards``) must not decode responses when ``last_event``
    is asked for: the newest log entry comes back with its body, which may
    be any bytes.
    """
    instance = await store.get_instance(appid)
    destination = await store.destination(appid)
    fields = instance.fields
    if len(shards) > 1 and fields.get("shard", "0") != "0":
        redis, keys = shard_client(shards, fields.get("shard"))
        # Liveness lives with the instance's data; the registry's own fields stay the registry's.
        kept = {"account", "shard"}
        own = {_text(k): _text(v) for k, v in (await redis.hgetall(keys.instance(appid))).items()}
        fields = {**fields, **{k: v for k, v in own.items() if k not in kept}}
    dead = await deadletters.count_dead([ShardRedis(redis, keys)], settings, appid=appid) if dead_letters else None
    last = await _last_event_at(redis, keys, appid) if last_event else None
    return InstanceView(
        appid=instance.appid,
        account=instance.account,
        created_at=instance.created_at,
        fields=fields,
        destination=destination,
        dead_letters=dead,
        last_event_at=last,
    )


async def load_many(
    store: Store,
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    appids: Iterable[str],
    *,
    dead_letters: bool = False,
    last_event: bool = False,
    shards: Sequence[ShardRedis] = (),
) -> list[InstanceView]:
    """Views of the instances named, in order, without those whose record is gone."""
    views: list[InstanceView] = []
    for appid in appids:
        try:
            views.append(
                await load(
                    store, redis, keys, settings, appid, dead_letters=dead_letters, last_event=last_event, shards=shards
                )
            )
        except NotFound:
            continue  # listed in an index but its record is gone
    return views


async def _last_event_at(redis: Redis, keys: KeySpace, appid: str) -> float | None:
    newest = await redis.xrevrange(keys.callback_log(appid), count=1)
    if not newest:
        return None
    entry_id, fields = newest[0]
    return calllog.received_at(_text(entry_id or b"0-0"), fields or {})


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
