"""``svcgw secrets``: stored tokens and signing secrets re-encrypted under the first key."""

from __future__ import annotations

from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.cli.commands import ok
from tests.conftest import provision


def test_secrets_reencrypt(env: dict[str, str], settings: Settings) -> None:
    provision(settings, url="http://127.0.0.1:9/hook", bearer="t0ken")
    # One Bearer token and one receiver token; one signing secret.
    assert ok(env, "secrets", "reencrypt") == {"resealed": 2, "secrets": 1}


def test_secrets_reencrypt_seals_a_signing_secret_stored_in_clear(
    env: dict[str, str], settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/hook")
    clear = "whsec_" + "c" * 43  # as stored before signing secrets were sealed
    redis.hset(keys.callback_instance(tenant.appid), "secret", clear)
    assert ok(env, "callback", "show", "--appid", tenant.appid)["secret"] == clear
    assert ok(env, "secrets", "reencrypt")["secrets"] == 1
    sealed = redis.hget(keys.callback_instance(tenant.appid), "secret")
    assert sealed is not None and clear.encode() not in sealed
    assert TokenVault.from_settings(settings).open(sealed) == clear
    assert ok(env, "callback", "show", "--appid", tenant.appid)["secret"] == clear
