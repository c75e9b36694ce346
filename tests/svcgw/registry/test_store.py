"""Signing secrets in ``Store``: sealed at rest, shown in clear, older clear ones still read and then sealed."""

from __future__ import annotations

from cryptography.fernet import Fernet
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.registry.store import CallbackConfig, Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import provision, with_store

LEGACY = "whsec_" + "L" * 43  # a secret stored in clear, before secrets were sealed


def test_a_secret_is_sealed_at_rest_and_shown_in_clear(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/hook")
    scope = Scope(appid=tenant.appid)
    vault = TokenVault.from_settings(settings)

    async def read(store: Store) -> CallbackConfig:
        return await store.get_callback(scope)

    def stored() -> bytes:
        value = redis.hget(keys.callback_instance(tenant.appid), "secret")
        assert value is not None
        return value

    shown = with_store(settings, read).secret
    assert shown.startswith("whsec_") and shown.encode() not in stored()
    assert vault.open(stored()) == shown

    async def rotate(store: Store) -> CallbackConfig:
        return await store.rotate_secret(scope)

    rotated = with_store(settings, rotate).secret
    assert rotated != shown and rotated.encode() not in stored() and vault.open(stored()) == rotated


def test_a_secret_stored_in_clear_is_still_read_and_reencrypt_seals_it(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/hook")
    own = keys.callback_instance(tenant.appid)
    redis.hset(own, "secret", LEGACY)
    redis.hset(keys.callback_account(tenant.account), mapping={"url": "http://127.0.0.1:9/default"})

    async def read(store: Store) -> str | None:
        return (await store.get_callback(Scope(appid=tenant.appid))).secret

    assert with_store(settings, read) == LEGACY

    async def reseal(store: Store) -> int:
        return await store.reseal_secrets()

    assert with_store(settings, reseal) == 1  # the account default has no secret yet
    sealed = redis.hget(own, "secret")
    assert sealed is not None and not sealed.startswith(b"whsec_")
    assert TokenVault.from_settings(settings).open(sealed) == LEGACY
    assert with_store(settings, read) == LEGACY

    # After a key rotation, sealed secrets are resealed under the new first key.
    new_key = Fernet.generate_key().decode()
    keys_now = f"{new_key},{settings.encryption_keys[0]}"
    rotated = Settings.from_env({"SVCGW_REDIS_URL": settings.redis_url or "", "SVCGW_ENCRYPTION_KEYS": keys_now})
    assert with_store(rotated, reseal) == 1
    resealed = redis.hget(own, "secret")
    assert resealed is not None and TokenVault([new_key]).open(resealed) == LEGACY


def test_a_secret_no_key_opens_is_not_shown(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/hook")
    redis.hset(keys.callback_instance(tenant.appid), "secret", TokenVault([Fernet.generate_key().decode()]).seal("x"))

    async def read(store: Store) -> CallbackConfig:
        return await store.get_callback(Scope(appid=tenant.appid))

    config = with_store(settings, read)
    assert config.secret is None and config.url == "http://127.0.0.1:9/hook"


# --- the Bearer token follows the address's origin ---------------------------------------------


def _bearer_after(settings: Settings, first: str, second: str, **options: object) -> bool:
    tenant = provision(settings, url=first, bearer="tok-" + "x" * 20)

    async def move(store: Store) -> bool:
        return (await store.set_callback(Scope(appid=tenant.appid), second, **options)).bearer

    return with_store(settings, move)


def test_the_token_stays_while_the_origin_stays(settings: Settings) -> None:
    assert _bearer_after(settings, "https://hooks.example.com/a", "https://hooks.example.com/b?x=1")
    # Default ports and host case are the same origin.
    assert _bearer_after(settings, "https://Hooks.Example.com/a", "https://hooks.example.com:443/b")
    assert _bearer_after(settings, "http://hooks.example.com:80/a", "http://HOOKS.example.com/a")


def test_the_token_is_dropped_when_the_origin_changes(settings: Settings, redis: Redis) -> None:
    assert not _bearer_after(settings, "https://hooks.example.com/a", "https://other.example.com/a")
    assert not _bearer_after(settings, "https://hooks.example.com/a", "http://hooks.example.com/a")
    assert not _bearer_after(settings, "https://hooks.example.com/a", "https://hooks.example.com:8443/a")


def test_a_token_set_with_the_new_origin_or_kept_explicitly_stays(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="https://hooks.example.com/a", bearer="old-token-0123456789")
    scope = Scope(appid=tenant.appid)
    vault = TokenVault.from_settings(settings)

    async def move(store: Store) -> None:
        await store.set_callback(scope, "https://new.example.com/a", bearer_token="new-token-0123456789")

    with_store(settings, move)
    stored = redis.hget(keys.callback_instance(tenant.appid), "token")
    assert stored is not None and vault.open(stored) == "new-token-0123456789"
    assert _bearer_after(settings, "https://hooks.example.com/a", "https://new.example.com/a", keep_token=True)
