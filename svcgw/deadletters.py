"""Dead letters: deliveries whose retries ran out, listed, shown and replayed.

The source of truth is RQ's failed registry (``rq:failed:<queue>``): its
members are delivery ids scored by their expiry, and only a member whose
score is still in the future is a dead letter. ``svcgw:dead:<appid>`` is an
index by instance for fast listing; it may still hold ids that were replayed
by ``rq requeue`` or that expired, so every id read from it is checked
against the registry.

Every function takes an optional ``account``: with it, a dead letter of
another account is treated exactly like one that does not exist, so the
answer tells nothing about other accounts (the console relies on this).

The functions are coroutines; they accept a ``redis.asyncio`` client in either
decoding mode.

Errors::

    DeadLetterError
    └── NotFound          (also a LookupError)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import orjson
from redis.asyncio import Redis

from svcgw import attemptrecords, keys
from svcgw.settings import Settings

from .scripts import register

__all__ = [
    "DeadLetter",
    "DeadLetterDetail",
    "DeadLetterError",
    "NotFound",
    "ReplayResult",
    "count_dead",
    "list_dead",
    "replay",
    "show",
]

_FIELDS = ("appid", "account", "event_type", "attempts", "dead_at", "received_at", "state")
_CHUNK = 500

ReplayStatus = Literal["replayed", "not_found", "expired", "died_earlier"]


class DeadLetterError(Exception):
    """Base class of this module's errors."""


class NotFound(DeadLetterError, LookupError):
    """No such dead letter (or it belongs to another account)."""


@dataclass(frozen=True)
class DeadLetter:
    id: str
    appid: str
    account: str
    event_type: str
    attempts: int
    last_error: str | None
    dead_at: float | None
    received_at: float | None

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "appid": self.appid,
            "account": self.account,
            "event_type": self.event_type,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "dead_at": self.dead_at,
            "received_at": self.received_at,
        }


@dataclass(frozen=True)
class DeadLetterDetail:
    """A dead letter with its body (as text) and every attempt record, oldest first."""

    id: str
    appid: str
    account: str
    event_type: str
    last_error: str | None
    dead_at: float | None
    received_at: float | None
    body: str = field(repr=False)
    attempts: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "appid": self.appid,
            "account": self.account,
            "event_type": self.event_type,
            "last_error": self.last_error,
            "dead_at": self.dead_at,
            "received_at": self.received_at,
            "body": self.body,
            "attempts": self.attempts,
        }


@dataclass(frozen=True)
class ReplayResult:
    id: str
    appid: str | None
    status: ReplayStatus

    @property
    def replayed(self) -> bool:
        return self.status == "replayed"

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "appid": self.appid, "status": self.status}


# --- reading -------------------------------------------------------------------
async def list_dead(
    redis: Redis,
    settings: Settings,
    *,
    appid: str | None = None,
    account: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[DeadLetter]:
    """Dead letters, newest first, optionally of one instance and/or one account."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset cannot be negative")
    if limit == 0:
        return []
    failed = keys.rq_failed(settings.queue_name)
    if appid is None and account is None:
        # The registry itself is ordered by expiry, i.e. by the time each died.
        letters: list[DeadLetter] = []
        start = offset
        while len(letters) < limit:
            want = limit - len(letters)
            ids = await _newest(redis, failed, start=start, num=want)
            if not ids:
                break
            start += len(ids)
            letters.extend(await _load(redis, ids))
        return letters
    live = await _live_ids(redis, settings, await _candidates(redis, appid=appid, account=account))
    page = live[offset : offset + limit]
    return [
        letter
        for letter in await _load(redis, page)
        if (account is None or letter.account == account) and (appid is None or letter.appid == appid)
    ]


async def count_dead(
    redis: Redis, settings: Settings, *, appid: str | None = None, account: str | None = None
) -> int:
    """How many dead letters there are (of one instance and/or one account)."""
    if appid is None and account is None:
        return int(await redis.zcount(keys.rq_failed(settings.queue_name), f"({time.time()}", "+inf"))
    return len(await _live_ids(redis, settings, await _candidates(redis, appid=appid, account=account)))


async def show(
    redis: Redis, settings: Settings, delivery_id: str, *, account: str | None = None
) -> DeadLetterDetail:
    """One dead letter with its body and attempts; ``NotFound`` if it is not dead (or not the account's)."""
    if not await _is_dead(redis, settings, delivery_id):
        raise NotFound(f"no dead letter {delivery_id!r}")
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.delivery(delivery_id))  # with its attempt records, fields a1 .. aN
        pipe.lrange(keys.delivery_attempts(delivery_id), 0, -1)  # records of earlier versions
        whole, legacy = await pipe.execute()
    stored = {_text(name): value for name, value in whole.items()}
    data = {name: stored.get(name) for name in (*_FIELDS, "body")}
    if not data["appid"] or (account is not None and _text(data["account"]) != account):
        raise NotFound(f"no dead letter {delivery_id!r}")
    attempts = [_attempt(record) for record in attemptrecords.from_hash(stored, legacy)]
    body = data["body"]
    return DeadLetterDetail(
        id=delivery_id,
        appid=_text(data["appid"]),
        account=_text(data["account"]),
        event_type=_text(data["event_type"]),
        last_error=_last_error(attempts[-1]) if attempts else None,
        dead_at=_float(data["dead_at"]),
        received_at=_float(data["received_at"]),
        body=body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or ""),
        attempts=attempts,
    )


