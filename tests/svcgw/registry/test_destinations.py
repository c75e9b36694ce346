"""Further destinations in ``Store``: saved, listed, updated, disabled, removed, rotated; sealed at rest;
the scope's routing record always the record of its destinations; bounded per scope; per account."""

from __future__ import annotations

import asyncio

import pytest
from cryptography.fernet import Fernet
from redis import Redis

from receiver.console import codes as console_codes
from svcgw.callbacks.addresses import CallbackUrl, check_for_service
from svcgw.callbacks.destinationrules import MAX_DESTINATIONS, BadEventTypes, BadRate, TooManyDestinations
from svcgw.config.settings import Settings
from svcgw.errors import NotFound
from svcgw.registry.destinations import DestinationChange, DestinationConfig
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import provision, with_store

TOKEN = "bearer-token-never-in-clear-" + "z" * 8


def checked(settings: Settings, url: str) -> CallbackUrl:
    return check_for_service(url, settings)


def add(settings: Settings, scope: Scope, url: str, **values: object) -> DestinationConfig:
    async def action(store: Store) -> DestinationConfig:
        return await store.add_destination(scope, checked(settings, url), **values)

    return with_store(settings, action)


def update(
    settings: Settings, destination_id: str, change: DestinationChange, account: str | None = None
) -> DestinationConfig:
    async def action(store: Store) -> DestinationConfig:
        return await store.update_destination(destination_id, change, account=account)

    return with_store(settings, action)


def record(redis: Redis, key: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in redis.hgetall(key).items()}


