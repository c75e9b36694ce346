"""Instance liveness state, kept in the instance hash.

Fields: ``maintained`` ("1" while the service keeps the long connection up:
from ``long/start`` until ``long/stop``, ``logout`` or an offline that needs a
QR scan), ``status`` (online, offline, stopped, logged_out), ``reason``,
``action_required`` (relogin, manual), ``since`` (when ``status`` last
changed), ``proxy`` (the last one the caller used, for reconnecting without
a scan), ``last_probe``, ``next_probe``, ``last_seen`` (the last time a
business read answered), ``probe_error`` (why the last probe could not
decide). Times are Unix seconds.

Bookkeeping fields, not for display: ``offline_since`` (set when
``InstanceOffline`` is queued, removed when ``InstanceRecovered`` is: while
it exists, a recovery is owed to the caller), ``gap_code``, ``gap_message``
and ``gap_at`` (a ``GapClosed`` waiting for the prober), and ``probing``
(the lease of the probe running now; see ``worker.prober``). The probe
schedule is the sorted set ``svcgw:probe:schedule`` (appid scored by next
probe time).

The gateway calls the ``mark_*`` and ``record_proxy`` functions after the
capability layer accepted the matching operation; the receiver calls
``on_gap_closed``. State flips, and the events they owe, are made only by the
prober through ``go_offline`` and ``go_online``: each is one optimistic
transaction (WATCH on the instance hash), which changes the status and queues
the event together, so however many workers run, one flip queues one event.
The event's ``seq`` and its place behind the instance's earlier service
events are given in that same transaction (:func:`svcgw.delivery.queueing.queue_delivery`),
and so are its deliveries to the further destinations whose routing records take its
event type (docs/destinations.md): the records are read as the receiver reads them for a
post (:func:`svcgw.callbacks.routecache.read_routes`) and the deliveries written by the
receiver's own fan-out (:mod:`svcgw.intake.fanout`).

Every change of ``status`` or ``probe_error`` updates the instance counts of
``/metrics`` in the same transaction (:func:`svcgw.counters.count_change`).

Every function takes a ``redis.asyncio`` client; raw bytes and decoded
text both work. Redis errors propagate to the caller.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError

from svcgw.callbacks.routecache import read_routes
from svcgw.config.settings import Settings
from svcgw.counters import count_change
from svcgw.delivery import chainkeys
from svcgw.delivery.queueing import queue_delivery
from svcgw.deliveryid import new_delivery_id
from svcgw.liveness.events import (
    INSTANCE_OFFLINE,
    INSTANCE_RECOVERED,
    MANUAL,
    instance_offline,
    instance_recovered,
    iso8601,
)
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = [
    "LOGGED_OUT",
    "OFFLINE",
    "ONLINE",
    "STOPPED",
    "describe",
    "go_offline",
    "go_online",
    "mark_logged_out",
    "mark_started",
    "mark_stopped",
    "record_proxy",
]

log = logging.getLogger("svcgw.liveness")

ONLINE, OFFLINE, STOPPED, LOGGED_OUT = "online", "offline", "stopped", "logged_out"

GAP_FIELDS = ("gap_code", "gap_message", "gap_at", "gap_manual")


# --- called by the gateway ----------------------------------------------------
async def mark_started(redis: Redis, keys: KeySpace, appid: str, probe_interval: float) -> None:
    """After ``long/start``: maintained again; first probe within one interval, spread at random.

    If the instance was reported offline, the first probe is due at once and
    the prober sends ``InstanceRecovered`` (``auto_reconnected`` false).
    """
    now = time.time()
    due = now + random.uniform(0.5, 1.0) * probe_interval
    script = register(redis, "liveness_started")
    await script(
        keys=[keys.instance(appid), keys.probe_schedule, keys.metrics_instances, keys.instances],
        args=[repr(now), repr(due), appid],
    )


async def mark_stopped(redis: Redis, keys: KeySpace, appid: str) -> None:
    """After ``long/stop``: not probed, not restarted, until the next ``long/start``."""
    async with redis.pipeline(transaction=True) as pipe:
        count_change(pipe, keys, appid, status="stopped")
        pipe.hset(keys.instance(appid), mapping={"maintained": "0", "status": "stopped", "since": repr(time.time())})
        pipe.hdel(keys.instance(appid), "next_probe", "reason", "action_required", *GAP_FIELDS)
        pipe.zrem(keys.probe_schedule, appid)
        await pipe.execute()


async def mark_logged_out(redis: Redis, keys: KeySpace, appid: str) -> None:
    """After ``login/logout``: the session key is gone; nothing to probe until a new login."""
    async with redis.pipeline(transaction=True) as pipe:
        count_change(pipe, keys, appid, status="logged_out")
        pipe.hset(keys.instance(appid), mapping={"maintained": "0", "status": "logged_out", "since": repr(time.time())})
        pipe.hdel(keys.instance(appid), "next_probe", "reason", "action_required", *GAP_FIELDS)
        pipe.zrem(keys.probe_schedule, appid)
        await pipe.execute()


async def record_proxy(redis: Redis, keys: KeySpace, appid: str, proxy: str) -> None:
    """The proxy of the caller's last login call, reused to reconnect with the same egress."""
    await redis.hset(keys.instance(appid), "proxy", proxy)