# --- replaying -----------------------------------------------------------------
async def replay(
    redis: Redis,
    settings: Settings,
    ids: Sequence[str] | None = None,
    appid: str | None = None,
    all: bool = False,
    account: str | None = None,
    since: float | None = None,
) -> list[ReplayResult]:
    """Give dead letters one fresh attempt each: the ones named, those of ``appid``, or ``all``.

    Exactly one selector is required, except with ``since`` (a Unix time):
    then only dead letters that died at or after it are replayed, of the
    selector given or, with none, of every instance (of ``account`` when
    given); named ids that died before it come back ``died_earlier``. A replayed delivery whose attempt fails
    again goes back to the dead letters with its whole history; the worker
    does that, this only queues it. With ``account``, ids of other accounts
    come back as ``not_found``, like unknown ids.
    """
    selectors = sum((bool(ids), appid is not None, all))
    if selectors > 1 or (selectors == 0 and since is None):
        raise ValueError("name dead letters by id, by appid, or all of them (exactly one)")
    if ids:
        chosen = list(dict.fromkeys(ids))
    elif appid is not None:
        chosen = await _live_ids(redis, settings, await _candidates(redis, appid=appid, account=account))
    elif account is not None:
        chosen = await _live_ids(redis, settings, await _candidates(redis, account=account))
    else:
        chosen = await _newest(redis, keys.rq_failed(settings.queue_name))
    script = register(redis, "replay")
    failed_key, queue_key = keys.rq_failed(settings.queue_name), keys.rq_queue(settings.queue_name)
    exhausted = len(settings.retry_schedule)
    results: list[ReplayResult] = []
    for chunk in _chunks(chosen, _CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for delivery_id in chunk:
                pipe.hmget(keys.delivery(delivery_id), ["appid", "account", "dead_at"])
            owners = await pipe.execute()
        for delivery_id, (raw_appid, raw_account, raw_dead_at) in zip(chunk, owners, strict=True):
            owner_appid = _text(raw_appid) if raw_appid else None
            if account is not None and (raw_account is None or _text(raw_account) != account):
                results.append(ReplayResult(delivery_id, None, "not_found"))
                continue
            if appid is not None and owner_appid != appid:
                results.append(ReplayResult(delivery_id, None, "not_found"))
                continue
            if since is not None and (_float(raw_dead_at) or 0.0) < since:
                if ids:
                    results.append(ReplayResult(delivery_id, owner_appid, "died_earlier"))
                continue  # died before: not selected at all
            outcome = int(
                await script(
                    keys=[
                        failed_key,
                        queue_key,
                        keys.delivery(delivery_id),
                        keys.delivery_attempts(delivery_id),
                        keys.rq_job(delivery_id),
                        keys.dead_letters_by_appid(owner_appid or ""),
                        keys.RQ_QUEUES,
                    ],
                    args=[delivery_id, exhausted, queue_key],
                )
            )
            if outcome == 1:
                results.append(ReplayResult(delivery_id, owner_appid, "replayed"))
            elif outcome == -1:
                # Taken out of the registry by the script; its data is gone.
                if owner_appid:
                    await redis.srem(keys.dead_letters_by_appid(owner_appid), delivery_id)
                results.append(ReplayResult(delivery_id, owner_appid, "expired"))
            else:
                results.append(ReplayResult(delivery_id, None, "not_found"))
    return results


# --- helpers -------------------------------------------------------------------
async def _candidates(redis: Redis, *, appid: str | None = None, account: str | None = None) -> list[str]:
    """Ids from the per-instance index; not yet checked against the registry."""
    if appid is not None:
        if account is not None and _text_or_none(await redis.hget(keys.instance(appid), "account")) != account:
            return []
        appids = [appid]
    else:
        assert account is not None
        appids = sorted(_text(a) for a in await redis.smembers(keys.account_instances(account)))
    ids: list[str] = []
    for chunk in _chunks(appids, _CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for one in chunk:
                pipe.smembers(keys.dead_letters_by_appid(one))
            for members in await pipe.execute():
                ids.extend(_text(m) for m in members)
    return ids


async def _live_ids(redis: Redis, settings: Settings, ids: Iterable[str]) -> list[str]:
    """The ids still in the failed registry, newest first."""
    failed = keys.rq_failed(settings.queue_name)
    now = time.time()
    scored: list[tuple[float, str]] = []
    for chunk in _chunks(list(dict.fromkeys(ids)), _CHUNK):
        for delivery_id, score in zip(chunk, await redis.zmscore(failed, chunk), strict=True):
            if score is not None and float(score) > now:
                scored.append((float(score), delivery_id))
    scored.sort(reverse=True)
    return [delivery_id for _, delivery_id in scored]


async def _newest(redis: Redis, failed: str, *, start: int | None = None, num: int | None = None) -> list[str]:
    """Live members of the failed registry, newest first (a slice of them with start/num)."""
    members = cast(
        list[bytes | str], await redis.zrevrangebyscore(failed, "+inf", f"({time.time()}", start=start, num=num)
    )
    return [_text(member) for member in members]


async def _is_dead(redis: Redis, settings: Settings, delivery_id: str) -> bool:
    score = await redis.zscore(keys.rq_failed(settings.queue_name), delivery_id)
    return score is not None and float(score) > time.time()


async def _load(redis: Redis, ids: Sequence[str]) -> list[DeadLetter]:
    """Dead letters for ids, in order; ids whose delivery data has expired are skipped."""
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id in ids:
            pipe.hmget(keys.delivery(delivery_id), list(_FIELDS))
            pipe.lindex(keys.delivery_attempts(delivery_id), -1)  # records of earlier versions
        replies = await pipe.execute()
    found = [dict(zip(_FIELDS, replies[2 * index], strict=True)) for index in range(len(ids))]
    counts = [attemptrecords.count_of(data["attempts"]) for data in found]
    # The last record is field a<count>, known once the count is read: a second round trip.
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id, count in zip(ids, counts, strict=True):
            if count:
                pipe.hget(keys.delivery(delivery_id), attemptrecords.field(count))
        lasts = iter(await pipe.execute())
    letters: list[DeadLetter] = []
    for index, delivery_id in enumerate(ids):
        data = found[index]
        last = (next(lasts) if counts[index] else None) or replies[2 * index + 1]
        if not data["appid"]:
            continue
        letters.append(
            DeadLetter(
                id=delivery_id,
                appid=_text(data["appid"]),
                account=_text(data["account"]),
                event_type=_text(data["event_type"]),
                attempts=int(_text(data["attempts"]) or 0),
                last_error=_last_error(_attempt(last)) if last else None,
                dead_at=_float(data["dead_at"]),
                received_at=_float(data["received_at"]),
            )
        )
    return letters


def _attempt(record: bytes | str) -> dict[str, Any]:
    try:
        value = orjson.loads(record)
    except orjson.JSONDecodeError:
        return {"error": "unreadable attempt record"}
    return value if isinstance(value, dict) else {"record": value}


def _last_error(attempt: dict[str, Any]) -> str | None:
    error = attempt.get("error")
    if error:
        return str(error)
    status = attempt.get("status")
    return f"HTTP {status}" if status is not None and not attempt.get("ok") else None


def _chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _text_or_none(value: bytes | str | None) -> str | None:
    return None if value is None else _text(value)


def _float(value: bytes | str | None) -> float | None:
    text = _text(value)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None
