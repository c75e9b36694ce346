"""A new instance by QR login, and the instance actions, done by the console for the signed-in account.

Every step is a gateway call made with :meth:`receiver.gateway.Gateway.invoke`
for the account: the same checks as a call with one of its keys (rate limit,
controlled operations, ownership, device quota, ``device/create``
registration, ``long/start`` recording the forward address, the remembered
proxy) and the same operation code. Nothing here talks to the capability
layer or writes those records itself.

The QR login (spec: "Login and QR") is a :class:`QrLogin`, kept in a Redis
hash owned by the account (``svcgw.storage.keys.console_login_attempt``) for
:data:`ATTEMPT_SECONDS`, so a plain page refresh, a second tab or the JSON API
carry it on. Its stages:

* ``closing``: a re-login that needs a new scan first stopped the long
  connection (``long/stop``); ``getQr`` waits for the ``GapClosed`` that
  follows (read from the instance's callback log), at most
  :data:`GAP_WAIT_SECONDS`;
* ``qr``: a code is shown; each :meth:`QrFlow.advance` polls ``checkQr``
  and a code older than its ``refreshInterval`` that nobody scanned is
  replaced by a new one;
* ``done``: ``checkQr`` said 2 and ``long/start`` went through; the instance
  is online;
* ``failed``: ``long/start`` was refused; the message says why.

The attempt's record, the answers of its steps and their errors
(``FlowError``, ``AttemptGone``) are in :mod:`.qrattempt`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import orjson
from redis.asyncio import Redis

from receiver.gateway import codes as gateway_codes
from svcgw.intake.calllog import read_log
from svcgw.liveness import transitions
from svcgw.registry.store import Scope
from svcgw.shards.routing import instance_shard

from .qrattempt import ATTEMPT_SECONDS, BUSINESS_READ, DEVICE, GAP_WAIT_SECONDS, image_data_url
from .qrattempt import AttemptGone as AttemptGone
from .qrattempt import FlowError as FlowError
from .qrattempt import Outcome as Outcome
from .qrattempt import QrLogin as QrLogin
from .qrattempt import action_needed as action_needed

if TYPE_CHECKING:
    from ..gateway import Gateway
    from ..services import Services

__all__ = ["QrFlow"]


class QrFlow:
    """The QR login and the instance actions, each step a gateway call for the account."""

    def __init__(self, gateway: Gateway, services: Services) -> None:
        self.gateway = gateway
        self.settings = services.settings
        self.store = services.store
        self.text: Redis = services.text_redis
        self.keys = services.keys  # shard 0's: accounts' QR logins live there
        # By shard index: an instance's log and liveness fields are on its shard (svcgw.shards.routing).
        self.shards = services.shards
        self.shard_texts = services.text_shards

    # --- gateway calls -------------------------------------------------------------------
    async def call(
        self, account: str, module: str, action: str, body: Mapping[str, Any], *, inherits_address: bool = False
    ) -> Outcome:
        response = await self.gateway.invoke(
            account, module, action, orjson.dumps(body), inherits_address=inherits_address
        )
        return Outcome.of(f"{module}/{action}", response)

    async def _required(
        self, account: str, module: str, action: str, body: Mapping[str, Any], *, inherits_address: bool = False
    ) -> Outcome:
        outcome = await self.call(account, module, action, body, inherits_address=inherits_address)
        if not outcome.ok:
            raise FlowError(outcome)
        return outcome

    # --- attempts ----------------------------------------------------------------------------
    async def _save(self, account: str, attempt: QrLogin) -> None:
        key = self.keys.console_login_attempt(account, attempt.id)
        fields: dict[Any, Any] = attempt.fields()
        async with self.text.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.expire(key, ATTEMPT_SECONDS)
            await pipe.execute()

    async def get(self, account: str, attempt_id: str) -> QrLogin:
        if not attempt_id or len(attempt_id) > 64:
            raise AttemptGone(attempt_id)
        fields = cast(dict[str, str], await self.text.hgetall(self.keys.console_login_attempt(account, attempt_id)))
        if not fields.get("id"):
            raise AttemptGone(attempt_id)
        return QrLogin.load(fields)

    # --- a new instance ------------------------------------------------------------------------
    async def begin(self, account: str, *, proxy: str = "", callback_url: str = "") -> QrLogin:
        """``device/create``, then the first QR code of its login."""
        await self._forward_address(account, None, callback_url)  # refuse before a device is made
        created = await self._required(account, "device", "create", {"appid": "", **DEVICE})
        appid = created.data.get("appid") if isinstance(created.data, dict) else None
        if not isinstance(appid, str) or not appid:
            raise FlowError(Outcome("device/create", 200, -1, "device/create answered without an appid"))
        attempt = QrLogin(
            id=secrets.token_urlsafe(12), appid=appid, stage="qr", proxy=proxy, callback_url=callback_url, created=True
        )
        await self._issue(account, attempt)
        return attempt

    async def begin_existing(self, account: str, appid: str, *, proxy: str = "", callback_url: str = "") -> QrLogin:
        """A new QR login of an instance the account has: ``long/stop``, its ``GapClosed``, then ``getQr``.

        ``long/stop`` is what the gateway checks ownership on (-40404); an
        answer of "long connection closed" means nothing is left to close.
        """
        stopped = await self.call(account, "long", "stop", {"appid": appid})
        if stopped.by_gateway:
            raise FlowError(stopped)
        attempt = QrLogin(
            id=secrets.token_urlsafe(12),
            appid=appid,
            stage="closing",
            proxy=proxy,
            callback_url=callback_url,
            stopped_at=time.time(),
        )
        if not stopped.ok:
            # Already closed (or refused for a reason getQr will tell): no GapClosed to wait for.
            attempt.stopped_at = time.time() - GAP_WAIT_SECONDS
        await self._after_stop(account, attempt)
        return attempt

    async def _after_stop(self, account: str, attempt: QrLogin) -> None:
        waited = time.time() - attempt.stopped_at
        if waited < GAP_WAIT_SECONDS and not await self._gap_closed_since(attempt.appid, attempt.stopped_at):
            await self._save(account, attempt)
            return
        attempt.stage = "qr"
        await self._issue(account, attempt)

    async def _gap_closed_since(self, appid: str, since: float) -> bool:
        raw, keys = await instance_shard(self.shards, appid)
        entries = await read_log(raw, keys, self.settings, appid, since_seconds=time.time() - since + 1, limit=50)
        for entry in entries:
            if entry.received_at < since:
                continue
            try:
                envelope = orjson.loads(entry.body)
            except orjson.JSONDecodeError:
                continue
            if isinstance(envelope, dict) and envelope.get("event_type") == "GapClosed":
                return True
        return False

    async def _issue(self, account: str, attempt: QrLogin) -> None:
        """``getQr``: a new code (and login session) for the attempt."""
        outcome = await self.call(account, "login", "getQr", {"appid": attempt.appid, "proxy": attempt.proxy})
        if not outcome.ok:
            attempt.error = outcome.describe()
            await self._save(account, attempt)
            raise FlowError(outcome)
        data = outcome.data if isinstance(outcome.data, dict) else {}
        image = image_data_url(data.get("imageBase64"))
        session_id = data.get("uuid")
        if image is None or not isinstance(session_id, str) or not session_id:
            attempt.error = "login/getQr answered without a usable QR image or uuid"
            await self._save(account, attempt)
            raise FlowError(Outcome("login/getQr", 200, -1, "the answer had no usable QR image or uuid"))
        interval = data.get("refreshInterval")
        attempt.uuid, attempt.image, attempt.issued_at = session_id, image, time.time()
        attempt.refresh_interval = interval if isinstance(interval, int) and not isinstance(interval, bool) else 0
        attempt.status, attempt.error = -1, ""  # a new code: nobody has scanned it yet
        await self._save(account, attempt)

    # --- polling ---------------------------------------------------------------------------------
    async def advance(self, account: str, attempt_id: str) -> QrLogin:
        """One look at the login: the page's refresh and the API's poll both come here."""
        attempt = await self.get(account, attempt_id)
        if attempt.stage == "closing":
            await self._after_stop(account, attempt)
            return attempt
        if attempt.stage != "qr":
            return attempt
        outcome = await self.call(
            account, "login", "checkQr", {"appid": attempt.appid, "proxy": attempt.proxy, "uuid": attempt.uuid}
        )
        if await self._refused(account, attempt, outcome):
            return attempt
        status = outcome.data.get("status") if isinstance(outcome.data, dict) else None
        attempt.status = status if isinstance(status, int) and not isinstance(status, bool) else -1
        attempt.error = ""
        stale = attempt.refresh_interval > 0 and time.time() - attempt.issued_at >= attempt.refresh_interval
        if stale and attempt.status == -1:
            # Still unscanned (asked first, so a scan in the last moment is not thrown away): a new code.
            await self._issue(account, attempt)
            return attempt
        await self._save(account, attempt)
        if attempt.status == 2:
            await self._finish(account, attempt)
        return attempt

    async def submit_code(self, account: str, attempt_id: str, code: str) -> QrLogin:
        """``submitQrCode`` with the six-digit code, then a poll."""
        attempt = await self.get(account, attempt_id)
        code = code.strip()
        if not (len(code) == 6 and code.isdigit()):
            attempt.error = "The code is six digits."
            await self._save(account, attempt)
            return attempt
        body = {"appid": attempt.appid, "code": code, "proxy": attempt.proxy, "uuid": attempt.uuid}
        outcome = await self.call(account, "login", "submitQrCode", body)
        if await self._refused(account, attempt, outcome):
            return attempt
        return await self.advance(account, attempt_id)

    async def _refused(self, account: str, attempt: QrLogin, outcome: Outcome) -> bool:
        """Whether a polling step was refused; if so it is kept on the attempt for the page.

        The capability layer's refusal leaves the login as it was (the
        developer may try again); the gateway's (-42900, -40404, ...) is raised.
        """
        if outcome.ok:
            return False
        attempt.error = outcome.describe()
        await self._save(account, attempt)
        if outcome.by_gateway:
            raise FlowError(outcome)
        return True

    async def renew(self, account: str, attempt_id: str) -> QrLogin:
        """A new code for the same attempt (after a cancel, or when the old one expired)."""
        attempt = await self.get(account, attempt_id)
        if attempt.stage not in ("qr", "failed"):
            return attempt
        attempt.stage = "qr"
        await self._issue(account, attempt)
        return attempt

    async def _finish(self, account: str, attempt: QrLogin) -> None:
        """``long/start`` once, however many polls saw status 2 at the same time.

        A poll that lost the race may save its older view of the attempt
        after the winner saved "done"; the winner's ``finished`` field, which
        no save writes, keeps the attempt done all the same.
        """
        key = self.keys.console_login_attempt(account, attempt.id)
        if not await self.text.hsetnx(key, "starting", "1"):
            return
        try:
            await self.start(account, attempt.appid, attempt.callback_url)
        except FlowError as exc:
            attempt.stage, attempt.error = "failed", exc.outcome.describe()
            await self.text.hdel(key, "starting")
        else:
            attempt.stage = "done"
            await self.text.hset(key, "finished", "1")
        await self._save(account, attempt)

    # --- instance actions ---------------------------------------------------------------------------
    async def _forward_address(self, account: str, appid: str | None, given: str) -> tuple[str, bool]:
        """The callbackUrl for ``long/start``, and whether it is the account default (not the instance's own)."""
        if given:
            return given, False
        if appid is not None:
            own = await self.store.get_callback(Scope(appid=appid))
            if own.url:
                return own.url, False
        default = await self.store.get_callback(Scope(account=account))
        if default.url:
            return default.url, True
        raise FlowError(
            Outcome(
                "long/start",
                400,
                -40011,
                "no callback address: give one, or set the account default under Callback settings",
            )
        )

    async def start(self, account: str, appid: str, callback_url: str = "") -> Outcome:
        """``long/start`` towards the address given, else the instance's own, else the account default.

        The gateway records ``callbackUrl`` as the instance's own address,
        except the account default: the instance keeps inheriting it, with
        its secret and token.
        """
        if await self.store.owner(appid) != account:
            # The gateway's own answer, before any address of the account is looked at.
            kind = gateway_codes.NOT_FOUND
            raise FlowError(Outcome("long/start", kind.status, kind.code, kind.message))
        url, inherited = await self._forward_address(account, appid, callback_url)
        return await self._required(
            account,
            "long",
            "start",
            {"appid": appid, "callbackUrl": url, "pushHistory": False},
            inherits_address=inherited,
        )

    async def stop(self, account: str, appid: str) -> Outcome:
        return await self._required(account, "long", "stop", {"appid": appid})

    async def logout(self, account: str, appid: str) -> Outcome:
        return await self._required(account, "login", "logout", {"appid": appid})

    async def relogin(self, account: str, appid: str, proxy: str | None = None) -> QrLogin | None:
        """``login/reconnect`` and a business read; None when the instance is back.

        Back: the recovery is recorded by the prober's own flip
        (``transitions.go_online``), so one ``InstanceRecovered`` is sent however
        the prober and this race. Not back: a new QR login of the instance
        begins (``long/stop``, its ``GapClosed``, ``getQr``) and is returned.
        ``proxy`` None reuses the one the gateway remembered.
        """
        own, keys = await instance_shard(self.shard_texts, appid)  # its liveness is on its shard
        if proxy is None:
            remembered = await own.hget(keys.instance(appid), "proxy")
            proxy = remembered if isinstance(remembered, str) else ""
        reconnected = await self.call(account, "login", "reconnect", {"appid": appid, "proxy": proxy})
        if reconnected.by_gateway:
            raise FlowError(reconnected)
        if reconnected.ok:
            module, action = BUSINESS_READ
            read = await self.call(account, module, action, {"appid": appid})
            if read.by_gateway:
                raise FlowError(read)
            if read.ok:
                await transitions.go_online(own, keys, self.settings, appid, auto_reconnected=False, at=time.time())
                return None
        return await self.begin_existing(account, appid, proxy=proxy)
