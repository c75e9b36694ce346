"""What every administration command shares: the Redis it needs, and how it says it cannot reach it."""

from __future__ import annotations

from tests.cli.commands import fails, svcgw


def test_unreachable_redis_names_the_url_without_its_password(env: dict[str, str]) -> None:
    broken = dict(env, SVCGW_REDIS_URL="redis://admin:hunter2@127.0.0.1:1/0")
    result = svcgw(broken, "accounts", "list")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "cannot reach Redis at redis://admin@127.0.0.1:1/0" in result.stderr
    assert "hunter2" not in result.output


def test_redis_url_is_required(env: dict[str, str]) -> None:
    message = fails(dict(env, SVCGW_REDIS_URL=""), "dlq", "list")
    assert "SVCGW_REDIS_URL (or SVCGW_REDIS_SENTINELS) is required" in message
