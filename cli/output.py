"""How administration commands print: one JSON document with ``--json``, else rich tables.

With ``--json`` a command prints exactly one JSON document on stdout (the
shapes of the operator's contract), indented, and nothing else there.
Without it, a readable table; cells are plain text (never markup, since
ids, URLs and bodies may contain ``[...]``), an empty value shows as ``-``.
Piped output is 200 columns wide so that whole ids stay on one line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

import click
import orjson
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from svcgw.intake.calllog import parse_since

__all__ = ["console", "emit", "json_option", "record", "table", "valid_since", "when"]


def json_option(func: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document (for scripts) instead of a table."
    )(func)


def valid_since(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """The callback of a ``--since DURATION`` option: its seconds, or click's own error for a bad value."""
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def console() -> Console:
    # Piped output keeps whole ids on one line.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def emit(as_json: bool, data: object, render: Callable[[], RenderableType | None]) -> None:
    """Print ``data`` as JSON, or what ``render()`` makes of it (nothing for None)."""
    if as_json:
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode("utf-8"))
        return
    renderable = render()
    if renderable is not None:
        console().print(renderable)


def _cell(value: object) -> Text:
    if value is None or value == "":
        return Text("-")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    return Text(str(value))


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None) -> Table:
    # Cells are Text, never markup: ids, URLs and bodies may contain '[...]'.
    result = Table(*columns, title=title, title_justify="left")
    for row in rows:
        result.add_row(*(_cell(value) for value in row))
    return result


def record(data: dict[str, object], title: str | None = None) -> Table:
    """One object as a two-column table of its fields."""
    return table(("field", "value"), data.items(), title)


def when(timestamp: object) -> str | None:
    """A Unix time as readable UTC, for tables."""
    if timestamp in (None, ""):
        return None
    try:
        moment = datetime.fromtimestamp(float(str(timestamp)), UTC)
    except (ValueError, OverflowError, OSError):
        return str(timestamp)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")