def test_a_destination_is_saved_with_its_own_sealed_secret_and_token(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/primary")
    crm = add(
        settings,
        Scope(account=tenant.account),
        "http://127.0.0.1:9/crm",
        label="CRM",
        event_types=["Msg"],
        rate="20",
        bearer_token=TOKEN,
    )
    assert crm.id.startswith("dst_") and crm.scope == "account" and crm.appid is None
    assert (crm.label, crm.url, crm.event_types, crm.rate, crm.enabled, crm.bearer) == (
        "CRM", "http://127.0.0.1:9/crm", ("Msg",), 20.0, True, True,
    )  # fmt: skip
    assert crm.secret is not None and crm.secret.startswith("whsec_")
    assert TOKEN not in repr(crm) and crm.secret not in repr(crm) and "token" not in crm.as_dict()
    assert "secret" not in crm.as_dict(secret=False)

    stored = redis.hgetall(keys.destination(crm.id))
    vault = TokenVault.from_settings(settings)
    assert TOKEN.encode() not in stored[b"token"] and vault.open(stored[b"token"]) == TOKEN
    assert crm.secret.encode() not in stored[b"secret"] and vault.open(stored[b"secret"]) == crm.secret
    assert b"".join(stored.values()).find(TOKEN.encode()) == -1
    # Its own secret: not the primary's.
    primary = redis.hget(keys.callback_instance(tenant.appid), "secret")
    assert vault.open(primary) != crm.secret

    assert redis.smembers(keys.destinations_account(tenant.account)) == {crm.id.encode()}
    assert record(redis, keys.routes_account(tenant.account)) == {"Msg": crm.id}

    async def read(
        store: Store,
    ) -> tuple[list[DestinationConfig], DestinationConfig, tuple[list[DestinationConfig], list[DestinationConfig]]]:
        return (
            await store.list_destinations(Scope(account=tenant.account)),
            await store.get_destination(crm.id, account=tenant.account),
            await store.destinations_for(tenant.appid),
        )

    listed, shown, applying = with_store(settings, read)
    assert listed == [crm] and shown == crm and applying == ([crm], [])
    # The primary address is as it was.
    assert redis.hget(keys.callback_instance(tenant.appid), "url") == b"http://127.0.0.1:9/primary"


def test_updates_follow_the_primarys_token_rule_and_keep_the_record_in_step(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    scope = Scope(appid=tenant.appid)
    one = add(settings, scope, "http://127.0.0.1:9/a", bearer_token=TOKEN)
    assert (one.scope, one.appid, one.account) == ("instance", tenant.appid, tenant.account)
    routes = keys.routes_instance(tenant.appid)
    assert record(redis, routes) == {"*": one.id}

    same_origin = update(settings, one.id, DestinationChange(url=checked(settings, "http://127.0.0.1:9/b")))
    assert same_origin.bearer is True and same_origin.url == "http://127.0.0.1:9/b"
    assert same_origin.secret == one.secret and same_origin.updated_at >= one.updated_at
    moved = update(settings, one.id, DestinationChange(url=checked(settings, "http://127.0.0.1:10/b")))
    assert moved.bearer is False and not redis.hexists(keys.destination(one.id), "token")
    update(settings, one.id, DestinationChange(bearer_token=TOKEN))
    kept = update(settings, one.id, DestinationChange(url=checked(settings, "http://localhost:11/"), keep_token=True))
    assert kept.bearer is True
    assert update(settings, one.id, DestinationChange(no_bearer=True)).bearer is False

    filtered = update(
        settings, one.id, DestinationChange(event_types=["InstanceOffline", "InstanceRecovered"], rate=0.5)
    )
    assert filtered.event_types == ("InstanceOffline", "InstanceRecovered") and filtered.rate == 0.5
    assert record(redis, routes) == {"InstanceOffline": one.id, "InstanceRecovered": one.id}
    disabled = update(settings, one.id, DestinationChange(enabled=False))
    assert disabled.enabled is False and not redis.exists(routes)
    assert redis.smembers(keys.destinations_instance(tenant.appid)) == {one.id.encode()}
    again = update(settings, one.id, DestinationChange(enabled=True, event_types=[], rate=None, label="archive"))
    assert (again.enabled, again.event_types, again.rate, again.label) == (True, (), None, "archive")
    assert record(redis, routes) == {"*": one.id}

    # A refused value changes nothing.
    before = redis.hgetall(keys.destination(one.id))
    with pytest.raises(BadEventTypes):
        update(settings, one.id, DestinationChange(event_types=["msg"], label="changed"))
    with pytest.raises(BadRate):
        update(settings, one.id, DestinationChange(rate=0))
    assert redis.hgetall(keys.destination(one.id)) == before


def test_rotate_and_remove(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    scope = Scope(account=tenant.account)
    first = add(settings, scope, "http://127.0.0.1:9/a", event_types=["Msg"])
    second = add(settings, scope, "http://127.0.0.1:9/b")

    async def rotate(store: Store) -> DestinationConfig:
        return await store.rotate_destination_secret(first.id, account=tenant.account)

    rotated = with_store(settings, rotate)
    assert rotated.secret != first.secret and rotated.url == first.url
    assert TokenVault.from_settings(settings).open(redis.hget(keys.destination(first.id), "secret")) == rotated.secret

    async def remove(store: Store) -> DestinationConfig:
        return await store.remove_destination(first.id, account=tenant.account)

    removed = with_store(settings, remove)
    assert removed.id == first.id and removed.url == first.url
    assert not redis.exists(keys.destination(first.id))
    assert redis.smembers(keys.destinations_account(tenant.account)) == {second.id.encode()}
    assert record(redis, keys.routes_account(tenant.account)) == {"*": second.id}
    with pytest.raises(NotFound):
        with_store(settings, remove)


def test_another_accounts_destination_is_not_found_like_one_that_does_not_exist(
    settings: Settings, redis: Redis
) -> None:
    owner, other = provision(settings), provision(settings)
    theirs = add(settings, Scope(account=owner.account), "http://127.0.0.1:9/theirs")
    before = redis.hgetall(keys.destination(theirs.id))
    messages = []
    for destination_id in (theirs.id, "dst_0000000000000000", "../../x"):
        for call in (
            lambda s: s.get_destination(destination_id, account=other.account),
            lambda s: s.opened(destination_id, account=other.account),
            lambda s: s.update_destination(destination_id, DestinationChange(enabled=False), account=other.account),
            lambda s: s.rotate_destination_secret(destination_id, account=other.account),
            lambda s: s.remove_destination(destination_id, account=other.account),
        ):
            with pytest.raises(NotFound) as missing:
                with_store(settings, call)
            messages.append(str(missing.value).replace(destination_id[:40], "ID"))
            assert missing.value.what == "destination"
    assert set(messages) == {"no destination 'ID'"}
    assert redis.hgetall(keys.destination(theirs.id)) == before


def test_destinations_of_an_account_are_its_own_and_those_of_the_instances_named(settings: Settings) -> None:
    first = provision(settings)
    other = provision(settings)

    async def second_instance(store: Store) -> str:
        appid = "we_" + other.appid[3:][::-1]
        await store.register_instance(appid, first.account)
        return appid

    second = with_store(settings, second_instance)
    shared = add(settings, Scope(account=first.account), "http://127.0.0.1:9/shared")
    own = add(settings, Scope(appid=first.appid), "http://127.0.0.1:9/own")
    beside = add(settings, Scope(appid=second), "http://127.0.0.1:9/beside")
    add(settings, Scope(account=other.account), "http://127.0.0.1:9/theirs")

    def of(appids: list[str]) -> list[str]:
        return [d.id for d in with_store(settings, lambda s: s.destinations_of(first.account, appids))]

    assert of([first.appid, second]) == [shared.id, own.id, beside.id]  # oldest first
    assert of([first.appid]) == [shared.id, own.id]
    assert of([]) == [shared.id]


def test_a_scope_holds_at_most_its_bound_even_when_saved_at_once(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    scope = Scope(appid=tenant.appid)
    url = checked(settings, "http://127.0.0.1:9/many")

    async def many(store: Store) -> list[object]:
        return await asyncio.gather(
            *(store.add_destination(scope, url, event_types=[f"Type{i}"]) for i in range(MAX_DESTINATIONS + 5)),
            return_exceptions=True,
        )

    results = with_store(settings, many)
    saved = [r for r in results if isinstance(r, DestinationConfig)]
    refused = [r for r in results if isinstance(r, TooManyDestinations)]
    assert len(saved) == MAX_DESTINATIONS and len(refused) == 5, results
    assert "remove one first" in str(refused[0]) and console_codes.destination_kind(refused[0]).code == -40920
    ids = {d.id for d in saved}
    assert {m.decode() for m in redis.smembers(keys.destinations_instance(tenant.appid))} == ids
    # The record names every saved destination, each under its own type: no change was lost.
    routes = record(redis, keys.routes_instance(tenant.appid))
    assert set(routes.values()) == ids and len(routes) == MAX_DESTINATIONS
    # Another scope has a bound of its own.
    assert add(settings, Scope(account=tenant.account), "http://127.0.0.1:9/acc").scope == "account"


def test_concurrent_changes_of_one_scope_leave_a_record_that_matches_the_hashes(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    scope = Scope(account=tenant.account)
    saved = [add(settings, scope, f"http://127.0.0.1:9/{i}") for i in range(6)]

    async def flip(store: Store) -> None:
        await asyncio.gather(
            *(
                store.update_destination(
                    d.id, DestinationChange(enabled=i % 2 == 0, event_types=["Msg"] if i % 3 else [])
                )
                for i, d in enumerate(saved)
            )
        )

    with_store(settings, flip)
    expected: dict[str, list[str]] = {}
    for d in saved:
        data = record(redis, keys.destination(d.id))
        if data["enabled"] == "1":
            expected.setdefault(data["event_types"] or "*", []).append(d.id)
    assert {k: sorted(v.split()) for k, v in record(redis, keys.routes_account(tenant.account)).items()} == {
        k: sorted(v) for k, v in expected.items()
    }


def test_unknown_scopes_are_not_found(settings: Settings) -> None:
    url = checked(settings, "http://127.0.0.1:9/x")
    for scope in (Scope(account="acc_nope"), Scope(appid="we_nope")):
        with pytest.raises(NotFound):
            with_store(settings, lambda s, scope=scope: s.add_destination(scope, url))
        with pytest.raises(NotFound):
            with_store(settings, lambda s, scope=scope: s.list_destinations(scope))


def test_reencrypt_reseals_destination_secrets_and_tokens(
    env: dict[str, str], settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    dest = add(settings, Scope(appid=tenant.appid), "http://127.0.0.1:9/x", bearer_token=TOKEN)
    old_key = settings.encryption_keys[0]
    new_key = Fernet.generate_key().decode()
    rotated = Settings.from_env({**env, "SVCGW_ENCRYPTION_KEYS": f"{new_key},{old_key}"})

    async def reseal(store: Store) -> tuple[int, int]:
        return await store.reseal_tokens(), await store.reseal_secrets()

    tokens, secrets = with_store(rotated, reseal)
    assert tokens >= 1 and secrets >= 1
    only_new = TokenVault([new_key])
    stored = redis.hgetall(keys.destination(dest.id))
    assert only_new.open(stored[b"token"]) == TOKEN and only_new.open(stored[b"secret"]) == dest.secret