# --- state flips, made by the prober --------------------------------------------
def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _seconds(value: str | None, default: float) -> float:
    try:
        return float(value) if value else default
    except ValueError:
        return default


async def _watch(pipe: Any, keys: KeySpace, appid: str) -> list[str]:
    """WATCH the instance's hash and its service-event chain; the chain's ids (for :func:`_queue_event`)."""
    chain = keys.service_events(appid)
    await pipe.watch(keys.instance(appid), chain)
    return chainkeys.members(await pipe.lrange(chain, 0, -1))


async def _destinations(redis: Redis, keys: KeySpace, appid: str, account: str, event_type: str) -> list[str]:
    """The further destinations that take the instance's ``event_type``, as they would take a post of it."""
    return (await read_routes(redis, keys, account, appid)).targets(event_type)


def _queue_event(
    pipe: Any,
    keys: KeySpace,
    settings: Settings,
    appid: str,
    account: str,
    event_type: str,
    event: Any,
    chain: list[str],
    destinations: list[str],
) -> str:
    """Buffer one service event's delivery, and one per further destination, on the flip's transaction; the
    primary delivery's id."""
    delivery_id = new_delivery_id()
    queue_delivery(
        pipe,
        keys,
        settings,
        appid=appid,
        account=account,
        event_type=event_type,
        events=[event],
        delivery_id=delivery_id,
        now=time.time(),
        chain=chain,
        destinations=destinations,
    )
    return delivery_id


async def go_offline(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    appid: str,
    *,
    reason: str,
    action_required: str,
    detected_at: float,
) -> str | None:
    """Flip a maintained, online instance to offline and queue its ``InstanceOffline``.

    Returns the delivery id when this call made the flip, None otherwise
    (already offline, stopped, logged out: nothing to say). With
    ``action_required`` manual, maintenance stops as well (no probes, no
    reconnects until the next ``long/start``); an instance already offline
    with relogin is moved to manual without a second event.
    """
    key = keys.instance(appid)
    manual = action_required == MANUAL
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                chain = await _watch(pipe, keys, appid)
                values = await pipe.hmget(
                    key, ["status", "maintained", "action_required", "account", "last_seen", "since"]
                )
                status, maintained, action, account, last_seen, since = (_text(v) for v in values)
                flip = status == ONLINE and maintained == "1" and account is not None
                upgrade = manual and status == OFFLINE and action != MANUAL
                if not (flip or upgrade):
                    return None  # leaving the block unwatches
                further: list[str] = []
                if flip:
                    assert account is not None
                    further = await _destinations(redis, keys, appid, account, INSTANCE_OFFLINE)
                pipe.multi()  # type: ignore[no-untyped-call]
                if flip:
                    count_change(pipe, keys, appid, status=OFFLINE)
                    pipe.hset(
                        key,
                        mapping={
                            "status": OFFLINE,
                            "reason": reason,
                            "action_required": action_required,
                            "since": repr(detected_at),
                            "offline_since": repr(detected_at),
                        },
                    )
                else:
                    pipe.hset(key, mapping={"reason": reason, "action_required": action_required})
                if manual:
                    pipe.hset(key, "maintained", "0")
                    pipe.hdel(key, "next_probe")
                    pipe.zrem(keys.probe_schedule, appid)
                delivery_id = None
                if flip:
                    assert account is not None
                    event = instance_offline(
                        appid,
                        reason=reason,
                        action_required=action_required,
                        detected_at=detected_at,
                        last_seen_at=_seconds(last_seen, _seconds(since, detected_at)),
                    )
                    delivery_id = _queue_event(
                        pipe, keys, settings, appid, account, INSTANCE_OFFLINE, event, chain, further
                    )
                await pipe.execute()
            except WatchError:
                continue
            log.info(
                "instance offline: %s" if flip else "offline instance now needs a scan: %s",
                reason,
                extra={"appid": appid, "delivery_id": delivery_id, "outcome": action_required},
            )
            return delivery_id


