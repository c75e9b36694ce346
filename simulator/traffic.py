"""Simulated capability-layer events and the loop that posts them.

Building is kept apart from sending. The ``build_*`` functions are pure: from a
``random.Random``, a source of event ids and a clock value they return JSON-able
event objects, and ``envelope`` wraps them as ``{appid, event_type, events}``.
``posts`` turns those into an endless stream of request bodies (with a share of
re-posted duplicates, byte for byte), and ``run_traffic`` sends a bounded part
of that stream through one shared ``httpx.AsyncClient``.

Id plan (all 19 digits, above 2**53 so that doubles lose digits):
group rooms are ``ROOM_ID_BASE + n`` plus ``WIDE_ROOM_ID`` (above 2**63, still
inside uint64); users are ``USER_ID_BASE + n``. ``is_room_id`` tells them apart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

__all__ = [
    "CALL_OUTCOMES",
    "GAP_CLOSED_MESSAGES",
    "KINDS",
    "ROOM_ID_BASE",
    "USER_ID_BASE",
    "WIDE_ROOM_ID",
    "Post",
    "TrafficRun",
    "build_events",
    "dumps",
    "envelope",
    "gap_closed_event",
    "is_room_id",
    "new_event_id",
    "post_body",
    "posts",
    "run_traffic",
]

log = logging.getLogger("svcgw.sim")

ROOM_ID_BASE = 1_688_850_000_000_000_000
USER_ID_BASE = 7_881_300_000_000_000_000
WIDE_ROOM_ID = 9_300_000_000_000_000_001
CORP_ID_BASE = 1_970_325_000_000_000
INT64_MAX = 2**63 - 1

KINDS = (
    "text",
    "image",
    "voice",
    "file",
    "link",
    "group",
    "read_receipt",
    "friend_request",
    "call",
    "announcement",
    "signalling",
)

GAP_CLOSED_MESSAGES = {
    -11001: "must reconnect and then judge",
    -11002: "logged in on another device",
    -1008: "logged out on the mobile side",
    -1: "long connection error",
    0: "user closed the connection manually",
}

# Body of the 40 event, and whether 2412 follows (only after the call connected).
CALL_OUTCOMES: dict[str, tuple[str, bool]] = {
    "cancelled": ("对方已取消", False),
    "rejected": ("已拒绝", False),
    "unanswered": ("未接听", False),
    "connected": ("通话时长", True),
}

GROUP_CONTENT_TYPES = (1001, 1002, 1003, 1005, 2118)
SIGNALLING_CONTENT_TYPES = (2002, 2055, 2104, 2114, 2131, 2160, 2161, 2186, 2313)
ANNOUNCEMENT_FLAG = 0x10000

Event = dict[str, Any]


def dumps(value: Any) -> bytes:
    """Compact JSON; integers of any size come out digit for digit."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        # orjson stops at 64 bits; the stdlib writes every int exactly.
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def is_room_id(value: int) -> bool:
    return ROOM_ID_BASE <= value < USER_ID_BASE or value > INT64_MAX


def new_event_id() -> str:
    return str(uuid.uuid4().int >> 65)


def envelope(appid: str, event_type: str, events: Sequence[Event]) -> dict[str, Any]:
    return {"appid": appid, "event_type": event_type, "events": list(events)}


def gap_closed_event(code: int, message: str | None = None) -> Event:
    """A ``GapClosed`` event; like every Gap event it has no ``id``."""
    text = message if message is not None else GAP_CLOSED_MESSAGES.get(code, "long connection closed")
    return {"code": code, "message": text}


def _user(rng: random.Random) -> int:
    return USER_ID_BASE + rng.randrange(1, 10_000)


def _room(rng: random.Random) -> int:
    return WIDE_ROOM_ID if rng.random() < 0.1 else ROOM_ID_BASE + rng.randrange(1, 200)


def _text(rng: random.Random) -> list[dict[str, Any]]:
    fragments: list[dict[str, Any]] = [{"type": 0, "text": rng.choice(("你好", "hello", "收到", "ok?"))}]
    if rng.random() < 0.3:
        fragments.append({"type": 3, "text": "[微笑]"})
    if rng.random() < 0.2:
        fragments.insert(0, {"type": 5, "text": "@all"})
    return fragments


