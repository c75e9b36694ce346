"""``svcgw instances``: registered instances, their owner, status and the forward address in use.

Rows are ``svcgw.views.instances.InstanceView.for_operator()``: the view the
console also shows, projected for the operator, with the dead-letter count.
"""

from __future__ import annotations

import click

from svcgw.views import instances as read_model

from .context import Admin, admin_command
from .output import emit, json_option, record, table, when

__all__ = ["instances"]


@click.group()
def instances() -> None:
    """Registered instances: owner, status and the forward address in use."""


@instances.command("list")
@click.option("--account", default=None, help="Only this account's instances.")
@json_option
@admin_command
async def instances_list(admin: Admin, account: str | None, as_json: bool) -> None:
    """List instances."""
    store = admin.store()
    if account is not None:
        await store.get_account(account)
        appids = await store.instances_of(account)
    else:
        appids = await store.all_instances()
    views = await read_model.load_many(
        store, admin.redis, admin.keys, admin.settings, appids, dead_letters=True, shards=admin.shards
    )
    rows = [view.for_operator() for view in views]
    emit(
        as_json,
        rows,
        lambda: table(
            ("appid", "account", "shard", "status", "since", "forward address", "source", "dead", "created"),
            (
                (
                    r["appid"],
                    r["account"],
                    r["shard"],
                    _status_text(r),
                    when(r.get("since")),
                    r["forward_url"],
                    r["forward_source"],
                    r["dead_letters"],
                    when(r["created_at"]),
                )
                for r in rows
            ),
        ),
    )


@instances.command("show")
@click.argument("appid")
@json_option
@admin_command
async def instances_show(admin: Admin, appid: str, as_json: bool) -> None:
    """Show one instance."""
    view = await read_model.load(
        admin.store(), admin.redis, admin.keys, admin.settings, appid, dead_letters=True, shards=admin.shards
    )
    data = view.for_operator()
    # --json keeps the stored numbers; the table shows every time as readable UTC.
    emit(as_json, data, lambda: record({k: when(v) if k in read_model.TIMES else v for k, v in data.items()}, appid))


def _status_text(row: dict[str, object]) -> str | None:
    status = row.get("status")
    if status and row.get("reason"):
        return f"{status} ({row['reason']})"
    return str(status) if status else None
