"""Scenario 7, Redis memory: bytes per event logged and pending, after delivery, and per dead letter.

Runs on a Redis of its own (no append-only file: what the data set costs does
not depend on it, and an AOF buffer filling between two readings would blur
them), with the sink and ``svcgw worker`` processes, for two payloads: the
benchmark's 84-byte post and a ~1 KB ``Msg`` post (text content, several
19-digit ids). For each payload:

1. warm-up: one post per instance, delivered (every per-instance key exists
   and every script is loaded before anything is measured);
2. ``events`` posts through the receiver's own code (:class:`svcgw.intake.ingest.Ingest`),
   no worker running: ``logged``, what an event costs while it waits;
3. the workers deliver them to the sink: ``delivered``, what it costs for the
   rest of the log's retention;
4. ``dead`` posts to instances whose address refuses connections, with a
   retry schedule of seven quick attempts (as many as the default's):
   ``dead``, what a dead letter costs, its post in the log included.

5. with further destinations (docs/destinations.md): the same ``events`` posts to the instances of
   an account that has 1, then 2, destinations taking every event type, at the sink: ``logged``
   and ``delivered`` again (each post is then 2 or 3 deliveries), beside the primary alone.

Each figure is ``used_memory`` after minus before, over the events, and is
broken down by kind of key: ``MEMORY USAGE`` (every element sampled) of each
key, summed over a ``SCAN`` of the whole database before and after. What
``MEMORY USAGE`` leaves out (the entry of a key's TTL in the expires table,
the main table's buckets, allocator rounding) is the row ``unattributed``.
Redis commands per event (``INFO commandstats``, script commands included)
are counted over steps 2 and 3.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis as AsyncRedis

from svcgw.callbacks.addresses import check_for_service
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.support import free_port

from .scenarios import Bench, Plan, Tenant
from .services import wait_until
from .verdict import Need, Target

# Seven attempts, as with the default schedule, without its hours of waiting.
DEAD_SCHEDULE = ",".join(["0.01"] * 6)
# How many further destinations (each taking every event type) the fan-out steps give an account.
FANOUT = (1, 2)


def small_post(prefix: str, n: int) -> bytes:
    """The benchmark's post (wrk's, scenario 1): 84 bytes, one event with an id and a 19-digit integer."""
    return b'{"event_type":"Msg","events":[{"id":"%s%010d","roomId":1688850000000000123}]}' % (prefix.encode(), n)


_TEXT = (
    "Hi team, the shipment for order 4471 left the warehouse this morning; "
    "tracking should update tonight. 会议改到周四下午三点 请大家准时参加 "
    "Please confirm the delivery address and the contact number before Friday, "
    "and send the signed copy of the invoice back to finance. Thanks!"
)


def msg_post(prefix: str, n: int) -> bytes:
    """A realistic ``Msg`` post of about 1 KB: text content and several 19-digit ids, written raw."""
    base = 1688850000000000000 + n
    source = (
        "<msgsource><silence>0</silence><membercount>87</membercount><signature>V1_q8hYt2Xr|v1_Kp3mZ9wQ</signature>"
        "<tmp_node><publisher-id></publisher-id></tmp_node></msgsource>"
    )
    return (
        f'{{"event_type":"Msg","events":[{{"id":"{prefix}{n:010d}","msgId":{base},"newMsgId":{base + 7 * 10**17},'
        f'"roomId":1688850000000000123,"senderId":{1688854000000000000 + n},"fromUser":"wxid_q8r7t6y5u4i3o2p1",'
        f'"toUser":"12345678901@chatroom","msgType":1,"createTime":1795319160,"content":"{_TEXT}",'
        f'"atUserList":[1688854000000000077,1688854000000000078],"msgSource":"{source}",'
        f'"pushContent":"Alice Chen : Hi team, the shipment for order 4471 left...","isSelf":false,'
        f'"replyTo":{base - 1}}}]}}'
    ).encode()


PAYLOADS: dict[str, Callable[[str, int], bytes]] = {"small": small_post, "msg": msg_post}
PAYLOAD_BYTES = {name: len(make("mem-", 0)) for name, make in PAYLOADS.items()}


# The lean key layout's budgets per event (bytes after delivery, logged and pending), by payload:
# they replaced the first budgets, payload + 200 and 2 x payload + 400, for the 84-byte post once
# tests.bench.memory_floor had shown how small an event can be, and kept them for the 940-byte one.
BUDGETS = {"small": (300, 800), "msg": (1140, 2280)}


def targets() -> list[Target]:
    """The lean key layout's budgets per payload (:data:`BUDGETS`), and commands per event.

    Each step waits until all of its events are delivered (or dead), or fails the run: a figure here is
    always over the whole sample, which only has to be there.
    """
    rows = []
    for name, size in PAYLOAD_BYTES.items():
        sample = (Need(f"memory.{name}.events", ">", 0),)
        delivered, logged = BUDGETS[name]
        rows.append(Target(f"memory_{name}_delivered", f"memory.{name}.delivered_bytes_per_event", "<=", delivered,
                           f"Redis bytes per {size}-byte event after delivery", sample))  # fmt: skip
        rows.append(Target(f"memory_{name}_logged", f"memory.{name}.logged_bytes_per_event", "<=", logged,
                           f"Redis bytes per {size}-byte event logged and pending", sample))  # fmt: skip
        rows.append(Target(f"memory_{name}_commands", f"memory.{name}.commands_per_event", "<=", 20,
                           "Redis commands per event, ingest and delivery", sample))  # fmt: skip
    return rows


def kind_of(key: bytes) -> str:
    """Which structure a key is, for the breakdown."""
    name = key.decode("utf-8", "replace")
    if name.startswith(keys.callback_log("").removesuffix("}")):
        return "callback log"
    # Layout 2's per-instance hashes (svcgw.intake.dedup), and layout 1's key per id.
    if name.startswith((keys.dedup_container("").removesuffix("{}"), keys.dedup("", "")[: -len("::")] + ":")):
        return "de-duplication"
    if name.startswith(keys.delivery("")) and name.endswith(keys.delivery_attempts("")[len(keys.delivery("")) :]):
        return "attempt records"
    if name.startswith(keys.delivery("")):
        return "delivery hashes"
    if name.startswith(keys.destination_deliveries("")):
        return "destination index"
    if name.startswith(keys.rq.job("")):
        return "RQ job hashes"
    if name.startswith(keys.rq.result("")):
        return "dead letters' RQ results"
    if name.startswith(f"{keys.prefix}deliveries:"):
        return "deliveries index"  # kept until the log became the index
    if name.startswith(keys.outcomes("")[: -len("}")]):
        return "bare outcomes"
    if name.startswith(keys.late_outcomes("", 0)[: -len("}:0")]):
        return "late outcomes"
    if name.startswith(keys.dead_letters_by_appid("").removesuffix("}")):
        return "dead-letter index"
    if name.startswith(("rq:", keys.inflight(""))):
        return "queue and registries"
    return "other"


def by_kind(bench: Bench) -> Counter[str]:
    """``MEMORY USAGE`` summed by :func:`kind_of` over every key."""
    client = bench.redis.client
    sizes: Counter[str] = Counter()
    batch: list[bytes] = []

    def flush() -> None:
        with client.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.execute_command("MEMORY", "USAGE", key, "SAMPLES", 0)  # type: ignore[no-untyped-call]
            for key, usage in zip(batch, pipe.execute(), strict=True):
                sizes[kind_of(key)] += int(usage or 0)
        batch.clear()

    for key in client.scan_iter(count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            flush()
    if batch:
        flush()
    return sizes


def used_memory(bench: Bench) -> int:
    """``used_memory`` less what clients' buffers hold at the moment (not data)."""
    info = bench.redis.client.info("memory")
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))


