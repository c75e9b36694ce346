"""What the gateway makes of a request before judging it: its path, key and body.

A call on a plain API path needs no routing (:func:`direct_operation`). A
body is read within the operation's limit, its bytes held against the
account's share as they arrive (:func:`read_limited`, :func:`read_rest`), and
parsed (checks 4 to 6) into a :class:`Pending`, a large one in a worker thread.
A call that passed checks 1 to 9 is a :class:`Call`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Scope

from svcgw.errors import GatewayError
from svcgw.intake.ingest import PARSE_IN_THREAD_BYTES
from svcgw.intake.rawjson import Member
from svcgw.threads import in_thread

from ..http import BodyTooLarge, read_body
from .body import DEVICE_CREATE, instance_id, parse_body, takes_callback
from .inflight import Share

__all__ = [
    "EARLY_BODY_BYTES",
    "Call",
    "Pending",
    "declares_small",
    "direct_operation",
    "first_chunk",
    "read_limited",
    "read_rest",
]

# An API path that needs no judging: no escape, no dot, no empty segment. Anything else goes
# through the router and the path guard (check 1) as before.
_PLAIN_API_PATH = re.compile(rb"/svc/api/([^/%.?]+)/([^/%.?]+)")

# A body declared this small is read before the key is looked up, so one Redis round trip serves
# every check (see Gateway._admit_request); its bytes are what the HTTP server buffers anyway.
EARLY_BODY_BYTES = PARSE_IN_THREAD_BYTES


@dataclass(frozen=True)
class Call:
    """A request that passed the common checks (1 to 9)."""

    account: str
    module: str
    action: str
    raw: bytes
    document: dict[str, Any]
    members: list[Member]
    appid: str
    share: Share  # the body's bytes, held until the answer is sent
    # long/start towards the account default for an instance that inherits it (the console's QR
    # login): the address is checked and given to nobody, and not recorded as the instance's own.
    inherits_address: bool = False
    # Came by the set-callback route (or the console's set-callback), not by an API path spelling
    # it: only such a call is the set-callback operation (receiver.gateway.body.takes_callback).
    sets_callback: bool = False

    @property
    def operation(self) -> str:
        return f"{self.module}/{self.action}"


async def read_limited(request: Request, limit: int, share: Share | None) -> bytes:
    """The body, within ``limit`` (``BodyTooLarge``, -41300), its bytes held against ``share`` as they arrive."""
    return await read_body(request, limit, hold=share.hold if share is not None else None)


async def _parse_body(raw: bytes) -> tuple[dict[str, Any], list[Member]]:
    """Check 4's parsing; a large body in a worker thread, so the event loop keeps answering."""
    if len(raw) <= PARSE_IN_THREAD_BYTES:
        return parse_body(raw)
    return await in_thread(parse_body, raw)


def direct_operation(scope: Scope) -> tuple[str, str] | None:
    """``(module, action)`` of a gateway call on a plain API path, which needs no routing; else None."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    raw = scope.get("raw_path") or scope["path"].encode("utf-8")
    if _PLAIN_API_PATH.fullmatch(raw) is None:
        return None
    _, _, _, module, action = scope["path"].split("/")
    return module, action


class Pending:
    """A call's body and what checks 4 to 6 made of it, kept until they are answered in order."""

    __slots__ = ("appid", "asked", "document", "error", "members", "operation", "partial", "raw", "sets_callback")

    def __init__(self, operation: str, *, sets_callback: bool = False) -> None:
        self.operation = operation
        self.sets_callback = sets_callback
        self.raw: bytes | None = None
        self.partial: bytes | None = None  # the first part of a body still arriving
        self.document: dict[str, Any] = {}
        self.members: list[Member] = []
        self.appid = ""
        self.error: GatewayError | None = None
        self.asked: str | None = None  # the appid whose owner the admission script read

    def ask(self) -> str | None:
        """The appid to read the owner of along with the other checks (None: not known yet)."""
        self.asked = self.owner_appid
        return self.asked

    async def load(self, raw: bytes) -> None:
        self.raw = raw
        # Kept, not raised: checks 2 and 3 (key, rate limit) are answered before the body's (4 to 6).
        try:
            self.document, self.members = await _parse_body(raw)
            self.appid = instance_id(
                self.document,
                self.members,
                configuring=takes_callback(self.operation, sets_callback=self.sets_callback),
            )
        except GatewayError as exc:
            self.error = exc

    @property
    def owner_appid(self) -> str | None:
        """The instance whose owner check 9 will need, once the body is known to name one."""
        if self.raw is None or self.error is not None or self.operation == DEVICE_CREATE:
            return None
        return self.appid

    def result(self) -> tuple[dict[str, Any], list[Member], str]:
        if self.error is not None:
            raise self.error
        return self.document, self.members, self.appid


async def first_chunk(request: Request) -> tuple[bytes, bool]:
    """The body's first part as the server has it, and whether more is to come."""
    message = await request.receive()
    if message["type"] == "http.disconnect":
        raise ClientDisconnect()
    return message.get("body", b""), bool(message.get("more_body", False))


async def read_rest(request: Request, first: bytes, limit: int, share: Share) -> bytes:
    """The rest of a body declared small whose first part came in alone (``read_body``'s rules)."""
    declared = int(request.headers["content-length"])
    if declared > 0:
        share.hold(declared)
    chunks, size = [first], len(first)
    while True:
        if size > limit:
            raise BodyTooLarge(limit)
        if size > declared:
            share.hold(size)
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            break
    if size > limit:
        raise BodyTooLarge(limit)
    if size > declared:
        share.hold(size)
    return b"".join(chunks)


def declares_small(request: Request, limit: int) -> bool:
    """The request declares a body of at most ``limit`` bytes."""
    declared = request.headers.get("content-length")
    return declared is not None and declared.isdigit() and int(declared) <= limit
