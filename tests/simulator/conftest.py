"""Fixtures: the simulator in-process (Starlette's test client) and under a real server on loopback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from simulator.app import create_app
from tests.simulator.support import TestClient
from tests.support import wait_for


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(check_warmup=0)) as test_client:
        yield test_client


@pytest.fixture
def live_sim() -> Iterator[httpx.Client]:
    """The simulator under a real uvicorn server; yields a client bound to it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(check_warmup=0), log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive())
        assert server.started
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=5.0) as http:
            yield http
    finally:
        server.should_exit = True
        thread.join(10.0)
        sock.close()
