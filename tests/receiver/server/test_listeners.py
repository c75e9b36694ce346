"""Several server processes (SVCGW_HTTP_WORKERS): a listening socket each, connections spread over them."""

from __future__ import annotations

import inspect
import os
import re
import socket

import httpx
import pytest
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import multiprocess

from receiver.server.listeners import OwnSocketProcess, check_port, reuse_port_socket
from tests.support import free_port, start_server, wait_for


def _inodes(port: int, state: str) -> set[str]:
    """Inodes of the IPv4 sockets on local ``port`` in ``state`` (``/proc/net/tcp``: 0A listening, 01 established)."""
    found = set()
    with open("/proc/net/tcp", encoding="ascii") as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[3] == state and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(fields[9])
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
        return [int(child) for child in handle.read().split()]


def test_uvicorns_supervisor_makes_every_worker_through_its_modules_process_class() -> None:
    # run_supervised sets multiprocess.Process: that holds while each place the supervisor starts a worker
    # (start, restart after a death, restart_all, a signal for one more) names it, and the child runs target.
    source = inspect.getsource(multiprocess.Multiprocess)
    made = re.findall(r"([\w.]+)\(self\.config, self\.sockets\)", source)
    assert len(made) >= 3 and set(made) == {"Process"}
    assert "get_subprocess(config, self.target, sockets)" in inspect.getsource(multiprocess.Process.__init__)
    assert list(inspect.signature(multiprocess.Process.target).parameters) == ["self", "sockets"]
    assert issubclass(OwnSocketProcess, multiprocess.Process)


def test_processes_of_one_user_may_bind_the_same_port() -> None:
    port = free_port()
    first = reuse_port_socket("127.0.0.1", port)
    second = reuse_port_socket("127.0.0.1", port)
    try:
        assert first.getsockname() == second.getsockname() == ("127.0.0.1", port)
    finally:
        first.close()
        second.close()


def test_a_port_taken_by_another_program_stops_the_start() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(SystemExit) as stopped:
            check_port("127.0.0.1", taken.getsockname()[1])
        assert stopped.value.code == STARTUP_FAILURE
    finally:
        taken.close()


def test_a_port_another_server_s_workers_listen_on_stops_the_start() -> None:
    # Their sockets allow sharing the port; a second server must still not join them unnoticed.
    port = free_port()
    workers = [reuse_port_socket("127.0.0.1", port) for _ in range(2)]
    try:
        for worker in workers:
            worker.listen()
        with pytest.raises(SystemExit) as stopped:
            check_port("127.0.0.1", port)
        assert stopped.value.code == STARTUP_FAILURE
    finally:
        for worker in workers:
            worker.close()


def test_a_free_port_passes_the_check() -> None:
    port = free_port()
    check_port("127.0.0.1", port)
    # The check leaves nothing bound: the workers' sockets can take the port.
    reuse_port_socket("127.0.0.1", port).close()


@pytest.mark.slow
def test_each_worker_listens_and_connections_reach_both(env: dict[str, str]) -> None:
    # Kept alive until counted: on a slow, busy machine opening the 40 took longer than the
    # default 5 s idle timeout, and the first ones were closed before the count (23 of 40).
    process, base = start_server(dict(env, SVCGW_HTTP_WORKERS="2", SVCGW_HTTP_KEEPALIVE_TIMEOUT="120"))
    port = int(base.rsplit(":", 1)[1])
    clients: list[httpx.Client] = []
    try:
        assert process.proc is not None
        pid = process.proc.pid
        listening = wait_for(
            lambda: _inodes(port, "0A") if len(_inodes(port, "0A")) == 2 else None,
            what="a listening socket per worker",
        )
        # One socket each, not one shared: the kernel spreads new connections over them. (The
        # supervisor's other children, such as multiprocessing's resource tracker, hold none.)
        held = {child: _socket_inodes(child) & listening for child in _children(pid)}
        workers = [child for child, inodes in held.items() if inodes]
        assert len(workers) == 2
        assert [len(held[worker]) for worker in workers] == [1, 1]
        assert held[workers[0]] != held[workers[1]]

        # 40 kept-alive connections: with a shared accept queue one process may take them all;
        # spread by the kernel's hash, each process gets some (all 40 on one: 2 in 10^12).
        for _ in range(40):
            client = httpx.Client(base_url=base, trust_env=False, timeout=10)
            assert client.get("/healthz").status_code == 200
            clients.append(client)
        established = _inodes(port, "01")
        per_worker = [len(_socket_inodes(pid) & established) for pid in workers]
        assert sum(per_worker) == 40
        assert min(per_worker) >= 1, per_worker
    finally:
        for client in clients:
            client.close()
        process.stop()
