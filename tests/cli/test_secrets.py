"""``svcgw secrets``: stored tokens re-encrypted under the first key."""

from __future__ import annotations

from svcgw.settings import Settings
from tests.cli.commands import ok
from tests.conftest import provision


def test_secrets_reencrypt(env: dict[str, str], settings: Settings) -> None:
    provision(settings, url="http://127.0.0.1:9/hook", bearer="t0ken")
    # One Bearer token and one receiver token.
    assert ok(env, "secrets", "reencrypt") == {"resealed": 2}
