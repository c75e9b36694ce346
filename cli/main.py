"""The ``svcgw`` command line.

Roles (``up``, ``serve``, ``worker``, ``sim``) live here; the administration
groups (accounts, keys, callback, instances, dlq, log, secrets, shards, doctor) live in a
module each and are attached to the same group. Every administration command
runs in an event loop of its own (``cli.context``).

The administration groups are imported only when one of them runs (or help
lists them): some reach the console's code, and a worker or a server started
by a supervisor should not spend its start compiling what it never runs.

A bad setting (``SettingsError``), whether the environment is read or a
role finds it when it starts, ends any command with its message and exit
status 1, never a traceback: in one place, the group's :meth:`Svcgw.invoke`.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from svcgw.config.settings import SettingsError

from .context import error_message, load_settings

__all__ = ["cli", "main"]

# Each administration command's name, and the module and attribute that define it.
ADMINISTRATION = {
    "accounts": ("cli.accounts", "accounts"),
    "callback": ("cli.callback", "callback"),
    "deliveries": ("cli.deliveries", "deliveries"),
    "destinations": ("cli.destinations", "destinations_group"),
    "dlq": ("cli.dlq", "dlq"),
    "doctor": ("cli.doctor", "doctor_command"),
    "instances": ("cli.instances", "instances"),
    "keys": ("cli.keys", "keys_group"),
    "log": ("cli.log", "log_command"),
    "secrets": ("cli.secrets", "secrets_group"),
    "shards": ("cli.shards", "shards_command"),
}


class Svcgw(click.Group):
    """The top group, which imports an administration command's module when it is asked for."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SettingsError as exc:
            raise click.ClickException(error_message(exc)) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *ADMINISTRATION})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in ADMINISTRATION:
            return found
        module, attribute = ADMINISTRATION[cmd_name]
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}.{attribute} is not a click command")
        self.add_command(command, cmd_name)
        return command


@click.group(cls=Svcgw, context_settings={"help_option_names": ["-h", "--help"]})
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
    sys.exit(run_up(settings, demo=demo, workers=workers))


@cli.command()
def serve() -> None:
    """Run the HTTP server: gateway API, receiver and console."""
    from .runner import run_server

    run_server(load_settings())


@cli.command()
@click.option("--burst", is_flag=True, help="Exit once nothing is queued, in flight or scheduled.")
def worker(burst: bool) -> None:
    """Run deliveries, retry scheduling and the liveness prober."""
    from .runner import run_worker

    run_worker(load_settings(), burst=burst)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8090, show_default=True, type=click.IntRange(0, 65535))
def sim(host: str, port: int) -> None:
    """Run the capability-layer simulator."""
    from simulator.app import run

    run(host, port)


def main() -> None:
    cli(obj={})
