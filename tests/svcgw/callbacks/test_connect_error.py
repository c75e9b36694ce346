"""A failed connection names the host and port it tried, without TLS wording for plain http."""

from __future__ import annotations

import pytest

from svcgw.callbacks.outbound import SendFailed
from tests.support import free_port
from tests.svcgw.callbacks.test_outbound import LOOPBACK, post, run


def test_a_refused_plain_http_connection_names_its_host_and_port() -> None:
    port = free_port()
    with pytest.raises(SendFailed) as info:
        run(lambda: post(f"http://127.0.0.1:{port}/hook", allow=LOOPBACK))
    text = str(info.value)
    assert text.startswith(f"ConnectError: cannot connect to 127.0.0.1:{port}: ")
    assert "ssl" not in text.lower() and "refused" in text.lower()
