"""The simulator's state: instances, their long connections, faults, and the logs the control API shows.

An ``Instance`` is one simulated device. Its long connection is *usable* only
while it is logged in, connected and not silently dropped; a silent drop
(``dropped_at`` set) leaves ``connected`` true, which is what lets
``long/check`` keep answering code 0 while business reads fail.

Connection changes that the capability layer announces by callback return the
posts they owe as ``Delivery`` tuples ``(instance, callbackUrl, bodies)``:
``Instance.connect`` owes ``GapConnected`` + ``GapSucceed`` when the connection
was not up, ``Instance.close`` owes one ``GapClosed`` when it was. The caller
hands them to ``SimState.deliver`` once its answer has gone out; posts to one
instance keep their order because each instance posts under its own lock.

Faults are looked up most specific first: the instance's setting for the
operation, the instance's ``*``, the global setting for the operation, the
global ``*`` (``lookup``); single-valued settings take the first one set
(``first``).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import string
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from simulator import traffic
from simulator.traffic import dumps

__all__ = [
    "Delivery",
    "Faults",
    "Instance",
    "QrSession",
    "SimState",
    "first",
    "gap_bodies",
    "gap_closed_body",
    "lookup",
    "new_client",
]

T = TypeVar("T")

APPID_ALPHABET = string.ascii_letters + string.digits
MSG_ID_BASE = 1 << 62
SESSION_ENDING_CODES = frozenset({-11002, -1008})
CALL_LOG_LIMIT = 10_000
SINK_LIMIT = 100


@dataclass
class Faults:
    """Fault settings of one scope (global or one instance); they persist until changed."""

    slow: dict[str, float] = field(default_factory=dict)
    error: dict[str, str] = field(default_factory=dict)
    http_error: dict[str, int | str] = field(default_factory=dict)
    reconnect_fails: str | None = None
    qr_verify: bool | None = None

    def snapshot(self) -> dict[str, Any]:
        return {
            "slow": self.slow,
            "error": self.error,
            "http_error": self.http_error,
            "reconnect_fails": self.reconnect_fails,
            "qr_verify": self.qr_verify,
        }


def lookup(tables: list[dict[str, T]], op: str) -> T | None:
    """Most specific first: instance op, instance ``*``, global op, global ``*``."""
    for table in tables:
        for key in (op, "*"):
            if key in table:
                return table[key]
    return None


def first(values: list[T | None]) -> T | None:
    return next((v for v in values if v is not None), None)


@dataclass
class QrSession:
    """One QR code shown by ``login/getQr``.

    Automatic (the default): each ``checkQr`` poll moves it one step on.
    Manual (``manual``): it stays where the control API (``POST /_sim/qr``)
    put it, as a person holding the phone would leave it: not scanned until
    scanned, never confirmed until confirmed. ``code`` is the six-digit code
    ``submitQrCode`` must send once one is required (None: any six digits).
    """

    needs_code: bool
    manual: bool = False
    polls: int = 0
    verified: bool = False
    last_status: int | None = None
    status: int = -1  # where a manual session stands
    code: str | None = None

    def poll(self) -> int:
        """Status of this poll: -1 (not scanned), 1 (scanned), then 2 (confirmed) or 10 (code wanted)."""
        if self.verified:
            status = 2
        elif self.manual:
            status = self.status
        else:
            steps = (-1, 1, 10) if self.needs_code else (-1, 1, 2)
            status = steps[min(self.polls, len(steps) - 1)]
        self.polls += 1
        self.last_status = status
        return status

    def act(self, action: str, code: str | None = None) -> None:
        """What the person does with the phone: ``scan``, ``confirm``, ``cancel`` or ``code`` (one is asked for).

        Any action makes the session manual from then on. Confirming a
        session that needs a code asks for it (10) instead of logging in.
        """
        self.manual = True
        if action == "scan":
            self.status = 1
        elif action == "confirm":
            self.status = 10 if self.needs_code and not self.verified else 2
        elif action == "cancel":
            self.status = 4
        elif action == "code":
            self.needs_code, self.code, self.status = True, code, 10
        else:
            raise ValueError(f"unknown QR action {action!r}")


def gap_bodies(appid: str, *event_types: str) -> list[bytes]:
    now = int(time.time())
    return [dumps(traffic.envelope(appid, kind, [{"sendTime": now}])) for kind in event_types]


def gap_closed_body(appid: str, code: int, message: str | None = None) -> bytes:
    return dumps(traffic.envelope(appid, "GapClosed", [traffic.gap_closed_event(code, message)]))


@dataclass
class Instance:
    appid: str
    user_id: int
    name: str = "sim"
    logged_in: bool = False
    connected: bool = False
    dropped_at: float | None = None
    drop_check_ok_for: float | None = None
    callback_url: str | None = None
    push_history: bool = False
    proxy: str | None = None
    connection_changed_at: float = float("-inf")
    qr: dict[str, QrSession] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    messages: list[dict[str, Any]] = field(default_factory=list)
    faults: Faults = field(default_factory=Faults)
    post_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def usable(self) -> bool:
        return self.logged_in and self.connected and self.dropped_at is None

    def connect(self) -> list[Delivery]:
        """Bring the long connection up (healing a silent drop); announced only if it was not up."""
        was_up = self.connected and self.dropped_at is None
        self.connected, self.dropped_at = True, None
        self.connection_changed_at = time.monotonic()
        if was_up or not self.callback_url:
            return []
        return [(self, self.callback_url, gap_bodies(self.appid, "GapConnected", "GapSucceed"))]

    def close(self, code: int, message: str | None = None) -> list[Delivery]:
        """Close a connected long connection with ``code``; the session-ending codes also end the login."""
        if not self.connected:
            return []
        self.connected, self.dropped_at = False, None
        if code in SESSION_ENDING_CODES:
            self.logged_in = False
        if not self.callback_url:
            return []
        return [(self, self.callback_url, [gap_closed_body(self.appid, code, message)])]

    def drop(self, grace: float | None) -> None:
        """Lose a healthy connection silently; ``long/check`` still says 0 for ``grace`` seconds (None: ever)."""
        if self.connected and self.dropped_at is None:
            self.dropped_at, self.drop_check_ok_for = time.monotonic(), grace

    def snapshot(self) -> dict[str, Any]:
        return {
            "appid": self.appid,
            "name": self.name,
            "userId": self.user_id,
            "loggedIn": self.logged_in,
            "connected": self.connected,
            "dropped": self.dropped_at is not None,
            "usable": self.usable,
            "callbackUrl": self.callback_url,
            "proxy": self.proxy,
            "pushHistory": self.push_history,
            "calls": dict(self.calls),
            "messages": len(self.messages),
            "faults": self.faults.snapshot(),
        }


Delivery = tuple[Instance, str, list[bytes]]


def new_client() -> httpx.AsyncClient:
    # trust_env off: proxy variables must not divert callbacks meant for loopback sinks.
    return httpx.AsyncClient(timeout=5.0, trust_env=False)


@dataclass
class SimState:
    check_warmup: float = 3.0
    # False: new QR sessions wait for the control API (scan, confirm, ...) instead of moving on by themselves.
    qr_auto: bool = True
    instances: dict[str, Instance] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)
    # Bounded so that a long benchmark does not grow without end.
    calls: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=CALL_LOG_LIMIT))
    runs: dict[str, traffic.TrafficRun] = field(default_factory=dict)
    sink: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=SINK_LIMIT))
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    client: httpx.AsyncClient | None = None
    message_ids: Iterator[int] = field(default_factory=lambda: itertools.count(MSG_ID_BASE + 1))

    def add_instance(self, appid: str | None = None, *, name: str = "sim") -> Instance:
        if appid is None:
            appid = "we_" + "".join(secrets.choice(APPID_ALPHABET) for _ in range(15))
        user_id = traffic.USER_ID_BASE + 10_000 + secrets.randbelow(10**9)
        inst = self.instances[appid] = Instance(appid=appid, user_id=user_id, name=name)
        return inst

    def find(self, appid: Any) -> Instance | None:
        """The instance an ``appid`` value names, if it is a string the simulator knows."""
        return self.instances.get(appid) if isinstance(appid, str) else None

    def scopes(self, inst: Instance | None) -> list[Faults]:
        """The fault scopes that apply to a call, most specific first."""
        return [inst.faults, self.faults] if inst is not None else [self.faults]

    @asynccontextmanager
    async def http(self) -> AsyncIterator[httpx.AsyncClient]:
        """The shared client while the lifespan runs; a short-lived one otherwise."""
        if self.client is not None and not self.client.is_closed:
            yield self.client
            return
        async with new_client() as client:
            yield client

    async def deliver(self, deliveries: list[Delivery]) -> None:
        """Post the owed callbacks in order; a failed post is logged by ``traffic.post_body``, not retried."""
        for inst, url, bodies in deliveries:
            async with inst.post_lock, self.http() as client:
                for body in bodies:
                    await traffic.post_body(client, url, body)
