"""Console credentials in Redis: one account per login, the password and the session epoch in one step."""

from __future__ import annotations

import asyncio

from redis import Redis

from svcgw.config.settings import Settings
from svcgw.registry.credentials import Credentials, LoginTaken
from svcgw.registry.store import Account, Store
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import with_store


def test_accounts_racing_for_one_login_get_it_once(settings: Settings, redis: Redis) -> None:
    async def action(store: Store) -> list[Account | BaseException]:
        spellings = ("Racer@Example.com", "racer@example.COM", "RACER@example.com")
        return await asyncio.gather(
            *(store.create_account(f"racer {n}", login=spellings[n % 3]) for n in range(6)), return_exceptions=True
        )

    results = with_store(settings, action)
    created = [r for r in results if isinstance(r, Account)]
    assert len(created) == 1 and sum(isinstance(r, LoginTaken) for r in results) == 5
    assert redis.smembers(keys.accounts) == {created[0].id.encode()}  # nothing left of the refused ones
    assert redis.get(keys.login("racer@example.com")) == created[0].id.encode()


def test_set_password_raises_the_epoch_and_keeps_one_session(settings: Settings, redis: Redis) -> None:
    async def action(store: Store) -> tuple[int, int, int]:
        account = await store.create_account("x", login="keeper")
        credentials = Credentials(store.redis, keys)
        kept = keys.console_session("kept")
        await store.redis.hset(kept, mapping={"account": account.id, "epoch": "0"})
        first = await credentials.set_password(account.id, "$argon2id$first", keep_session=kept)
        second = await credentials.end_sessions(account.id)
        kept_epoch = int(await store.redis.hget(kept, "epoch"))
        return first, second, kept_epoch

    first, second, kept_epoch = with_store(settings, action)
    assert (first, second, kept_epoch) == (1, 2, 1)  # kept through the change, not through sign-out-everywhere

    async def missing(store: Store) -> str:
        try:
            await Credentials(store.redis, keys).end_sessions("acc_nope")
        except LookupError as exc:
            return str(exc)
        return "no error"

    assert "no account" in with_store(settings, missing)
    assert not redis.exists(keys.account("acc_nope"))