def _msg(
    event_id: str,
    content_type: int,
    content: Any,
    *,
    owner: int,
    sender: int,
    room: int | None,
    now: int,
    flag: int = 0,
) -> Event:
    """One Msg event; ``room`` None makes it a private chat with ``sender``."""
    return {
        "id": event_id,
        "messageType": 0 if room is None else 1,
        "contentType": content_type,
        "fromUserId": sender,
        "toUserId": owner if room is None else 0,
        "roomId": sender if room is None else room,
        "conversationId": sender if room is None else room,
        "flag": flag,
        "sendTime": now,
        "senderName": f"user{sender % 10_000}",
        "appInfo": uuid.uuid4().hex[:16],
        "content": content,
    }


def _media(rng: random.Random, kind: str) -> dict[str, Any]:
    digest = f"{rng.getrandbits(128):032x}"
    receipt: dict[str, Any] = {
        "id": f"{rng.getrandbits(96):024x}",
        "size": rng.randrange(1_000, 5_000_000),
        "aesKey": f"{rng.getrandbits(128):032x}",
        "md5": digest,
    }
    if kind == "image":
        receipt.update(
            width=1080,
            height=1920,
            midImageFileSize=120_000,
            thumbFileSize=9_000,
            thumbWidth=120,
            thumbHeight=213,
            thumbMd5=digest,
        )
    elif kind in ("file", "voice"):
        receipt.update(name=f"doc{rng.randrange(100)}.pdf" if kind == "file" else "voice.silk", url="")
        if kind == "voice":
            receipt["voiceTime"] = rng.randrange(1, 60)
    return receipt


def _call(rng: random.Random, next_id: Callable[[], str], owner: int, now: int) -> list[Event]:
    """One internal audio call: 3 events to start, 8 to 10 in all (2120 and 503 come in pairs)."""
    outcome = rng.choice(sorted(CALL_OUTCOMES))
    result, connected = CALL_OUTCOMES[outcome]
    peer, session = _user(rng), rng.getrandbits(48)

    def signal(op: str) -> list[tuple[int, Any]]:
        body = {"callSessionId": session, "op": op}
        return [(2120, body), (503, body)]

    plan: list[tuple[int, Any]] = [(2324, {"callSessionId": session}), *signal("invite")]
    if outcome == "cancelled":
        plan += [*signal("cancel"), (40, result), (2350, {"callSessionId": session})]
        plan.append((2324, {"callSessionId": session}))
    else:
        plan += [*signal("accept" if connected else outcome), *signal("hangup")]
        plan += [(40, result), (2350, {"callSessionId": session})]
        if connected:
            plan.append((2412, {"callSessionId": session, "seconds": rng.randrange(5, 600)}))
    return [_msg(next_id(), ct, body, owner=owner, sender=peer, room=None, now=now) for ct, body in plan]


def build_events(
    kind: str, rng: random.Random, *, owner: int, now: int, next_id: Callable[[], str] = new_event_id
) -> list[Event]:
    """The Msg events of one occurrence of ``kind`` (one of ``KINDS``), in posting order."""
    sender = _user(rng)
    room = _room(rng) if rng.random() < 0.5 else None

    def one(content_type: int, content: Any, where: int | None = room) -> list[Event]:
        return [_msg(next_id(), content_type, content, owner=owner, sender=sender, room=where, now=now)]

    if kind == "text":
        return one(rng.choice((0, 2)), _text(rng))
    if kind in ("image", "voice", "file"):
        return one({"image": 14, "voice": 16, "file": 15}[kind], _media(rng, kind))
    if kind == "link":
        return one(
            13, {"title": "周报", "desc": "本周进展", "url": "https://example.com/r/1", "thumbUrl": ""}
        )
    if kind == "group":
        ct = rng.choice(GROUP_CONTENT_TYPES)
        # 1002/1003 carry the affected member's uid; 1005 and 2118 are empty.
        return one(ct, {1001: "新群名", 1002: _user(rng), 1003: _user(rng)}.get(ct, ""), _room(rng))
    if kind == "read_receipt":
        return one(2001, {"msgId": (1 << 62) + rng.getrandbits(40), "readUserId": sender})
    if kind == "friend_request":
        request = {
            "corpId": CORP_ID_BASE + rng.randrange(1, 1000),
            "uin": _user(rng),
            "corpName": "示例科技",
            "customerName": "张三",
            "source": rng.choice(("wechat", "search", "card")),
        }
        return one(2357, request, None)
    if kind == "call":
        return _call(rng, next_id, owner, now)
    if kind == "announcement":
        # The body is a text marked by the flag bit; 2308 carries only the body's id.
        group = _room(rng)
        body = _msg(
            next_id(),
            2,
            [{"type": 0, "text": "明天九点开会"}],
            owner=owner,
            sender=sender,
            room=group,
            now=now,
            flag=ANNOUNCEMENT_FLAG,
        )
        return [body, *one(2308, body["id"], group)]
    if kind == "signalling":
        return one(rng.choice(SIGNALLING_CONTENT_TYPES), "", None)
    raise ValueError(f"unknown traffic kind {kind!r}; expected one of {', '.join(KINDS)}")


