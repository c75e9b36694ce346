"""The one-round-trip admission script, against a real Redis, with time driven by the test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from redis.asyncio import Redis as AsyncRedis

from receiver.gateway import admission as admission_module
from receiver.gateway.admission import Admission
from receiver.ratelimit import RateLimiter
from svcgw.digests import digest
from svcgw.registry.store import Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.scriptkeys import ScriptKeyWatch

NOW = 1_700_000_000.0


def scenario(redis_url: str, rate: str, body: Callable[[Admission, Store, AsyncRedis], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        client = AsyncRedis.from_url(redis_url, decode_responses=True)
        now = [NOW]
        try:
            admission = Admission(client, RateLimiter(client, keys, rate, clock=lambda: now[0]))
            return await body(admission, Store(client, TokenVault([Fernet.generate_key().decode()]), keys), client)
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
        assert await client.keys(keys.prefix + "rate:*") == []
        assert await admission.admit(key=key, operation="user/getProfile", appid=None) is not None
        await store.revoke_key(record.id)
        # Only the key's id and account are remembered: the very next call is refused.
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


# --- the names of a key's call, remembered ------------------------------------------------------


class Watched:
    """Admission calls under ``MONITOR``: how many times each ran the script, and what it touched unnamed."""

    def __init__(self, redis_url: str, admission: Admission) -> None:
        self.redis_url = redis_url
        self.admission = admission
        self.undeclared: list[tuple[str, bytes, str]] = []

    async def admit(self, **call: Any) -> tuple[Any, int]:
        """The facts of ``admission.admit(**call)`` and the number of script calls it made."""
        with ScriptKeyWatch(self.redis_url) as watch:
            facts = await self.admission.admit(**call)
        self.undeclared.extend(watch.undeclared())
        return facts, sum(1 for c in watch.calls() if c.name == "gateway_admit")


def test_a_keys_first_call_learns_its_id_and_account_and_later_calls_are_one_script_call(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        account = await store.create_account("a")
        record, key = await store.create_key(account.id)
        await store.register_instance("we_mine", account.id)
        watched = Watched(redis_url, admission)
        # The script is loaded first, so that no NOSCRIPT answer is counted.
        assert await admission.admit(key="sk_unknown", operation="user/getProfile", appid=None) is None

        # Its id from the look-up, then its account from its hash (named only once the id is known).
        facts, calls = await watched.admit(key=key, operation="user/getProfile", appid="we_mine")
        assert calls == 3
        assert facts is not None and facts.account == account.id and facts.owner == account.id
        # The calls that learned the names wrote nothing: one call in the window, last_used once.
        assert await client.llen(keys.rate_window(account.id, "100/60")) == 1
        for _ in range(3):
            facts, calls = await watched.admit(key=key, operation="user/getProfile", appid="we_mine")
            assert calls == 1 and facts is not None and facts.account == account.id
        assert await client.llen(keys.rate_window(account.id, "100/60")) == 4
        assert await client.hget(keys.api_key(record.id), "last_used") == str(int(NOW))

        # An unknown key is refused at once; so is a key of a call for an account, which needs no look-up.
        assert await watched.admit(key="sk_nobody", operation="user/getProfile", appid=None) == (None, 1)
        facts, calls = await watched.admit(account=account.id, operation="user/getProfile", appid="we_mine")
        assert calls == 1 and facts is not None and facts.owner == account.id
        # Another Admission (another process) learns the names for itself.
        other = Watched(redis_url, Admission(client, RateLimiter(client, keys, "100/minute", clock=lambda: NOW)))
        assert (await other.admit(key=key, operation="user/getProfile", appid=None))[1] == 3
        assert watched.undeclared == [] and other.undeclared == []

    scenario(redis_url, "100/minute", body)


def test_a_wrong_remembered_account_is_corrected_before_any_window_or_denied_set_is_read(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        first = await store.create_account("first")
        second = await store.create_account("second")
        record, key = await store.create_key(first.id)
        await client.sadd(keys.account_own_denied(second.id), "message/sendText")
        watched = Watched(redis_url, admission)
        assert (await watched.admit(key=key, operation="message/sendText", appid=None))[0].denied is False
        first_window = keys.rate_window(first.id, "100/60")
        assert await client.llen(first_window) == 1

        # The key's hash now names the second account: what the Admission remembers is wrong.
        await client.hset(keys.api_key(record.id), "account", second.id)
        facts, calls = await watched.admit(key=key, operation="message/sendText", appid=None)
        assert calls == 2
        assert facts is not None and facts.account == second.id and facts.denied
        assert await client.llen(first_window) == 1  # the first account's window was not counted
        assert await client.llen(keys.rate_window(second.id, "100/60")) == 1
        # Corrected, it is remembered: one call again.
        assert (await watched.admit(key=key, operation="message/sendText", appid=None))[1] == 1
        assert watched.undeclared == []

    scenario(redis_url, "100/minute", body)


def test_a_look_up_naming_another_key_is_followed_and_checked_against_the_presented_key(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        first = await store.create_account("first")
        other_account = await store.create_account("other")
        _, key = await store.create_key(first.id)
        other, _ = await store.create_key(other_account.id)
        watched = Watched(redis_url, admission)
        assert (await watched.admit(key=key, operation="user/getProfile", appid=None))[1] == 3
        assert await client.llen(keys.rate_window(first.id, "100/60")) == 1

        # The look-up now names the other key: its id, then its account, are learned again ...
        await client.set(keys.api_key_lookup(digest(key)), other.id)
        facts, calls = await watched.admit(key=key, operation="user/getProfile", appid=None)
        assert calls == 3
        # ... and the other key's hash is not the presented key's digest: refused.
        assert facts is None
        assert await client.llen(keys.rate_window(first.id, "100/60")) == 1
        # Its digest made to match, the call is the other key's, with its account's window.
        await client.hset(keys.api_key(other.id), "hash", digest(key))
        facts, calls = await watched.admit(key=key, operation="user/getProfile", appid=None)
        assert calls == 1 and facts is not None and facts.account == other_account.id
        assert await client.llen(keys.rate_window(first.id, "100/60")) == 1
        assert watched.undeclared == []

    scenario(redis_url, "100/minute", body)


def test_a_revoked_key_is_refused_on_its_next_call_though_remembered(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        account = await store.create_account("a")
        revoked, key = await store.create_key(account.id)
        marked, marked_key = await store.create_key(account.id)
        watched = Watched(redis_url, admission)
        for presented in (key, marked_key):
            assert (await watched.admit(key=presented, operation="user/getProfile", appid=None))[0] is not None
        window = keys.rate_window(account.id, "100/60")

        # Revoked as the store does it (the look-up dropped): refused at once, one script call.
        await store.revoke_key(revoked.id)
        assert await watched.admit(key=key, operation="user/getProfile", appid=None) == (None, 1)
        # Marked revoked with its look-up still there: refused as well, nothing written.
        await client.hset(keys.api_key(marked.id), "revoked_at", "1")
        assert await watched.admit(key=marked_key, operation="user/getProfile", appid=None) == (None, 1)
        assert await client.llen(window) == 2
        assert watched.undeclared == []

    scenario(redis_url, "100/minute", body)


def test_the_memory_starts_again_past_its_bound(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission_module, "REMEMBERED", 2)

    async def body(admission: Admission, store: Store, client: AsyncRedis) -> list[int]:
        account = await store.create_account("a")
        presented = [(await store.create_key(account.id))[1] for _ in range(3)]
        watched = Watched(redis_url, admission)
        assert await admission.admit(key="sk_unknown", operation="user/getProfile", appid=None) is None
        counts = []
        for key in (*presented, presented[2], presented[0]):
            facts, calls = await watched.admit(key=key, operation="user/getProfile", appid=None)
            assert facts is not None and facts.account == account.id
            counts.append(calls)
        return counts

    # The third key found the memory full (two keys): it started again, with the third alone.
    assert scenario(redis_url, "100/minute", body) == [3, 3, 3, 1, 3]


def test_a_key_whose_account_changes_under_every_call_is_refused_after_three(redis_url: str) -> None:
    async def body(admission: Admission, store: Store, client: AsyncRedis) -> None:
        accounts = [(await store.create_account(name)).id for name in ("a", "b")]
        record, key = await store.create_key(accounts[0])
        script = admission._script
        calls = 0

        async def moving(**call: Any) -> Any:
            # Each call finds the key under the other account than the last one answered.
            nonlocal calls
            calls += 1
            await client.hset(keys.api_key(record.id), "account", accounts[calls % 2])
            return await script(**call)

        admission._script = moving  # type: ignore[assignment]
        assert await admission.admit(key=key, operation="user/getProfile", appid=None) is None
        assert calls == 3
        assert await client.keys(keys.prefix + "rate:*") == []

    scenario(redis_url, "100/minute", body)
