"""Console sessions and CSRF protection.

Signing in, with a login and password or with an API key, creates a
session: a random id whose SHA-256 names a Redis hash
(``svcgw:console:session:<digest>``: account, the id of the key used or ''
for a password, the account's session epoch, the CSRF token, a pending
flash message) with a TTL of :data:`SESSION_SECONDS`. The browser holds
only the id, in a cookie signed with itsdangerous (``HttpOnly``,
``SameSite=Strict``, ``Path=/console``, ``Secure`` whenever the console is
reached over https), so a cookie can be neither forged nor replayed after
sign-out: signing out deletes the hash, revoking the key ends its sessions
at their next request, and so does raising the account's session epoch
(sign out everywhere, a new password: ``svcgw.registry.credentials``).

CSRF: every session has its own random token. A change made from a page
carries it as the form field ``csrf_token``; a change made through the JSON
API carries it in the ``X-CSRF-Token`` header. Both are compared in constant
time. The sign-in form, used before any session exists, is protected the
same way by a short-lived signed cookie of its own (double submit); the
JSON sign-in accepts only ``application/json``, which a cross-site form
cannot send. Requests to the JSON API may instead carry the API key itself
(``Svc-Key``, ``X-Svc-Key`` or ``Authorization: Bearer``, read as the
gateway reads them: ``receiver.http.presented_key``; headers carrying
different keys are refused with 401): such a request has no ambient
credential to abuse, so it needs no CSRF token.

A password sign-in also leaves a device cookie (OWASP's "device cookies"):
``svcgw_device_<account digest>``, signed, holding the account, a random
device id and the version of the password that signed in (the account's
``password_epoch``: ``svcgw.registry.credentials``), for :data:`DEVICE_SECONDS`. A
browser that shows it is counted in a failure window of its own instead of
the login's (``receiver.console.failures``), so someone who only knows the
login and fills its window does not lock out a browser that signed in
before; a browser without it still meets the login's limit. A new password
(``svcgw accounts set-password``, an invitation, the account page) retires
every device cookie made before it: nothing of them is kept on the server,
so the version is what tells them apart, and a cookie of another version
(or of none, made before versions were kept) counts as no cookie. The
browser that changes the password gets a new one at once. A device cookie
also opens a lane of sign-ins of its own to that browser
(``receiver.console.signin``), which a flood of sign-ins without one cannot
fill.

The signing key is derived from the first encryption key
(``SVCGW_ENCRYPTION_KEYS``, or the generated one in the state directory),
so every server process of one deployment accepts the same cookies.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from itsdangerous import BadSignature, URLSafeTimedSerializer
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import Response

from svcgw.config.settings import Settings
from svcgw.digests import digest
from svcgw.registry.store import Store
from svcgw.vault import load_or_create_key

from .signin import Lane

__all__ = [
    "COOKIE",
    "CSRF_FIELD",
    "CSRF_HEADER",
    "DEVICE_SECONDS",
    "LOGIN_COOKIE",
    "PATH",
    "Session",
    "Sessions",
]

PATH = "/console"
COOKIE = "svcgw_console"
LOGIN_COOKIE = "svcgw_console_login"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 12 * 3600
LOGIN_SECONDS = 3600
DEVICE_COOKIE = "svcgw_device"
DEVICE_SECONDS = 365 * 86400
DEVICE_COOKIES_READ = 8  # of one request, to find its lane: one per account the browser signed in to


@dataclass(frozen=True)
class Session:
    id_digest: str
    account: str
    key_id: str  # '' for a session signed in with the password
    csrf: str = ""
    # Signed in with the API key on this very request (JSON API): no cookie, no CSRF needed.
    direct: bool = False
    # The session's hash in Redis ('' for a request signed with the API key itself).
    redis_key: str = ""

    def csrf_ok(self, presented: str | None) -> bool:
        if self.direct:
            return True
        return bool(presented) and hmac.compare_digest(self.csrf.encode(), (presented or "").encode())


def _signed(serializer: URLSafeTimedSerializer, request: Request, name: str, max_age: int) -> Any:
    """What the cookie ``name`` of ``request`` holds, if ``serializer`` signed it within ``max_age``; else None."""
    raw = request.cookies.get(name)
    if not raw:
        return None
    try:
        return serializer.loads(raw, max_age=max_age)
    except BadSignature:
        return None


def _device_cookie(account: str) -> str:
    """One device cookie per account, named by its digest."""
    return f"{DEVICE_COOKIE}_{digest(account)[:16]}"


def signing_key(settings: Settings) -> bytes:
    base = settings.encryption_keys[0] if settings.encryption_keys else load_or_create_key(settings.state_dir)
    return hmac.new(base.encode("utf-8"), b"svcgw console session cookie v1", hashlib.sha256).digest()


class Sessions:
    def __init__(self, settings: Settings, redis: Redis, store: Store) -> None:
        # ``redis`` decodes responses (text); the store's client is the same kind.
        self.redis: Any = redis
        self.store = store
        self.keys = store.keys  # shard 0's: sessions live there
        self.https = settings.public_url.lower().startswith("https://")
        key = signing_key(settings)
        self._cookie = URLSafeTimedSerializer(key, salt="svcgw-console-session")
        self._login = URLSafeTimedSerializer(key, salt="svcgw-console-login")
        self._device = URLSafeTimedSerializer(key, salt="svcgw-console-device")

    # --- signing in and out --------------------------------------------------
    async def key_account(self, presented: str) -> tuple[str, str] | None:
        """(account, key id) of a valid API key, else None."""
        account = await self.store.authenticate(presented.strip())
        if account is None:
            return None
        key_id = await self.redis.get(self.keys.api_key_lookup(digest(presented.strip())))
        if not key_id:
            return None
        return account, str(key_id)

    async def create(
        self, account: str, key_id: str = "", epoch: str | None = None, redis: Redis | None = None
    ) -> tuple[str, Session]:
        """A new session (``key_id`` '' for the password); returns the signed cookie value and the session.

        ``epoch``: the account's session epoch, read by the caller before this (the sign-in's look-up);
        None to read it here. ``redis``: another client of shard 0 than this one's, on the loop this runs on
        (the known-browser lane's: ``receiver.console.laneloop``).
        """
        client: Any = redis or self.redis
        session_id = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        id_digest = digest(session_id)
        key = self.keys.console_session(id_digest)
        # Read first: an epoch raised between this read and the write ends the new session too,
        # which is the safe way round (so is an epoch read earlier still, by the caller).
        if epoch is None:
            epoch = await client.hget(self.keys.account(account), "session_epoch") or "0"
        async with client.pipeline(transaction=True) as pipe:
            pipe.hset(
                key,
                mapping={
                    "account": account,
                    "key_id": key_id,
                    "epoch": epoch,
                    "csrf": csrf,
                    "created_at": repr(time.time()),
                },
            )
            pipe.expire(key, SESSION_SECONDS)
            await pipe.execute()
        return self._cookie.dumps(session_id), Session(id_digest, account, key_id, csrf, redis_key=key)

    async def end(self, session: Session) -> None:
        if not session.direct:
            await self.redis.delete(self.keys.console_session(session.id_digest))

    # --- reading a request -----------------------------------------------------
    async def from_cookie(self, request: Request) -> Session | None:
        session_id = _signed(self._cookie, request, COOKIE, SESSION_SECONDS)
        if not isinstance(session_id, str):
            return None
        id_digest = digest(session_id)
        account, key_id, csrf, epoch = await self.redis.hmget(
            self.keys.console_session(id_digest), ["account", "key_id", "csrf", "epoch"]
        )
        if not account or not csrf:
            return None
        if not await self._still_valid(account, key_id or "", epoch):
            await self.redis.delete(self.keys.console_session(id_digest))
            return None
        return Session(id_digest, account, key_id or "", csrf, redis_key=self.keys.console_session(id_digest))

    async def from_key(self, presented: str) -> Session | None:
        found = await self.key_account(presented)
        if found is None:
            return None
        return Session("", found[0], found[1], direct=True)

    async def _still_valid(self, account: str, key_id: str, epoch: str | None) -> bool:
        """Not ended by a newer session epoch, and (signed in with a key) the key is the account's, unrevoked."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.account(account), "session_epoch")
            if key_id:
                pipe.hmget(self.keys.api_key(key_id), ["account", "revoked_at"])
            found = await pipe.execute()
        if int(epoch or 0) < int(found[0] or 0):
            return False
        if key_id:
            owner, revoked = found[1]
            return bool(owner == account and not revoked)
        return True

    # --- flash messages ------------------------------------------------------------
    async def flash(self, session: Session, message: dict[str, object]) -> None:
        if not session.direct:
            await self.redis.hset(self.keys.console_session(session.id_digest), "flash", orjson.dumps(message))

    async def take_flash(self, session: Session) -> dict[str, Any] | None:
        if session.direct:
            return None
        key = self.keys.console_session(session.id_digest)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(key, "flash")
            pipe.hdel(key, "flash")
            raw, _ = await pipe.execute()
        if not raw:
            return None
        value = orjson.loads(raw)
        return value if isinstance(value, dict) else None

    # --- cookies ---------------------------------------------------------------------
    def secure(self, request: Request) -> bool:
        return self.https or request.url.scheme == "https"

    def set_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(
            COOKIE,
            value,
            max_age=SESSION_SECONDS,
            path=PATH,
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )

    def clear_cookie(self, request: Request, response: Response) -> None:
        response.delete_cookie(COOKIE, path=PATH, secure=self.secure(request), httponly=True, samesite="strict")

    # --- device cookies -----------------------------------------------------------------
    def device_of(self, request: Request) -> Callable[[str, str], str | None]:
        """For an account and its password's version, the device id of a valid device cookie on ``request``, or None.

        Valid: signed by this deployment within :data:`DEVICE_SECONDS`, for
        that account, and made under that version of its password.
        """

        def of(account: str, password_version: str) -> str | None:
            value = _signed(self._device, request, _device_cookie(account), DEVICE_SECONDS)
            if not (isinstance(value, list) and len(value) == 3 and all(isinstance(part, str) for part in value)):
                return None
            owner, device, version = value
            # The signature makes the cookie unforgeable; the version is no secret, only compared.
            return str(device) if owner == account and version == password_version else None

        return of

    def lane_of(self, request: Request) -> Lane | None:
        """What a device cookie this service signed on ``request`` says (the first by name), or None.

        Only the signature and the name are checked here, no more than :data:`DEVICE_COOKIES_READ`
        cookies: it says which lane of sign-ins the browser may use (``receiver.console.signin``),
        which then takes it only for that account's own login, under the password version it carries.
        """
        names = sorted(name for name in request.cookies if name.startswith(DEVICE_COOKIE + "_"))
        for name in names[:DEVICE_COOKIES_READ]:
            value = _signed(self._device, request, name, DEVICE_SECONDS)
            if not (isinstance(value, list) and len(value) == 3 and all(isinstance(part, str) for part in value)):
                continue
            if name == _device_cookie(value[0]):
                return Lane(*value)
        return None

    def set_device_cookie(self, request: Request, response: Response, account: str, password_version: str) -> None:
        """A new device id for this browser and account (after a right password), under that password's version."""
        response.set_cookie(
            _device_cookie(account),
            self._device.dumps([account, secrets.token_urlsafe(24), password_version]),
            max_age=DEVICE_SECONDS,
            path=PATH,
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )

    # --- the sign-in form's own CSRF token -------------------------------------------
    def login_token(self, request: Request) -> tuple[str, bool]:
        """The token for the sign-in form, and whether the cookie that pairs with it must be (re)set."""
        raw = request.cookies.get(LOGIN_COOKIE)
        if raw:
            try:
                token = self._login.loads(raw, max_age=LOGIN_SECONDS // 2)
                if isinstance(token, str):
                    return token, False
            except BadSignature:
                pass
        return secrets.token_urlsafe(32), True

    def set_login_cookie(self, request: Request, response: Response, token: str) -> None:
        response.set_cookie(
            LOGIN_COOKIE,
            self._login.dumps(token),
            max_age=LOGIN_SECONDS,
            path=PATH,
            secure=self.secure(request),
            httponly=True,
            samesite="strict",
        )

    def login_csrf_ok(self, request: Request, presented: str | None) -> bool:
        raw = request.cookies.get(LOGIN_COOKIE)
        if not raw or not presented:
            return False
        try:
            token = self._login.loads(raw, max_age=LOGIN_SECONDS)
        except BadSignature:
            return False
        return isinstance(token, str) and hmac.compare_digest(token.encode(), presented.encode())
