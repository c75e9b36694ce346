"""``svcgw shards``: each shard's Redis (no password), instances, memory, queue depth and health.

It reads every shard of ``SVCGW_REDIS_SHARDS`` (or the one Redis without
it), also those ``serve`` and ``worker`` do not run on yet. A shard that does
not answer shows its error and makes the exit status 1, after the table.
"""

from __future__ import annotations

import click
from rich.table import Table

from svcgw.shards.clients import AsyncShardClients
from svcgw.shards.status import ShardStatus, shard_statuses

from .context import CONNECT_TIMEOUT, Admin, admin_command
from .output import emit, json_option, table

__all__ = ["shards_command"]


@click.command("shards")
@json_option
@admin_command
async def shards_command(admin: Admin, as_json: bool) -> None:
    """Each shard: its Redis, instances, used memory, queue depth and health (PING time or the error)."""
    clients = AsyncShardClients(admin.settings, connect_timeout=CONNECT_TIMEOUT)
    try:
        statuses = await shard_statuses(clients, admin.settings.queue_name, timeout=CONNECT_TIMEOUT)
    finally:
        await clients.aclose()
    emit(as_json, [status.document() for status in statuses], lambda: _table(statuses))
    failing = [status.index for status in statuses if not status.healthy]
    if failing:
        raise click.ClickException(f"shard(s) {', '.join(map(str, failing))} did not answer")


def _table(statuses: list[ShardStatus]) -> Table:
    return table(
        ("shard", "redis", "node", "open", "weight", "instances", "memory", "queued", "health"),
        (
            (
                s.index,
                s.name,
                s.node,
                not s.closed,
                f"{s.weight:g}",
                s.instances,
                s.used_memory_human,
                s.queue_depth,
                f"ok, {s.ping_ms:.2f} ms" if s.error is None else s.error,
            )
            for s in statuses
        ),
    )
