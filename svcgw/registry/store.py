"""Accounts, API keys, instances and callback configuration in Redis: :class:`Store`.

The gateway, the console and the CLI all manage these through ``Store``; the
key names live in ``svcgw.storage.keys``. Each concept has a module of its own, and
``Store`` is all of them on one client and vault:

* :mod:`svcgw.registry.accounts`: accounts, logins, denied operations;
* :mod:`svcgw.registry.apikeys`: API keys;
* :mod:`svcgw.registry.instances`: instances and their receiver tokens;
* :mod:`svcgw.registry.callbackconfig`: callback addresses, signing secrets, Bearer tokens;
* :mod:`svcgw.registry.destinations`: further destinations, beside the primary address;
* :mod:`svcgw.registry.base`: what they share (the client, names and vault, ids).

What does not exist raises ``svcgw.errors.NotFound``, whose ``what`` names the thing.

Here, too: re-sealing every stored secret under the vault's first key
(:meth:`Store.reseal_tokens`, :meth:`Store.reseal_secrets`).
"""

from __future__ import annotations

from svcgw.callbacks.recipients import seal_secret
from svcgw.registry.accounts import Account, Denials, OperatorDenied, normalise_operation
from svcgw.registry.apikeys import MAX_LABEL_LENGTH, ApiKey, KeyStore, check_label
from svcgw.registry.callbackconfig import CallbackConfig, CallbackStore, Scope
from svcgw.registry.destinations import DestinationStore
from svcgw.registry.instances import Instance

__all__ = [
    "MAX_LABEL_LENGTH",
    "Account",
    "ApiKey",
    "CallbackConfig",
    "Denials",
    "Instance",
    "OperatorDenied",
    "Scope",
    "Store",
    "check_label",
    "normalise_operation",
]


class Store(KeyStore, CallbackStore, DestinationStore):
    """Accounts, API keys, instances, callback configuration and further destinations on one client and vault."""

    async def reseal_tokens(self) -> int:
        """Re-encrypt every stored Bearer and receiver token under the first key."""
        count = await self.reseal_destinations("token")
        for account_id in await self.redis.smembers(self.keys.accounts):
            count += await self._reseal_callback(Scope(account=account_id), "token")
        for appid in await self.redis.smembers(self.keys.instances):
            count += await self._reseal_callback(Scope(appid=appid), "token")
            count += await self._reseal(self.keys.instance(appid), "receiver_token")
        return count

    async def reseal_secrets(self) -> int:
        """Seal every stored signing secret under the first key: those in clear from before, and sealed ones."""
        count = await self.reseal_destinations("secret")
        for account_id in await self.redis.smembers(self.keys.accounts):
            count += await self._reseal_callback(Scope(account=account_id), "secret", clear_ok=True)
        for appid in await self.redis.smembers(self.keys.instances):
            count += await self._reseal_callback(Scope(appid=appid), "secret", clear_ok=True)
        return count

    async def _reseal_callback(self, scope: Scope, name: str, *, clear_ok: bool = False) -> int:
        """:meth:`_reseal` of a callback hash, and its copies on the shards that read it (svcgw.registry.copies)."""
        count = await self._reseal(scope.key(self.keys), name, clear_ok=clear_ok)
        if count:
            await self._copy(scope)
        return count

    async def _reseal(self, key: str, name: str, *, clear_ok: bool = False) -> int:
        stored = await self.redis.hget(key, name)
        if not stored:
            return 0
        resealed = seal_secret(self.vault, stored) if clear_ok else self.vault.reseal(stored)
        await self.redis.hset(key, name, resealed)
        return 1
