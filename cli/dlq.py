"""``svcgw dlq``: dead letters (deliveries whose retries ran out), listed, shown and replayed.

Each dead letter names its destination: ``primary`` for the primary
address's delivery, else the further destination's ``dst_…`` id (``null``
in ``--json`` for the primary's).

Every command reads every shard (``svcgw.delivery.deadletters``): one list, newest
first, whichever shard each dead letter is on.

``replay`` exits with status 1 when any dead letter named could not be
replayed (unknown, its data expired, or it died before ``--since``), after
printing every outcome.
"""

from __future__ import annotations

import time

import click
from rich.console import RenderableType

from svcgw.delivery import deadletters as every_shard
from svcgw.delivery.deadletters import PRIMARY

from .context import Admin, admin_command
from .output import console, emit, json_option, record, table, valid_since, when

__all__ = ["dlq"]


@click.group()
def dlq() -> None:
    """Dead letters: deliveries whose retries ran out."""


@dlq.command("list")
@click.option("--appid", default=None, help="Only this instance's dead letters.")
@click.option("--account", default=None, help="Only this account's dead letters.")
@click.option(
    "--destination",
    default=None,
    metavar="DST",
    help="Only the dead letters of this further destination (dst_...), or 'primary' for the primary address's.",
)
@click.option("--all", "list_all", is_flag=True, help="Every dead letter (of --appid or --account), not a page.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many.  [default: 100]")
@click.option("--offset", type=click.IntRange(min=0), default=None, help="Skip this many newest.  [default: 0]")
@json_option
@admin_command
async def dlq_list(
    admin: Admin,
    appid: str | None,
    account: str | None,
    destination: str | None,
    list_all: bool,
    limit: int | None,
    offset: int | None,
    as_json: bool,
) -> None:
    """List dead letters, newest first: a page of them (--limit, --offset), or --all."""
    if list_all and (limit is not None or offset is not None):
        raise click.UsageError("--all lists every dead letter: give it without --limit and --offset")
    if list_all:
        # As many as there are now; one that dies meanwhile is listed by the next call.
        limit = await every_shard.count_dead(
            admin.shards, admin.settings, appid=appid, account=account, destination=destination
        )
    elif limit is None:
        limit = 100
    letters = []
    if limit:
        letters = await every_shard.list_dead(
            admin.shards,
            admin.settings,
            appid=appid,
            account=account,
            destination=destination,
            limit=limit,
            offset=offset or 0,
        )
    emit(
        as_json,
        [letter.as_dict() for letter in letters],
        lambda: table(
            ("id", "appid", "destination", "event type", "attempts", "last error", "dead since"),
            (
                (d.id, d.appid, d.destination or PRIMARY, d.event_type, d.attempts, d.last_error, when(d.dead_at))
                for d in letters
            ),
        ),
    )


@dlq.command("show")
@click.argument("delivery_id", metavar="ID")
@json_option
@admin_command
async def dlq_show(admin: Admin, delivery_id: str, as_json: bool) -> None:
    """Show one dead letter: its attempts and its body."""
    detail = await every_shard.show(admin.shards, admin.settings, delivery_id)
    if as_json:
        emit(True, detail.as_dict(), lambda: None)
        return
    out = console()
    out.print(
        record(
            {
                "id": detail.id,
                "appid": detail.appid,
                "account": detail.account,
                "destination": detail.destination or PRIMARY,
                "event_type": detail.event_type,
                "received": when(detail.received_at),
                "dead since": when(detail.dead_at),
                "last error": detail.last_error,
            },
            "dead letter",
        )
    )
    out.print(
        table(
            ("#", "at", "status", "error", "ms", "destination"),
            (
                (
                    a.get("attempt"),
                    when(a.get("at")),
                    a.get("status"),
                    a.get("error"),
                    a.get("duration_ms"),
                    a.get("destination"),
                )
                for a in detail.attempts
            ),
            "attempts",
        )
    )
    click.echo("body:")
    click.echo(detail.body)


@dlq.command("replay")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--appid", default=None, help="Every dead letter of this instance.")
@click.option("--all", "replay_all", is_flag=True, help="Every dead letter.")
@click.option(
    "--since",
    callback=valid_since,
    metavar="DURATION",
    help="Only those that died in this last stretch of time, e.g. 30m, 2h, 1d. Alone: of every instance.",
)
@click.option("--account", default=None, help="With --since or --all: only this account's dead letters.")
@json_option
@admin_command
async def dlq_replay(
    admin: Admin,
    ids: tuple[str, ...],
    appid: str | None,
    replay_all: bool,
    since: int | None,
    account: str | None,
    as_json: bool,
) -> None:
    """Give dead letters one fresh attempt each (a failure returns them here, history kept).

    Name them by ID, by --appid, or --all; --since keeps only those that died
    in that last stretch of time, and may stand alone (every instance).
    """
    selectors = sum((bool(ids), appid is not None, replay_all))
    if selectors > 1 or (selectors == 0 and since is None):
        raise click.UsageError("give dead letter IDs, or --appid APPID, or --all (exactly one), or --since DURATION")
    if account is not None and (ids or appid is not None):
        raise click.UsageError("--account goes with --since or --all, not with IDs or --appid")
    results = await every_shard.replay(
        admin.shards,
        admin.settings,
        ids=list(ids) or None,
        appid=appid,
        all=replay_all,
        account=account,
        since=None if since is None else time.time() - since,
    )
    replayed = sum(1 for r in results if r.replayed)

    def render() -> RenderableType:
        shown = table(("id", "appid", "outcome"), ((r.id, r.appid, r.status) for r in results))
        shown.caption = f"{replayed} of {len(results)} queued for one fresh attempt"
        return shown

    emit(as_json, [r.as_dict() for r in results], render)
    missed = [r for r in results if not r.replayed]
    if missed:
        listed = ", ".join(f"{r.id} ({r.status.replace('_', ' ')})" for r in missed[:10])
        more = f" and {len(missed) - 10} more" if len(missed) > 10 else ""
        raise click.ClickException(f"not replayed: {listed}{more}")
