"""How an account signs in to the console: its login, its password hash, the epoch of its sessions.

A login is an e-mail address or a name, unique among accounts without regard
to case: ``Dev@Example.com`` and ``dev@example.com`` are one login. It is
stored as written on the account (``login``) and claimed in
``keys.login(<normalised>)``, which holds the account id; the claim is made
when the account is created (``Store.create_account``).

The password is kept only as its argon2id hash (``svcgw.registry.passwords``) in the
account's hash. Setting it and ending the account's console sessions are one
script (``lua/account_sessions.lua``): every session remembers the account's
``session_epoch`` of when it was made, and one made before the current epoch
is ended at its next request (``receiver.console.session``). Raising the
epoch is "sign out everywhere"; a password change raises it too but keeps the
session that made the change. Setting a password also records the epoch it
was set at as ``password_epoch``: the password's *version*, which a device
cookie carries and must match at sign-in, so a new password retires every
device cookie made before it.

Errors::

    LoginRejected (a ValueError)   a login that breaks the rules below
    LoginTaken    (a ValueError)   another account has that login already
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.exceptions import WatchError

from svcgw.errors import Rejected
from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["MAX_LOGIN_LENGTH", "Credentials", "Login", "LoginRejected", "LoginTaken", "normalise_login"]

MAX_LOGIN_LENGTH = 254  # the longest e-mail address a mail server accepts
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{2,63}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")


class LoginRejected(Rejected, ValueError):
    """A login that is neither an e-mail address nor a name of 3 to 64 letters, digits, '.', '_' or '-'."""


class LoginTaken(Rejected, ValueError):
    """Another account signs in with this login already."""

    def __init__(self, login: str) -> None:
        super().__init__(f"the login {login.strip()!r} belongs to another account")


def normalise_login(login: str) -> str:
    """The form two spellings of one login share (NFKC, case-folded); ``LoginRejected`` for a bad one."""
    text = unicodedata.normalize("NFKC", login.strip()).casefold()
    if not text or len(text) > MAX_LOGIN_LENGTH or not text.isprintable():
        raise LoginRejected(f"a login has 1 to {MAX_LOGIN_LENGTH} printable characters")
    if "@" in text:
        if not _EMAIL.fullmatch(text):
            raise LoginRejected(f"{login.strip()!r} is not an e-mail address (name@example.com)")
    elif not _NAME.fullmatch(text):
        raise LoginRejected(
            "a login is an e-mail address, or a name of 3 to 64 letters, digits, '.', '_' and '-' "
            "starting with a letter or digit"
        )
    return text


class Login(NamedTuple):
    """What signing in with a login reads: its account, password hash ('' when none) and password's version."""

    account: str
    password_hash: str
    # The session epoch the password was set at; '0' for one set before versions were kept.
    password_version: str


class Credentials:
    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        # A client created with decode_responses=True (text), as the store's.
        self.redis: Any = redis
        self.keys = keys
        self._sessions = register(redis, "account_sessions")

    async def lookup(self, login: str) -> Login | None:
        """The account of a login, its password hash and the password's version; None for a login nobody has."""
        try:
            normalised = normalise_login(login)
        except LoginRejected:
            return None
        account = await self.redis.get(self.keys.login(normalised))
        if not account:
            return None
        stored, version = await self.redis.hmget(self.keys.account(account), ["password", "password_epoch"])
        return Login(str(account), str(stored or ""), str(version or "0"))

    async def login_of(self, account: str) -> str | None:
        login = await self.redis.hget(self.keys.account(account), "login")
        return str(login) if login else None

    async def has_password(self, account: str) -> bool:
        return bool(await self.redis.hexists(self.keys.account(account), "password"))

    async def set_password(self, account: str, password_hash: str, *, keep_session: str | None = None) -> int:
        """Store the hash and end every console session of the account but ``keep_session`` (its Redis key).

        Returns the new session epoch, which is also the new password's version
        (``Login.password_version``); ``LookupError`` if there is no such account.
        """
        return await self._run(account, password_hash, keep_session)

    async def end_sessions(self, account: str, *, keep_session: str | None = None) -> int:
        """Sign out everywhere: end every console session of the account (but ``keep_session``)."""
        return await self._run(account, "", keep_session)

    async def replace_hash(self, account: str, old_hash: str, new_hash: str) -> None:
        """Store a hash made with today's parameters, unless the password changed meanwhile."""
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(self.keys.account(account))
            if await pipe.hget(self.keys.account(account), "password") != old_hash:
                return
            pipe.multi()
            pipe.hset(self.keys.account(account), "password", new_hash)
            try:
                await pipe.execute()
            except WatchError:
                return  # the password changed meanwhile: the new one stands

    async def _run(self, account: str, password_hash: str, keep_session: str | None) -> int:
        # No session to keep: a name that never exists, so the script's KEYS stay key names.
        kept = keep_session or self.keys.console_session("")
        epoch = int(await self._sessions(keys=[self.keys.account(account), kept], args=[password_hash]))
        if epoch < 0:
            raise LookupError(f"no account {account!r}")
        return epoch
