"""Which keys the service's scripts touch without naming them in KEYS, seen by a real Redis.

A script may touch only the keys it names, so that every key it touches can carry one shard's
hash tag (docs/redis-layout.md, "Scripts and their KEYS"). A plain Redis does not enforce that;
:class:`ScriptKeyWatch` checks it on the real server: it follows ``MONITOR`` while a test runs
the service, and for every command a script ran (the ``lua`` lines that follow the script's own
call, which nothing can interleave), asks Redis which of its arguments are keys
(``COMMAND GETKEYS``) and whether its script named each; on a Redis Cluster's master, also whether
all of a call's keys are in one hash slot (:meth:`ScriptKeyWatch.cross_slot`).
"""

from __future__ import annotations

import hashlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from types import TracebackType
from urllib.parse import urlsplit

from redis import Redis
from redis.crc import key_slot
from redis.exceptions import ResponseError

from svcgw.storage.scripts import text

__all__ = ["ScriptCall", "ScriptKeyWatch"]

# ``<time> [<db> <client or lua>] "arg" "arg" ...``, arguments escaped as sdscatrepr does.
_LINE = re.compile(rb'^\+?[0-9.]+ \[(\d+) ([^\]]+)\] (.*)$')
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b", b'"': b'"', b"\\": b"\\"}


def _unescape(quoted: bytes) -> bytes:
    out = bytearray()
    i = 0
    while i < len(quoted):
        if quoted[i : i + 1] == b"\\":
            code = quoted[i + 1 : i + 2]
            if code == b"x":
                out += bytes([int(quoted[i + 2 : i + 4], 16)])
                i += 4
                continue
            out += _ESCAPES.get(code, code)
            i += 2
            continue
        out += quoted[i : i + 1]
        i += 1
    return bytes(out)


def _script_names() -> dict[bytes, str]:
    """sha1 -> name of every script the service registers, for readable failures."""
    files = resources.files("svcgw.storage").joinpath("lua").iterdir()
    names = [p.name[: -len(".lua")] for p in files if p.name.endswith(".lua")]
    # Redis names a script by its SHA-1.
    return {hashlib.sha1(text(n).encode()).hexdigest().encode(): n for n in names}


@dataclass
class ScriptCall:
    """One script call as MONITOR showed it, and the commands it ran."""

    db: int
    name: str
    call: list[bytes]
    inner: list[list[bytes]] = field(default_factory=list)


class ScriptKeyWatch:
    """``MONITOR`` on the Redis of ``redis_url`` while the ``with`` block runs; then :meth:`undeclared`."""

    def __init__(self, redis_url: str) -> None:
        parts = urlsplit(redis_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 6379
        self.db = int(parts.path.strip("/") or 0)
        self.password = parts.password
        self._lines: list[bytes] = []
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ScriptKeyWatch:
        sock = socket.create_connection((self.host, self.port), timeout=10)
        if self.password:
            sock.sendall(b"AUTH %s\r\n" % self.password.encode())
        sock.sendall(b"MONITOR\r\n")
        self._socket = sock
        # The first reply is +OK (after AUTH's): MONITOR is on once it has come.
        buffered = b""
        expected = 2 if self.password else 1
        while buffered.count(b"\r\n") < expected:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("MONITOR closed before it started")
            buffered += chunk
        _, _, rest = buffered.partition(b"+OK\r\n" * expected)
        self._thread = threading.Thread(target=self._read, args=(rest,), daemon=True)
        self._thread.start()
        return self

    def _read(self, pending: bytes) -> None:
        assert self._socket is not None
        self._socket.settimeout(None)
        while True:
            *lines, pending = pending.split(b"\r\n")
            self._lines.extend(lines)
            try:
                chunk = self._socket.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            pending += chunk

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        # An ECHO through another connection marks the end: everything before it was read once it shows.
        marker = b"script-key-watch-end"
        client = Redis(host=self.host, port=self.port, password=self.password)
        try:
            client.echo(marker)
            deadline = time.monotonic() + 10
            while not any(marker in line for line in self._lines[-200:]) and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            client.close()
            if self._socket is not None:
                self._socket.shutdown(socket.SHUT_RDWR)
                self._socket.close()
            if self._thread is not None:
                self._thread.join(5)

    def calls(self) -> list[ScriptCall]:
        """The script calls on this watch's database, each with the commands it ran."""
        names = _script_names()
        calls: list[ScriptCall] = []
        current: ScriptCall | None = None
        for line in self._lines:
            match = _LINE.match(line)
            if match is None:
                continue
            db, who, rest = int(match.group(1)), match.group(2), match.group(3)
            args = [_unescape(a) for a in _ARG.findall(rest)]
            if not args:
                continue
            if who == b"lua":
                if current is not None:
                    current.inner.append(args)
                continue
            current = None
            if args[0].upper() in (b"EVAL", b"EVALSHA"):
                sha = args[1] if args[0].upper() == b"EVALSHA" else hashlib.sha1(args[1]).hexdigest().encode()
                current = ScriptCall(db, names.get(sha, sha.decode()), args)
                calls.append(current)
        return [c for c in calls if c.db == self.db]

    def undeclared(self) -> list[tuple[str, bytes, str]]:
        """(script, command, key) for every key a script touched that it did not name in KEYS."""
        client = Redis(host=self.host, port=self.port, password=self.password)
        found: list[tuple[str, bytes, str]] = []
        try:
            for call in self.calls():
                declared = set(_keys_of(client, call.call))
                for command in call.inner:
                    for key in _keys_of(client, command):
                        if key not in declared:
                            found.append((call.name, command[0], key))
        finally:
            client.close()
        return found


    def cross_slot(self) -> list[tuple[str, bytes, str]]:
        """(script, command, key) for every key a script named (command ``KEYS``) or touched in another hash
        slot than its first KEY's: on a Redis Cluster, every key of a call must be in one slot."""
        client = Redis(host=self.host, port=self.port, password=self.password)
        found: list[tuple[str, bytes, str]] = []
        try:
            for call in self.calls():
                declared = _keys_of(client, call.call)
                slot = key_slot(_bytes(declared[0])) if declared else None
                commands = [(b"KEYS", declared), *((command[0], _keys_of(client, command)) for command in call.inner)]
                for command, keys in commands:
                    found.extend((call.name, command, _bytes(key).decode("utf-8", "replace"))
                                 for key in keys if key_slot(_bytes(key)) != slot)  # fmt: skip
        finally:
            client.close()
        return found


def _bytes(key: bytes | str) -> bytes:
    return key if isinstance(key, bytes) else key.encode()


def _keys_of(client: Redis, command: list[bytes]) -> list[str]:
    try:
        return list(client.command_getkeys(*command))
    except ResponseError:
        return []  # a command without keys (or EVAL with none)