class Reading:
    def __init__(self, bench: Bench) -> None:
        # The service's commands up to now; then those of this reading itself (SCAN, MEMORY
        # USAGE), which the next reading leaves out.
        self.by_command = bench.redis.command_counts()
        self.used = used_memory(bench)
        self.kinds = by_kind(bench)
        self.after = bench.redis.command_counts()

    def per_event(self, before: Reading, count: int) -> tuple[int, dict[str, int]]:
        total = (self.used - before.used) / max(count, 1)
        rows = {k: (self.kinds[k] - before.kinds[k]) / max(count, 1) for k in self.kinds | before.kinds}
        shown = {k: round(v) for k, v in sorted(rows.items(), key=lambda kv: -kv[1]) if round(v) != 0}
        # What is left, so that the rows add up to the figure exactly.
        shown["unattributed"] = round(total) - sum(shown.values())
        return round(total), shown


def run(plan: Plan, workdir: Path) -> dict[str, Any]:
    """Scenario 7 for each payload on one Redis of its own; returns the figures by payload."""
    events = 300 if plan.short else 10000
    dead = 20 if plan.short else 1000
    directory = workdir / "memory"
    directory.mkdir()
    bench = Bench(Plan(short=plan.short, workers=1, fast_ports=20 if plan.short else 100), directory, "everysec")
    bench.start(serve=False, appendonly=False, extra_env={"SVCGW_RETRY_SCHEDULE": DEAD_SCHEDULE})
    try:
        refused = bench.provision([free_port() for _ in range(10)])
        return {name: _payload(bench, name, make, refused, events, dead) for name, make in PAYLOADS.items()}
    finally:
        bench.stop()