async def go_online(
    redis: Redis, keys: KeySpace, settings: Settings, appid: str, *, auto_reconnected: bool, at: float
) -> str | None:
    """Record that the instance is usable again and queue the ``InstanceRecovered`` it is owed.

    Two ways back: an offline instance the prober found usable (healed by its
    own reconnect when ``auto_reconnected``, else by something else), or a
    ``long/start`` made after an ``InstanceOffline`` (status already online;
    recovered at that start, never auto-reconnected). Returns the delivery id
    when this call queued the event, None otherwise.
    """
    key = keys.instance(appid)
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                chain = await _watch(pipe, keys, appid)
                values = await pipe.hmget(key, ["status", "maintained", "offline_since", "account", "since"])
                status, maintained, offline_since, account, since = (_text(v) for v in values)
                flip = status == OFFLINE and maintained == "1"
                restarted = status == ONLINE and offline_since is not None
                if not (flip or restarted):
                    return None  # leaving the block unwatches
                further: list[str] = []
                if offline_since is not None and account is not None:
                    further = await _destinations(redis, keys, appid, account, INSTANCE_RECOVERED)
                pipe.multi()  # type: ignore[no-untyped-call]
                if flip:
                    count_change(pipe, keys, appid, status=ONLINE)
                    pipe.hset(key, mapping={"status": ONLINE, "since": repr(at)})
                    pipe.hdel(key, "reason", "action_required")
                    recovered_at, auto = at, auto_reconnected
                else:
                    recovered_at, auto = _seconds(since, at), False
                pipe.hdel(key, "offline_since")
                delivery_id = None
                if offline_since is not None and account is not None:
                    event = instance_recovered(
                        appid,
                        recovered_at=recovered_at,
                        offline_since=_seconds(offline_since, recovered_at),
                        auto_reconnected=auto,
                    )
                    delivery_id = _queue_event(
                        pipe, keys, settings, appid, account, INSTANCE_RECOVERED, event, chain, further
                    )
                await pipe.execute()
            except WatchError:
                continue
            log.info(
                "instance recovered",
                extra={"appid": appid, "delivery_id": delivery_id, "outcome": "auto" if auto else "other"},
            )
            return delivery_id


# --- display -----------------------------------------------------------------------
_TIMES = ("since", "last_probe", "next_probe", "last_seen", "offline_since")


def describe(instance_fields: Mapping[Any, Any]) -> dict[str, Any]:
    """The liveness part of an instance hash, for people and scripts.

    ``status`` is online, offline, stopped, logged_out, or not_started before
    the first ``long/start``; times are ISO 8601 with an offset, or None.
    """
    fields = {_text(k): _text(v) for k, v in instance_fields.items()}
    status = fields.get("status") or "not_started"
    data: dict[str, Any] = {
        "status": status,
        "maintained": fields.get("maintained") == "1",
        "reason": fields.get("reason") if status == OFFLINE else None,
        "action_required": fields.get("action_required") if status == OFFLINE else None,
    }
    for name in _TIMES:
        value = fields.get(name)
        data[name] = iso8601(_seconds(value, 0.0)) if value else None
    if not data["maintained"]:
        data["next_probe"] = None
    data["probe_error"] = fields.get("probe_error") or None
    return data
