"""The embedded Redis of ``svcgw up``: loopback, a generated password, kept across restarts."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.exceptions

from cli import ports
from cli.embedded import EmbeddedRedis
from svcgw.storage import serverconfig


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def test_asks_for_a_password_kept_in_a_private_file(embedded: EmbeddedRedis, tmp_path: Path) -> None:
    password_file = tmp_path / "redis" / "password"
    assert password_file.read_text().strip() == embedded.password and len(embedded.password) >= 32
    assert password_file.stat().st_mode & 0o077 == 0
    assert (tmp_path / "redis" / "redis.conf").stat().st_mode & 0o077 == 0
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=embedded.port).ping()
    with redis.Redis.from_url(embedded.url) as client:
        assert client.ping()
    # Not on the command line, where any local user could read it.
    assert embedded.process is not None
    argv = Path(f"/proc/{embedded.process.pid}/cmdline").read_bytes()
    assert embedded.password.encode() not in argv


def test_the_password_survives_a_restart(tmp_path: Path) -> None:
    first = EmbeddedRedis(tmp_path)
    first.start()
    try:
        with redis.Redis.from_url(first.url) as client:
            client.set("kept", "yes")
    finally:
        first.stop()
    second = EmbeddedRedis(tmp_path)
    second.start()
    try:
        assert second.password == first.password
        with redis.Redis.from_url(second.url) as client:
            assert client.get("kept") == b"yes"
    finally:
        second.stop()


def test_runs_with_the_settings_the_service_relies_on(embedded: EmbeddedRedis) -> None:
    with redis.Redis.from_url(embedded.url, decode_responses=True) as client:
        for name, value in serverconfig.SETTINGS.items():
            assert client.config_get(name) == {name: value}


def test_the_port_survives_a_restart_unless_it_was_taken(tmp_path: Path) -> None:
    first = EmbeddedRedis(tmp_path)
    first.start()
    first.stop()
    again = EmbeddedRedis(tmp_path)
    again.start()
    try:
        assert again.port == first.port and again.moved_from is None
        with redis.Redis.from_url(again.url) as client:
            assert client.ping()
    finally:
        again.stop()
    _starts_elsewhere_while_taken(tmp_path, first.port)


def test_a_port_taken_between_its_check_and_the_servers_bind_is_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = EmbeddedRedis(tmp_path)
    first.start()
    first.stop()
    checks: list[int] = []
    real = ports.port_is_free

    def free_at_the_check_only(port: int) -> bool:
        checks.append(port)
        return True if len(checks) == 1 else real(port)  # taken right after the first check said free

    monkeypatch.setattr("cli.embedded.port_is_free", free_at_the_check_only)
    _starts_elsewhere_while_taken(tmp_path, first.port)
    assert checks[0] == first.port  # its kept port was chosen first, and the server could not bind it


def test_a_port_the_caller_gave_is_not_changed_when_taken(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        server = EmbeddedRedis(tmp_path, port=taken)
        with pytest.raises(RuntimeError, match=rf"could not listen on 127.0.0.1:{taken}: the port is in use"):
            server.start()
    assert server.process is not None and server.process.poll() is not None


def _starts_elsewhere_while_taken(state_dir: Path, kept: int) -> None:
    """While another socket listens on ``kept``, the state dir's port, a start moves to another port, keeps
    it for the next start, and answers there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", kept))
        squatter.listen()
        moved = EmbeddedRedis(state_dir)
        moved.start()
        try:
            assert moved.port != kept and moved.moved_from == kept
            with redis.Redis.from_url(moved.url) as client:
                assert client.ping()
        finally:
            moved.stop()
    assert (state_dir / "redis" / "port").read_text().strip() == str(moved.port)