def _payload(
    bench: Bench, name: str, make: Callable[[str, int], bytes], refused: list[Tenant], events: int, dead: int
) -> dict[str, Any]:
    prefix = f"mem-{name}-"
    bench.fill(bench.fast, len(bench.fast), prefix + "warm-", make)
    bench.fill(refused, len(refused), prefix + "warmdead-", make)
    _deliver(bench, len(bench.fast), len(refused))

    start = Reading(bench)
    # One process, the posts in order: how a claim's batch groups instances moves the commands
    # per event (each batch reads an instance's callback configuration once).
    bench.fill(bench.fast, events, prefix, make, processes=1)
    logged = Reading(bench)
    _deliver(bench, events, 0)
    delivered = Reading(bench)
    bench.fill(refused, dead, prefix + "dead-", make)
    _deliver(bench, 0, dead)
    gone = Reading(bench)

    by_name = _commands([(start, logged), (logged, delivered)], events)
    logged_total, logged_rows = logged.per_event(start, events)
    delivered_total, delivered_rows = delivered.per_event(start, events)
    dead_total, dead_rows = gone.per_event(delivered, dead)
    fanout = {str(count): _fanout(bench, name, make, events, count) for count in FANOUT}
    for figures in fanout.values():
        # What each further destination adds to an event logged and pending, and after delivery.
        count = int(figures["destinations"])
        figures["logged_bytes_per_destination"] = round((figures["logged_bytes_per_event"] - logged_total) / count)
        figures["delivered_bytes_per_destination"] = round(
            (figures["delivered_bytes_per_event"] - delivered_total) / count
        )
    return {
        "payload_bytes": PAYLOAD_BYTES[name],
        "events": events,
        "dead_letters": dead,
        "logged_bytes_per_event": logged_total,
        "delivered_bytes_per_event": delivered_total,
        "dead_letter_bytes": dead_total,
        "commands_per_event": round(sum(by_name.values()), 2),
        "commands_by_name": {name: round(n, 2) for name, n in by_name.items() if n >= 0.05},
        "breakdown": {"logged": logged_rows, "delivered": delivered_rows, "dead": dead_rows},
        "destinations": fanout,
    }


def _with_destinations(bench: Bench, count: int) -> list[Tenant]:
    """Instances on the sink's ports, of a new account with ``count`` destinations taking every type, at the sink."""
    tenants = bench.provision([tenant.port for tenant in bench.fast])

    async def add() -> None:
        client = AsyncRedis.from_url(bench.redis.url, decode_responses=True)
        try:
            store = Store(client, TokenVault.from_settings(bench.settings), keys)
            account = (await store.get_instance(tenants[0].appid)).account
            for n in range(count):
                url = check_for_service(f"http://127.0.0.1:{tenants[n].port}/hook", bench.settings)
                await store.add_destination(Scope(account=account), url, label=f"memory {n}")
        finally:
            await client.aclose()

    asyncio.run(add())
    return tenants


