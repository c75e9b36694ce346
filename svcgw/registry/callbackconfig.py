"""Callback configuration in Redis: an account default or one instance's address, secret and token.

Bearer tokens and signing secrets are sealed by the ``TokenVault``, and
nothing here returns a token in clear. The signing secret is opened for its
owner (:meth:`CallbackStore.get_callback`: the spec shows it in the console);
one stored in clear before secrets were sealed is still read
(``svcgw.callbacks.recipients.open_secret``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from redis.exceptions import WatchError

from svcgw.callbacks.destinationrules import check_bearer_token
from svcgw.callbacks.origins import same_origin
from svcgw.callbacks.recipients import Recipient, choose_recipient, new_signing_secret, open_secret
from svcgw.errors import NotFound
from svcgw.registry.accounts import AccountStore
from svcgw.registry.instances import InstanceStore
from svcgw.storage.keys import KeySpace
from svcgw.vault import VaultError

__all__ = ["CallbackConfig", "CallbackStore", "Scope"]


@dataclass(frozen=True)
class Scope:
    """Where a callback configuration lives: an account default or one instance."""

    account: str | None = None
    appid: str | None = None

    def __post_init__(self) -> None:
        if (self.account is None) == (self.appid is None):
            raise ValueError("a scope is either an account or an instance")

    def key(self, keys: KeySpace) -> str:
        """The configuration's hash among ``keys``."""
        if self.appid is not None:
            return keys.callback_instance(self.appid)
        assert self.account is not None
        return keys.callback_account(self.account)


@dataclass(frozen=True)
class CallbackConfig:
    """A callback configuration as its owner sees it; ``secret`` is in clear.

    ``secret`` is None when none is set, or when the stored one cannot be
    opened with the configured keys (rotating it sets a fresh one).
    """

    url: str | None
    secret: str | None = field(repr=False)
    bearer: bool

    def as_dict(self) -> dict[str, object]:
        # The signing secret is the owner's to see (spec: visible in the console);
        # the Bearer token never leaves the vault.
        return {"url": self.url, "secret": self.secret, "bearer": self.bearer}


class CallbackStore(AccountStore, InstanceStore):
    """Callback configuration of accounts and instances: a part of :class:`svcgw.registry.store.Store`."""

    async def get_callback(self, scope: Scope) -> CallbackConfig:
        await self._check_scope(scope)
        data = await self.redis.hgetall(scope.key(self.keys))
        try:
            secret = open_secret(self.vault, data.get("secret") or "") or None
        except VaultError:
            secret = None
        return CallbackConfig(url=data.get("url") or None, secret=secret, bearer=bool(data.get("token")))

    async def set_callback(
        self,
        scope: Scope,
        url: str,
        *,
        bearer_token: str | None = None,
        no_bearer: bool = False,
        keep_token: bool = False,
    ) -> CallbackConfig:
        """Set the address and say what becomes of the Bearer token.

        * ``bearer_token`` (not blank): it replaces the stored token;
        * ``no_bearer``: the stored token is deleted;
        * neither: the stored token is kept while the address keeps its
          origin (scheme, host, port: ``svcgw.callbacks.origins``), and deleted when
          the origin changes, so a token never goes to a host it was not
          set for; ``keep_token`` keeps it anyway (the console's explicit
          choice).

        The old address is read and the new one written in one ``WATCH``
        transaction, so a concurrent change cannot slip in between the
        comparison and the write. The URL must already have passed
        ``svcgw.callbacks.addresses.check_callback_url``. A signing secret is generated
        the first time an address is set.
        """
        check_bearer_token(bearer_token)  # before anything: nothing is saved with a token that cannot be sent
        await self._check_scope(scope)
        if not url:
            return await self.clear_callback(scope)
        mapping = {"url": url, "updated_at": repr(time.time())}
        if bearer_token:
            mapping["token"] = self.vault.seal(bearer_token)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(scope.key(self.keys))
                    old_url = await pipe.hget(scope.key(self.keys), "url")
                    drop = no_bearer or (not bearer_token and not keep_token and not same_origin(old_url, url))
                    pipe.multi()
                    pipe.hset(scope.key(self.keys), mapping=mapping)
                    pipe.hsetnx(scope.key(self.keys), "secret", self.vault.seal(new_signing_secret()))
                    if drop:
                        pipe.hdel(scope.key(self.keys), "token")
                    await pipe.execute()
                    break
                except WatchError:
                    continue
        await self._copy(scope)
        return await self.get_callback(scope)

    async def rotate_secret(self, scope: Scope) -> CallbackConfig:
        """A new signing secret; the old one is not kept, so pending retries use the new one."""
        await self._check_scope(scope)
        await self.redis.hset(scope.key(self.keys), mapping={"secret": self.vault.seal(new_signing_secret())})
        await self._copy(scope)
        return await self.get_callback(scope)

    async def clear_callback(self, scope: Scope) -> CallbackConfig:
        """Remove the address and its token; the secret stays paired with the scope."""
        await self._check_scope(scope)
        await self.redis.hdel(scope.key(self.keys), "url", "token")
        await self._copy(scope)
        return await self.get_callback(scope)

    async def destination(self, appid: str) -> Recipient | None:
        account = await self.owner(appid)
        if account is None:
            raise NotFound(f"no instance {appid!r}", what="instance")
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.callback_instance(appid))
            pipe.hgetall(self.keys.callback_account(account))
            own, default = await pipe.execute()
        return choose_recipient(own, default)

    async def _copy(self, scope: Scope) -> None:
        """After a change: the copy the delivery claim reads on the instance's shard(s) (svcgw.registry.copies)."""
        if self.copies is not None:
            await self.copies.callback(scope)

    async def _check_scope(self, scope: Scope) -> None:
        if scope.appid is not None:
            await self.get_instance(scope.appid)
        elif scope.account is not None:
            await self.get_account(scope.account)
