"""``svcgw log``: an instance's callback log, newest first, bodies exactly as received."""

from __future__ import annotations

import click

from svcgw.errors import NotFound
from svcgw.intake.calllog import read_log
from svcgw.shards.routing import instance_shard

from .context import Admin, admin_command
from .output import emit, json_option, valid_since, when

__all__ = ["log_command"]


@click.command("log")
@click.argument("appid")
@click.option("--since", callback=valid_since, metavar="DURATION", help="e.g. 45s, 30m, 1h, 2d.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--before", default=None, metavar="ENTRY_ID", help="Older than this entry (paging).")
@json_option
@admin_command
async def log_command(
    admin: Admin, appid: str, since: int | None, limit: int, before: str | None, as_json: bool
) -> None:
    """The callback log of an instance (of SVCGW_LOG_RETENTION), newest first, bodies exactly as received."""
    if not await admin.redis.exists(admin.keys.instance(appid)):
        raise NotFound(f"no instance {appid!r}", what="instance")
    redis, keys = await instance_shard(admin.shards, appid)  # the registry names the shard its log is on
    entries = await read_log(redis, keys, admin.settings, appid, since_seconds=since, limit=limit, before=before)
    if as_json:
        emit(True, [entry.as_dict() for entry in entries], lambda: None)
        return
    if not entries:
        click.echo("no posts" + (" in that time" if since else ""), err=True)
    for entry in entries:
        click.echo(
            f"--- {entry.id}  {when(entry.received_at)}  accepted={entry.accepted} "
            f"duplicates={entry.duplicates}  delivery={entry.delivery_id or '-'}  state={entry.state or '-'}"
        )
        click.echo(entry.body)
