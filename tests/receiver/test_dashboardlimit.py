"""Wrong passwords at /rq, limited per client address as the console's sign-in is; the right one keeps working."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from svcgw.config.settings import Settings
from tests.support import ThreadedServer

USER, PASSWORD = "operator", "dashboard-pass-123"
LIMIT = 5


@pytest.fixture
def dashboard_server(env: dict[str, str]) -> Iterator[str]:
    from receiver.app import create_app

    configured = Settings.from_env(
        dict(
            env,
            SVCGW_DASHBOARD_USER=USER,
            SVCGW_DASHBOARD_PASSWORD=PASSWORD,
            SVCGW_SIGNIN_FAILURES_PER_ADDRESS=f"{LIMIT}/hour",
        )
    )
    served = ThreadedServer(create_app(configured)).start()
    yield served.base
    served.stop()


def client(source: str) -> httpx.Client:
    """A client whose connections come from ``source``, a loopback address of its own."""
    return httpx.Client(timeout=15, transport=httpx.HTTPTransport(local_address=source))


def test_wrong_passwords_are_limited_per_address_and_the_right_one_works_from_another(
    dashboard_server: str,
) -> None:
    base = dashboard_server + "/rq/"
    with client("127.0.0.2") as flood, client("127.0.0.3") as operator:
        answers = [flood.get(base, auth=(USER, f"guess-{i}")).status_code for i in range(3 * LIMIT)]
        # The address's window: LIMIT wrong ones answered 401, every one after it refused unchecked.
        assert answers == [401] * LIMIT + [429] * (2 * LIMIT)
        refused = flood.get(base, auth=(USER, "guess-again"))
        assert int(refused.headers["retry-after"]) >= 1 and "too many wrong credentials" in refused.text
        assert flood.get(base).status_code == 401  # no credentials: asked for them, counted nowhere
        # The right password, from another address: unaffected.
        page = operator.get(base, auth=(USER, PASSWORD))
        assert page.status_code == 200 and "<title>" in page.text
        assert operator.get(base, auth=(USER, "one-typo")).status_code == 401  # its own window has room
        # Found right lately, it passes from the limited address too; a guess there still does not.
        assert flood.get(base, auth=(USER, PASSWORD)).status_code == 200
        assert flood.get(base, auth=(USER, "guess-after")).status_code == 429
