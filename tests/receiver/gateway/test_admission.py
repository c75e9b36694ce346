"""The one-round-trip admission script, against a real Redis, with time driven by the test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from redis.asyncio import Redis as AsyncRedis

from receiver.gateway.admission import Admission
from receiver.ratelimit import RateLimiter
from svcgw import keys
from svcgw.store import Store
from svcgw.vault import TokenVault

NOW = 1_700_000_000.0


def scenario(redis_url: str, rate: str, body: Callable[[Admission, Store, AsyncRedis], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        client = AsyncRedis.from_url(redis_url, decode_responses=True)
        now = [NOW]
        try:
            admission = Admission(client, RateLimiter(client, rate, clock=lambda: now[0]))
            return await body(admission, Store(client, TokenVault([Fernet.generate_key().decode()])), client)
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_a_valid_key_gets_its_account_verdict_denial_and_owner_in_one_call(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        account = await store.create_account("a")
        other = await store.create_account("b")
        key_record, key = await store.create_key(account.id)
        await store.register_instance("we_mine", account.id)
        await store.register_instance("we_theirs", other.id)

        facts = await admission.admit(key=key, operation="user/getProfile", appid="we_mine")
        assert facts is not None and facts.account == account.id
        assert facts.verdict.allowed and not facts.denied and facts.owner == account.id
        # last_used is written on the key's hash, in whole seconds.
        assert await client.hget(keys.api_key(key_record.id), "last_used") == str(int(NOW))

        theirs = await admission.admit(key=key, operation="user/getProfile", appid="we_theirs")
        nobody = await admission.admit(key=key, operation="user/getProfile", appid="we_nobody")
        unread = await admission.admit(key=key, operation="device/create", appid=None)
        assert theirs is not None and theirs.owner == other.id
        assert nobody is not None and nobody.owner is None
        assert unread is not None and unread.owner is None

    scenario(redis_url, "100/minute", body)


def test_unknown_revoked_blank_and_overlong_keys_are_refused_and_write_nothing(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        account = await store.create_account("a")
        record, key = await store.create_key(account.id)
        for presented in ("sk_unknown", "", None, "k" * 513):
            assert await admission.admit(key=presented, operation="user/getProfile", appid=None) is None
        assert await client.keys(keys.PREFIX + "rate:*") == []
        assert await admission.admit(key=key, operation="user/getProfile", appid=None) is not None
        await store.revoke_key(record.id)
        # No cache anywhere: the very next call is refused.
        assert await admission.admit(key=key, operation="user/getProfile", appid=None) is None

    scenario(redis_url, "100/minute", body)


def test_both_denied_sets_count_without_regard_to_case(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        account = await store.create_account("a")
        _, key = await store.create_key(account.id)
        await client.sadd(keys.account_denied(account.id), "message/sendText")
        await client.sadd(keys.account_own_denied(account.id), "Login/Logout")

        async def denied(operation: str) -> bool:
            facts = await admission.admit(key=key, operation=operation, appid=None)
            assert facts is not None
            return facts.denied

        assert await denied("message/SENDTEXT") and await denied("message/sendText")
        assert await denied("login/logout") and await denied("LOGIN/LOGOUT")
        assert not await denied("message/sendRichText")

    scenario(redis_url, "100/minute", body)


def test_the_rate_window_counts_refused_calls_per_account(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> list[Any]:
        account = await store.create_account("a")
        _, key = await store.create_key(account.id)
        _, second_key = await store.create_key(account.id)
        verdicts = []
        for presented in (key, second_key, key, key):
            facts = await admission.admit(key=presented, operation="user/getProfile", appid=None)
            assert facts is not None
            verdicts.append((facts.verdict.allowed, facts.verdict.retry_after))
        # The window the console's limiter reads is the same one.
        return [*verdicts, await client.llen(keys.rate_window(account.id, "2/60"))]

    assert scenario(redis_url, "2/minute", body) == [(True, 0), (True, 0), (False, 60), (False, 60), 2]


def test_a_call_for_an_account_skips_the_key_and_runs_the_rest(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        account = await store.create_account("a")
        record, _ = await store.create_key(account.id)
        await store.register_instance("we_mine", account.id)
        await client.sadd(keys.account_own_denied(account.id), "message/sendText")
        facts = await admission.admit(account=account.id, operation="message/sendtext", appid="we_mine")
        assert facts is not None and facts.account == account.id
        assert facts.denied and facts.owner == account.id and facts.verdict.allowed
        assert await client.hget(keys.api_key(record.id), "last_used") is None

    scenario(redis_url, "100/minute", body)


def test_rate_windows_stay_out_of_the_append_only_file_and_last_used_is_written_once_a_second(
    tmp_path: Path,
) -> None:
    """With ``appendfsync always``, a gateway call must not wait for a disk flush of its rate window."""
    from tests.deploy.redis_nodes import Node, require_binaries

    require_binaries("redis-server")
    node = Node("redis-server", tmp_path / "redis", ["--appendonly", "yes", "--appendfsync", "always", "--save", ""])
    node.start()
    try:
        url = f"redis://{node.address}/0"

        async def body(admission: Admission, store: Store, client: AsyncRedis) -> int:
            account = await store.create_account("a")
            _, key = await store.create_key(account.id)
            before = int((await client.info("persistence"))["aof_current_size"])
            for _ in range(20):
                assert await admission.admit(key=key, operation="user/getProfile", appid=None) is not None
            # One last_used write (the clock stands still); no window write.
            assert await client.llen(keys.rate_window(account.id, "100/60")) == 20
            return int((await client.info("persistence"))["aof_current_size"]) - before

        grown = scenario(url, "100/minute", body)
        aof = b"".join(path.read_bytes() for path in (tmp_path / "redis").rglob("*.aof"))
        assert b"last_used" in aof and b"svcgw:rate:" not in aof
        assert 0 < grown < 200
    finally:
        node.kill()
