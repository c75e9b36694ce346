"""``svcgw doctor``: each shard's Redis settings, what is wrong with them and how to fix it.

It reads every shard (``CONFIG GET``, ``INFO``, the layout marker) and
judges what it read (``svcgw.storage.serverchecks``): an eviction policy
that drops keys, no persistence where ``SVCGW_REDIS_PERSISTENCE`` requires
it, a server too old, and the advice of docs/shards.md. A managed Redis that
refuses ``CONFIG`` is said to be unchecked, from ``INFO`` where it can.

Exit status 1 when anything can lose data or break the service, or a shard
did not answer (it could not be checked); 0 otherwise, advice and unchecked
settings included.
"""

from __future__ import annotations

import click
from rich.console import Group, RenderableType
from rich.text import Text

from svcgw.shards.serverfacts import ShardReport, check_shards

from .context import CONNECT_TIMEOUT, Admin, admin_command
from .output import emit, json_option, table

__all__ = ["doctor_command"]


@click.command("doctor")
@json_option
@admin_command
async def doctor_command(admin: Admin, as_json: bool) -> None:
    """Check each shard's Redis settings; exit 1 if any can lose data or break the service."""
    settings = admin.settings
    reports = await check_shards(
        admin.text_shards, persistence_required=settings.redis_persistence_required, timeout=CONNECT_TIMEOUT
    )
    names = {shard.index: shard.name for shard in settings.shard_layout.shards}
    documents = [{**report.document(), "name": names.get(report.shard)} for report in reports]
    emit(as_json, documents, lambda: _render(reports, names))
    harmful = sum(len(report.harmful) for report in reports)
    unreachable = [str(report.shard) for report in reports if report.error is not None]
    if harmful:
        raise click.ClickException(f"{harmful} Redis setting(s) can lose data or break the service; fix as shown")
    if unreachable:
        raise click.ClickException(f"shard(s) {', '.join(unreachable)} did not answer: not checked")


def _render(reports: list[ShardReport], names: dict[int, str]) -> RenderableType:
    rows = [
        (report.shard, names.get(report.shard), finding.severity, finding.setting, finding.problem, finding.fix)
        for report in reports
        for finding in report.findings
    ]
    lines: list[RenderableType] = []
    if rows:
        lines.append(table(("shard", "redis", "severity", "setting", "problem", "fix"), rows))
    for report in reports:
        if report.error is not None:
            lines.append(Text(f"shard {report.shard}: did not answer ({report.error}); not checked"))
        elif not report.findings:
            lines.append(Text(f"shard {report.shard}: settings ok"))
    return Group(*lines)