@dataclass(frozen=True)
class Post:
    body: bytes
    event_id: str
    duplicate: bool


def posts(
    rng: random.Random,
    *,
    appid: str,
    owner: int,
    kinds: Sequence[str],
    duplicates: float,
    clock: Callable[[], float],
    next_id: Callable[[], str] = new_event_id,
) -> Iterator[Post]:
    """Endless request bodies, one Msg event each; ``duplicates`` is the share of re-posts."""
    recent: deque[Post] = deque(maxlen=100)
    pending: deque[Post] = deque()
    while True:
        if recent and rng.random() < duplicates:
            again = rng.choice(recent)
            yield Post(again.body, again.event_id, duplicate=True)
            continue
        if not pending:
            events = build_events(rng.choice(kinds), rng, owner=owner, now=int(clock()), next_id=next_id)
            pending.extend(Post(dumps(envelope(appid, "Msg", [e])), e["id"], False) for e in events)
        post = pending.popleft()
        recent.append(post)
        yield post


async def post_body(client: httpx.AsyncClient, url: str, body: bytes) -> int | None:
    """POST one envelope; the status code, or None when no answer came. Never raises for HTTP trouble."""
    try:
        response = await client.post(url, content=body, headers={"content-type": "application/json"})
    except httpx.HTTPError as exc:
        log.warning("sim callback to %s failed: %s", url, exc)
        return None
    if not response.is_success:
        log.warning("sim callback to %s answered %s", url, response.status_code)
    return response.status_code


@dataclass
class TrafficRun:
    """Progress of one traffic run, as shown by the control API."""

    appid: str
    url: str
    count: int
    rate: float
    seconds: float
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    duplicates: int = 0
    event_ids: set[str] = field(default_factory=set)
    stopped_by: str | None = None

    def snapshot(self) -> dict[str, Any]:
        return {
            "appid": self.appid,
            "url": self.url,
            "count": self.count,
            "rate": self.rate,
            "seconds": self.seconds,
            "sent": self.sent,
            "delivered": self.delivered,
            "failed": self.failed,
            "duplicates": self.duplicates,
            "unique": len(self.event_ids),
            "done": self.stopped_by is not None,
            "stoppedBy": self.stopped_by,
        }


async def run_traffic(
    client: httpx.AsyncClient,
    run: TrafficRun,
    stream: Iterator[Post],
    *,
    active: Callable[[], bool] = lambda: True,
) -> None:
    """Post ``run.count`` bodies at ``run.rate`` per second (0: no pacing), for at most ``run.seconds``.

    Posting is sequential so that multi-event sequences arrive in order. A failed
    post is counted, not retried. The run also ends when ``active()`` turns false
    (the long connection went away).
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    reason = "count"
    try:
        for index, post in zip(range(run.count), stream, strict=False):
            if run.rate > 0:
                delay = start + index / run.rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            if loop.time() - start > run.seconds:
                reason = "time"
                break
            if not active():
                reason = "disconnected"
                break
            status = await post_body(client, run.url, post.body)
            run.sent += 1
            run.duplicates += post.duplicate
            run.event_ids.add(post.event_id)
            if status is not None and 200 <= status < 300:
                run.delivered += 1
            else:
                run.failed += 1
    except asyncio.CancelledError:
        run.stopped_by = "cancelled"
        raise
    run.stopped_by = reason
