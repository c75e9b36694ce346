"""Test hosts made of network namespaces: the project's own machines inside this sandbox.

``Hosts`` puts each namespace on one bridge in a private range of its own
(``10.200.N.0/24``; the bridge, in the test's namespace, is ``.1``), so the
test process reaches every host and every host reaches the others.
Everything is removed by ``close()``, whatever happened; namespaces that a
killed test run left behind are removed by the next one.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

from tests.support import ListeningServer, Process

PREFIX = "svcgw-"


def require_root_and_ip() -> None:
    if shutil.which("ip") is None:
        pytest.skip("needs the `ip` command (Debian: apt-get install -y iproute2) to make network namespaces")
    if os.geteuid() != 0:
        pytest.skip("needs root to make network namespaces (ip netns add)")


def ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _remove_leftovers() -> None:
    """Namespaces and bridges of earlier runs whose process is gone."""
    for line in ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        parts = name.split("-")
        if name.startswith(PREFIX) and len(parts) >= 3 and parts[1].isdigit() and not _alive(int(parts[1])):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    for line in ip("-br", "link", "show", "type", "bridge").splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith("svb") and name[3:].isdigit() and not _alive(int(name[3:])):
            subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30)


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _free_subnet() -> ipaddress.IPv4Network:
    used = ip("-4", "-br", "addr") + ip("-4", "route")
    for k in range(230):
        third = (os.getpid() + k) % 230 + 20
        if f"10.200.{third}." not in used:
            return ipaddress.IPv4Network(f"10.200.{third}.0/24")
    raise RuntimeError("no free 10.200.N.0/24 test range")


class Hosts:
    def __init__(self, names: list[str]) -> None:
        require_root_and_ip()
        self.pid = os.getpid()
        self.subnet = _free_subnet()
        self.bridge = f"svb{self.pid}"
        self.names = names
        self.namespaces: dict[str, str] = {}
        self.addresses: dict[str, str] = {}
        self._links: list[str] = []

    @property
    def gateway(self) -> str:
        """The test process's own address on the bridge."""
        return str(self.subnet.network_address + 1)

    def create(self) -> Hosts:
        _remove_leftovers()
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for n, name in enumerate(self.names, start=2):
                namespace = f"{PREFIX}{self.pid}-{name}"
                outer = f"sv{self.pid}h{n}"
                address = str(self.subnet.network_address + n)
                ip("netns", "add", namespace)
                self.namespaces[name] = namespace
                ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", namespace)
                self._links.append(outer)
                ip("link", "set", outer, "master", self.bridge)
                ip("link", "set", outer, "up")
                ip("-n", namespace, "link", "set", "lo", "up")
                ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
                ip("-n", namespace, "link", "set", "eth0", "up")
                self.addresses[name] = address
        except BaseException:
            self.close()
            raise
        return self

    def exec_prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[name]]

    def run(self, name: str, command: list[str], env: dict[str, str], timeout: float = 30) -> str:
        done = subprocess.run([*self.exec_prefix(name), *command], env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"on {name}: {' '.join(command)} failed:\n{done.stderr}")
        return done.stdout

    def close(self) -> None:
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=30)
        for namespace in self.namespaces.values():
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        self.namespaces.clear()
        self._links.clear()


class HostProcess(Process):
    """A ``svcgw`` role run on one of the test hosts."""

    def __init__(self, hosts: Hosts, host: str, args: list[str], env: dict[str, str], name: str) -> None:
        super().__init__(args, env, name)
        self.host = host
        self.address = hosts.addresses[host]
        self.prefix = hosts.exec_prefix(host)

    def start(self) -> HostProcess:
        # ``ip netns exec`` execs the command: the child's pid is the role's own, so signals reach it.
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*self.prefix, sys.executable, "-m", "cli", *self.args], env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        return self


@dataclass
class HostSink:
    """An HTTP sink on a given address that counts event ids and notes when and from which host each post arrived."""

    host: str
    status: int = 200
    delay: float = 0.0
    ids: Counter[str] = field(default_factory=Counter)
    times: list[float] = field(default_factory=list)
    senders: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> HostSink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if sink.delay:
                    time.sleep(sink.delay)
                if sink.status < 300:
                    events = orjson.loads(body)["events"]
                    with sink.lock:
                        sink.ids.update(str(event["id"]) for event in events)
                        sink.times.append(time.monotonic())
                        sink.senders.append(self.client_address[0])
                self.send_response(sink.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ListeningServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://{self.host}:{self.server.server_address[1]}/hook"

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(self.ids)

    def senders_since(self, mark: int) -> Counter[str]:
        """Posts taken after the first ``mark`` ones, by the address of the host that sent them."""
        with self.lock:
            return Counter(self.senders[mark:])

    def received(self) -> int:
        with self.lock:
            return len(self.times)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
