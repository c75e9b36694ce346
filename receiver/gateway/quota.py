"""Device quota: ``device/create`` never takes an account past its quota, even concurrently.

A slot is counted as an instance of the account or a creation in flight.
The two scripts (``svcgw/storage/lua/device_reserve.lua``, ``device_hold.lua``) keep
the count atomic; the reservations live in one sorted set per account,
scored by when they expire.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from redis.asyncio import Redis

from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["RESERVATION_SECONDS", "DeviceQuota", "Reservation"]

# How long a quota slot stays reserved if the server dies mid-create; longer
# than any upstream call may take.
RESERVATION_SECONDS = 120


@dataclass
class Reservation:
    account: str
    id: str
    appid: str | None = None


class DeviceQuota:
    """Quota slots for ``device/create``, counted as instances + creations in flight.

    ``reserve`` takes a slot atomically (one Lua script) or says the quota is
    full. When the capability layer answers with a new appid, ``hold`` renames
    the slot to that appid before it is registered: from then on the script
    counts the appid once, whether it is still a reservation, already in the
    account's instances, or both. ``release`` frees the slot in every case.
    A slot left behind by a server that died mid-call expires by itself.
    """

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys
        self._reserve = register(redis, "device_reserve")
        self._hold = register(redis, "device_hold")

    async def reserve(self, account_id: str, quota: int) -> Reservation | None:
        reservation = Reservation(account_id, "rsv_" + secrets.token_hex(8))
        taken = await self._reserve(
            keys=[self.keys.account_instances(account_id), self.keys.device_reservations(account_id)],
            args=[quota, reservation.id, RESERVATION_SECONDS],
        )
        return reservation if int(taken) else None

    async def hold(self, reservation: Reservation, appid: str) -> None:
        await self._hold(keys=[self.keys.device_reservations(reservation.account)], args=[reservation.id, appid])
        reservation.appid = appid

    async def release(self, reservation: Reservation) -> None:
        names = [reservation.id] + ([reservation.appid] if reservation.appid else [])
        await self.redis.zrem(self.keys.device_reservations(reservation.account), *names)
