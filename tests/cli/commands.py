"""Running ``svcgw`` in-process, as a test sees it: its output, its JSON, its user errors."""

from __future__ import annotations

from typing import Any

import orjson
from click.testing import CliRunner, Result

from cli.main import cli


def svcgw(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def ok(env: dict[str, str], *args: str) -> Any:
    result = svcgw(env, *args, "--json")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return orjson.loads(result.stdout)


def fails(env: dict[str, str], *args: str, code: int = 1) -> str:
    result = svcgw(env, *args)
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.stderr
