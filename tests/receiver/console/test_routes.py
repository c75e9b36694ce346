"""Each route of the console's JSON API checks its caller as its declaration says, on the served app."""

from __future__ import annotations

import httpx

from receiver.console import API_ROUTES
from tests.receiver.console.conftest import ConsoleClient, Developer


def test_each_operation_checks_its_caller_as_declared(
    server: str, console: ConsoleClient, developer: Developer
) -> None:
    values = {
        "appid": developer.appids[0],
        "delivery_id": "nosuch",
        "key_id": "nosuch",
        "destination_id": "dst_" + "0" * 16,
        "attempt": "nosuch",
    }
    checked = 0
    with httpx.Client(base_url=server, timeout=15) as anonymous:
        for item in API_ROUTES:
            method, path = item.method.upper(), item.path.format(**values)
            unsigned = anonymous.request(method, path)
            if not item.signed_in:  # signing in: the body is read, and there is none
                assert (unsigned.status_code, unsigned.json()["code"]) == (415, -41500), item.operation_id
                continue
            assert (unsigned.status_code, unsigned.json()["code"]) == (401, 401), item.operation_id
            # A change needs the CSRF header with a session cookie (and is refused before it does anything);
            # a read does not.
            answer = console.http.request(method, path)
            refused = (answer.status_code, answer.json()["code"]) == (403, -40310)
            assert refused == item.change, (item.operation_id, answer.text)
            checked += 1
    assert checked == sum(1 for item in API_ROUTES if item.signed_in) > 40