def _fanout(bench: Bench, name: str, make: Callable[[str, int], bytes], events: int, count: int) -> dict[str, Any]:
    """Step 5: ``events`` posts fanned out to ``count`` further destinations each; their bytes per event."""
    prefix = f"mem-{name}-fan{count}-"
    tenants = _with_destinations(bench, count)
    per_post = 1 + count
    bench.fill(tenants, len(tenants), prefix + "warm-", make)
    _deliver(bench, len(tenants) * per_post, 0)
    start = Reading(bench)
    bench.fill(tenants, events, prefix, make, processes=1)
    logged = Reading(bench)
    _deliver(bench, events * per_post, 0)
    delivered = Reading(bench)
    by_name = _commands([(start, logged), (logged, delivered)], events)
    logged_total, logged_rows = logged.per_event(start, events)
    delivered_total, delivered_rows = delivered.per_event(start, events)
    return {
        "destinations": count,
        "logged_bytes_per_event": logged_total,
        "delivered_bytes_per_event": delivered_total,
        "commands_per_event": round(sum(by_name.values()), 2),
        "breakdown": {"logged": logged_rows, "delivered": delivered_rows},
    }


def _commands(phases: list[tuple[Reading, Reading]], events: int) -> dict[str, float]:
    """Commands per event by name over the phases, the most frequent first."""
    rows: Counter[str] = Counter()
    for before, after in phases:
        for name, calls in after.by_command.items():
            rows[name] += calls - before.after.get(name, 0)
    return {name: calls / events for name, calls in rows.most_common() if calls > 0}


def _deliver(bench: Bench, delivered: int, dead: int) -> None:
    """Run the workers until ``delivered`` more reached the sink and ``dead`` more are dead letters."""
    client, name = bench.redis.client, bench.settings.queue_name
    failed_before = int(client.zcard(keys.rq.failed(name)))
    bench.sink.reset()
    bench.start_workers()
    try:
        wait_until(lambda: bench.sink.count() >= delivered, 120, "the deliveries")
        wait_until(lambda: int(client.zcard(keys.rq.failed(name))) >= failed_before + dead, 120, "the dead letters")
        wait_until(
            lambda: not any(
                int(n) for n in (client.llen(keys.rq.queue(name)), client.zcard(keys.inflight(name)),
                                 client.zcard(keys.rq.scheduled(name)))
            ),
            60, "the queue to drain",
        )  # fmt: skip
    finally:
        bench.stop_workers()


def table_rows(memory: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = []
    for figures in memory.values():
        rows.append(
            (f"7 Redis memory, {figures['payload_bytes']} B post",
             f"{figures['logged_bytes_per_event']} B logged, {figures['delivered_bytes_per_event']} B delivered",
             f"{figures['dead_letter_bytes']} B per dead letter; {figures['commands_per_event']} commands/event")
        )  # fmt: skip
        for fanned in figures.get("destinations", {}).values():
            rows.append(
                (f"7 Redis memory, {figures['payload_bytes']} B post, {fanned['destinations']} further destinations",
                 f"{fanned['logged_bytes_per_event']} B logged, {fanned['delivered_bytes_per_event']} B delivered",
                 f"{fanned['logged_bytes_per_destination']} B logged, {fanned['delivered_bytes_per_destination']} B "
                 f"delivered per destination; {fanned['commands_per_event']} commands/event")
            )  # fmt: skip
    return rows


def main() -> None:
    """``python -m tests.bench.memory [--short]``: this scenario alone, its JSON on the last line."""
    short = "--short" in sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="svcgw-memory-") as workdir:
        figures = run(Plan(short=short), Path(workdir))
    for row in table_rows(figures):
        print("  ".join(row))
    print(orjson.dumps(figures).decode(), flush=True)


if __name__ == "__main__":
    main()
