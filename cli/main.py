"""The ``svcgw`` command line.

Roles (``up``, ``serve``, ``worker``, ``sim``) live here; the administration
groups (accounts, keys, callback, instances, dlq, log, secrets, shards) live in a
module each and are attached to the same group. Every administration command
runs in an event loop of its own (``cli.context``).
"""

from __future__ import annotations

import sys

import click

from svcgw.settings import SettingsError

from .accounts import accounts
from .callback import callback
from .context import load_settings
from .deliveries import deliveries
from .dlq import dlq
from .instances import instances
from .keys import keys_group
from .log import log_command
from .secrets import secrets_group
from .shards import shards_command

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR.")
@click.pass_context
def cli(ctx: click.Context, log_level: str) -> None:
    """svcgw: the callback gateway."""
    from svcgw.logs import configure

    configure(log_level)
    ctx.ensure_object(dict)


@cli.command()
@click.option("--demo", is_flag=True, help="Also start the capability-layer simulator and a demo account.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64))
def up(demo: bool, workers: int) -> None:
    """Run the whole service: HTTP server, workers (and Redis, if SVCGW_REDIS_URL is unset)."""
    from .runner import run_up

    settings = load_settings()
    if not demo and not settings.upstream_url:
        raise click.ClickException("SVCGW_UPSTREAM_URL is required (or use --demo for the simulator)")
    try:
        sys.exit(run_up(settings, demo=demo, workers=workers))
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


@cli.command()
def serve() -> None:
    """Run the HTTP server: gateway API, receiver and console."""
    from .runner import run_server

    try:
        run_server(load_settings())
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


@cli.command()
@click.option("--burst", is_flag=True, help="Exit once nothing is queued, in flight or scheduled.")
def worker(burst: bool) -> None:
    """Run deliveries, retry scheduling and the liveness prober."""
    from .runner import run_worker

    try:
        run_worker(load_settings(), burst=burst)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535))
def sim(host: str, port: int) -> None:
    """Run the capability-layer simulator."""
    from simulator.app import run

    run(host, port)


for _group in (accounts, keys_group, callback, instances, deliveries, dlq, log_command, secrets_group, shards_command):
    cli.add_command(_group)


def main() -> None:
    cli(obj={})
