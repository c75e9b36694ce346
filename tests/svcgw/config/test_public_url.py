"""SVCGW_PUBLIC_URL, when unset, is derived from SVCGW_HOST and SVCGW_PORT (CONTRACT)."""

from __future__ import annotations

import pytest

from svcgw.config.settings import Settings


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        (None, None, "http://127.0.0.1:8080"),
        (None, "18380", "http://127.0.0.1:18380"),
        ("10.1.2.3", "9000", "http://10.1.2.3:9000"),
        ("gw.internal", "80", "http://gw.internal:80"),
        # A wildcard bind address is nobody's destination: loopback is named instead.
        ("0.0.0.0", "18380", "http://127.0.0.1:18380"),
        ("::", "18380", "http://[::1]:18380"),
        ("::1", "8081", "http://[::1]:8081"),
    ],
)
def test_the_public_url_follows_host_and_port(host: str | None, port: str | None, expected: str) -> None:
    env = {k: v for k, v in (("SVCGW_HOST", host), ("SVCGW_PORT", port)) if v is not None}
    settings = Settings.from_env(env)
    assert settings.public_url == expected
    assert settings.public_origin[2] == int(port or 8080)


def test_a_public_url_that_is_set_wins() -> None:
    settings = Settings.from_env({"SVCGW_PORT": "18380", "SVCGW_PUBLIC_URL": "https://gw.example.com"})
    assert settings.public_url == "https://gw.example.com" and settings.port == 18380
