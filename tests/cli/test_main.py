"""The ``svcgw`` group: a bad setting ends any command with its message, never a traceback."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from cli.main import cli


def _bare() -> dict[str, str | None]:
    """The environment without any SVCGW_* variable (CliRunner changes the process's own by ``env``)."""
    return {name: None for name in os.environ if name.startswith("SVCGW_")}


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        # Read from the environment, before the command runs.
        (["worker", "--burst"], {"SVCGW_HTTP_LIMIT_CONCURRENCY": "many"}, "SVCGW_HTTP_LIMIT_CONCURRENCY"),
        (["accounts", "list"], {"SVCGW_REDIS_URL": "redis://127.0.0.1:9/0", "SVCGW_PORT": "x"}, "SVCGW_PORT"),
        # Found by the role itself, when it starts.
        (["serve"], {}, "SVCGW_UPSTREAM_URL is required to serve the gateway API"),
    ],
)
def test_a_bad_setting_ends_the_command_with_its_message(args: list[str], env: dict[str, str], said: str) -> None:
    result = CliRunner().invoke(cli, args, env={**_bare(), **env})
    assert result.exit_code == 1, result.output
    assert said in result.stderr and result.stderr.startswith("Error: ")
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
