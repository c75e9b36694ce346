"""Replaying dead letters: each gets one fresh attempt; one that fails again returns with its history.

One script (``svcgw/storage/lua/replay.lua``) per dead letter moves it from RQ's
failed registry back to the queue. With an ``account``, a dead letter of
another account is treated exactly like one that does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from redis.asyncio import Redis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery.deadindex import CHUNK, candidates, chunks, live_ids, newest
from svcgw.delivery.view import field_float, field_text
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["ReplayResult", "ReplayStatus", "replay"]

ReplayStatus = Literal["replayed", "not_found", "expired", "died_earlier"]


@dataclass(frozen=True)
class ReplayResult:
    id: str
    appid: str | None
    status: ReplayStatus

    @property
    def replayed(self) -> bool:
        return self.status == "replayed"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def replay(
    redis: Redis,
    keys: KeySpace,
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
        chosen = await live_ids(redis, keys, settings, await candidates(redis, keys, appid=appid, account=account))
    elif account is not None:
        chosen = await live_ids(redis, keys, settings, await candidates(redis, keys, account=account))
    else:
        chosen = await newest(redis, keys.rq.failed(settings.queue_name))
    script = register(redis, "replay")
    failed_key, queue_key = keys.rq.failed(settings.queue_name), keys.rq.queue(settings.queue_name)
    exhausted = len(settings.retry_schedule)
    results: list[ReplayResult] = []
    for chunk in chunks(chosen, CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for delivery_id in chunk:
                pipe.hmget(keys.delivery(delivery_id), ["appid", "account", "dead_at"])
            owners = await pipe.execute()
        for delivery_id, (raw_appid, raw_account, raw_dead_at) in zip(chunk, owners, strict=True):
            named = deliveryid.parse_named(delivery_id)  # its appid even once its hash is gone
            owner_appid = field_text(raw_appid) if raw_appid else (named[0] if named else None)
            if account is not None and (raw_account is None or field_text(raw_account) != account):
                results.append(ReplayResult(delivery_id, None, "not_found"))
                continue
            if appid is not None and owner_appid != appid:
                results.append(ReplayResult(delivery_id, None, "not_found"))
                continue
            if since is not None and (field_float(raw_dead_at) or 0.0) < since:
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
                        keys.rq.job(delivery_id),
                        keys.dead_letters_by_appid(owner_appid or ""),
                        keys.rq.queues,
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
