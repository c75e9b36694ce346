"""A new instance by QR login, and the instance actions, done by the console for the signed-in account.

Every step is a gateway call made with :meth:`receiver.gateway.Gateway.invoke`
for the account: the same checks as a call with one of its keys (rate limit,
controlled operations, ownership, device quota, ``device/create``
registration, ``long/start`` recording the forward address, the remembered
proxy) and the same operation code. Nothing here talks to the capability
layer or writes those records itself.

The QR login (spec: "Login and QR") is an :class:`Attempt`, kept in a Redis
hash owned by the account (``svcgw.keys.console_login_attempt``) for
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

Errors::

    FlowError       a step was refused: by the gateway (its status, code and
                    message) or by the capability layer (HTTP 200, its code)
    AttemptGone     no such attempt for this account (expired, or another's)
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson
from redis.asyncio import Redis
from starlette.responses import Response

from svcgw import errors, keys, liveness
from svcgw.calllog import read_log
from svcgw.store import Scope

if TYPE_CHECKING:
    from ..gateway import Gateway
    from ..services import Services

__all__ = [
    "ATTEMPT_SECONDS",
    "GAP_WAIT_SECONDS",
    "Attempt",
    "AttemptGone",
    "FlowError",
    "Outcome",
    "QrFlow",
    "action_needed",
    "image_data_url",
    "login_status_words",
]

ATTEMPT_SECONDS = 15 * 60
GAP_WAIT_SECONDS = 10.0
MAX_IMAGE_BYTES = 256 * 1024
# The business read that proves a connection, as the prober's (worker.prober.PROBE_READ).
BUSINESS_READ = ("user", "getProfile")
DEVICE = {"type": "iPad", "name": "console", "version": 0}

# The Login status table of the spec, in words; any other value gets FALLBACK_WORDS and the polling goes on.
STATUS_WORDS: Mapping[int, str] = {
    -1: "Waiting for a scan: open the app on the phone and scan this code.",
    0: "This device can log in without scanning; waiting for the login to complete.",
    1: "Scanned. Confirm the login on the phone.",
    2: "Logged in.",
    4: "The login was cancelled on the phone. Ask for a new code to try again.",
    10: "Enter the six-digit code sent to the phone.",
}
FALLBACK_WORDS = "The login is in an unexpected state ({status}); still checking."

_IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def login_status_words(status: int | None) -> str:
    if status is None:
        return "Asking for a code."
    return STATUS_WORDS.get(status, FALLBACK_WORDS.format(status=status))


def action_needed(instance: Mapping[str, Any]) -> str | None:
    """What the developer must do for an instance's status (the console's view of it), in words."""
    status, action = instance.get("status"), instance.get("action_required")
    if status == liveness.OFFLINE and action == "relogin":
        return "Re-login: the connection broke but the login is probably alive; usually no scan is needed."
    if status == liveness.OFFLINE:
        return "Scan a new QR code: the login is gone (risk control, another device, or logged out on the phone)."
    if status == liveness.STOPPED:
        return "Start the long connection to receive events again."
    if status == liveness.LOGGED_OUT:
        return "Log in again with a QR scan."
    if status == "not_started":
        return "Log in with a QR scan, then start the long connection."
    return None


def image_data_url(value: object) -> str | None:
    """A ``data:`` URL for the QR image the capability layer sent, with or without its own prefix.

    The value is decoded and encoded again from the bytes, and only a PNG,
    JPEG or GIF by its first bytes is taken: whatever else the layer sent
    never reaches the page. None when it is not such an image.
    """
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.startswith("data:"):
        head, comma, text = text.partition(",")
        if not comma or not head.endswith(";base64"):
            return None
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw or len(raw) > MAX_IMAGE_BYTES:
        return None
    for magic, media in _IMAGE_TYPES:
        if raw.startswith(magic):
            return f"data:{media};base64,{base64.b64encode(raw).decode('ascii')}"
    return None


# --- what one gateway call answered ---------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """A gateway call's answer: HTTP status, code, message, data (and Retry-After, when refused so)."""

    operation: str
    status: int
    code: int
    message: str
    data: Any = None
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.code == 0

    @property
    def by_gateway(self) -> bool:
        """Refused by the service's own checks (not an answer of the capability layer)."""
        return self.status != 200

    @classmethod
    def of(cls, operation: str, response: Response) -> Outcome:
        try:
            document = orjson.loads(bytes(response.body))
        except orjson.JSONDecodeError:
            document = None
        if not isinstance(document, dict):
            return cls(operation, response.status_code, -1, "the answer was not a JSON object")
        code = document.get("code")
        message = document.get("message")
        return cls(
            operation,
            response.status_code,
            code if isinstance(code, int) and not isinstance(code, bool) else -1,
            message if isinstance(message, str) else "",
            document.get("data"),
            response.headers.get("retry-after"),
        )

    def describe(self) -> str:
        return f"{self.operation} was refused: {self.code} {self.message}".rstrip()


class FlowError(Exception):
    """A step refused, by the gateway or the capability layer; ``outcome`` says which and how."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.describe())
        self.outcome = outcome


class AttemptGone(LookupError):
    """No such login attempt for this account: expired, finished long ago, or another account's."""


# --- the attempt ---------------------------------------------------------------------------
@dataclass
class Attempt:
    id: str
    appid: str
    stage: str  # closing, qr, done, failed
    proxy: str = ""
    callback_url: str = ""
    uuid: str = ""
    image: str = ""  # a data: URL checked by image_data_url
    refresh_interval: int = 0
    issued_at: float = 0.0
    stopped_at: float = 0.0
    status: int | None = None  # the last checkQr status
    error: str = ""  # the last refused step, for the page
    created: bool = False  # the instance was made by this attempt (device/create)

    def view(self) -> dict[str, Any]:
        """The attempt for the page and the API; without the proxy, which may carry its own credentials."""
        data = asdict(self)
        del data["proxy"]
        data["words"] = login_status_words(self.status) if self.stage == "qr" else None
        data["needs_code"] = self.stage == "qr" and self.status == 10
        data["cancelled"] = self.stage == "qr" and self.status == 4
        return data

    def fields(self) -> dict[str, str]:
        """The hash's fields: None as empty, a flag as 1 or 0."""
        return {k: "" if v is None else str(int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()}

    @classmethod
    def load(cls, fields: Mapping[str, str]) -> Attempt:
        status = fields.get("status", "")
        return cls(
            id=fields["id"],
            appid=fields.get("appid", ""),
            # "finished" is written once, by the poll that started the connection, and by nothing else.
            stage="done" if fields.get("finished") == "1" else fields.get("stage", "qr"),
            proxy=fields.get("proxy", ""),
            callback_url=fields.get("callback_url", ""),
            uuid=fields.get("uuid", ""),
            image=fields.get("image", ""),
            refresh_interval=int(fields.get("refresh_interval") or 0),
            issued_at=float(fields.get("issued_at") or 0),
            stopped_at=float(fields.get("stopped_at") or 0),
            status=int(status) if status.lstrip("-").isdigit() else None,
            error=fields.get("error", ""),
            created=fields.get("created") == "1",
        )


def _is_closed_message(message: str) -> bool:
    return message.strip().endswith("long connection closed")


class QrFlow:
    """The QR login and the instance actions, each step a gateway call for the account."""

    def __init__(self, gateway: Gateway, services: Services) -> None:
        self.gateway = gateway
        self.settings = services.settings
        self.store = services.store
        self.text: Redis = services.text_redis
        self.raw: Redis = services.redis

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
    async def _save(self, account: str, attempt: Attempt) -> None:
        key = keys.console_login_attempt(account, attempt.id)
        fields: dict[Any, Any] = attempt.fields()
        async with self.text.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.expire(key, ATTEMPT_SECONDS)
            await pipe.execute()

    async def get(self, account: str, attempt_id: str) -> Attempt:
        if not attempt_id or len(attempt_id) > 64:
            raise AttemptGone(attempt_id)
        fields = cast(dict[str, str], await self.text.hgetall(keys.console_login_attempt(account, attempt_id)))
        if not fields.get("id"):
            raise AttemptGone(attempt_id)
        return Attempt.load(fields)

    # --- a new instance ------------------------------------------------------------------------
    async def begin(self, account: str, *, proxy: str = "", callback_url: str = "") -> Attempt:
        """``device/create``, then the first QR code of its login."""
        await self._forward_address(account, None, callback_url)  # refuse before a device is made
        created = await self._required(account, "device", "create", {"appid": "", **DEVICE})
        appid = created.data.get("appid") if isinstance(created.data, dict) else None
        if not isinstance(appid, str) or not appid:
            raise FlowError(Outcome("device/create", 200, -1, "device/create answered without an appid"))
        attempt = Attempt(
            id=secrets.token_urlsafe(12), appid=appid, stage="qr", proxy=proxy, callback_url=callback_url, created=True
        )
        await self._issue(account, attempt)
        return attempt

    async def begin_existing(self, account: str, appid: str, *, proxy: str = "", callback_url: str = "") -> Attempt:
        """A new QR login of an instance the account has: ``long/stop``, its ``GapClosed``, then ``getQr``.

        ``long/stop`` is what the gateway checks ownership on (-40404); an
        answer of "long connection closed" means nothing is left to close.
        """
        stopped = await self.call(account, "long", "stop", {"appid": appid})
        if stopped.by_gateway:
            raise FlowError(stopped)
        attempt = Attempt(
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

    async def _after_stop(self, account: str, attempt: Attempt) -> None:
        waited = time.time() - attempt.stopped_at
        if waited < GAP_WAIT_SECONDS and not await self._gap_closed_since(attempt.appid, attempt.stopped_at):
            await self._save(account, attempt)
            return
        attempt.stage = "qr"
        await self._issue(account, attempt)

    async def _gap_closed_since(self, appid: str, since: float) -> bool:
        entries = await read_log(self.raw, self.settings, appid, since_seconds=time.time() - since + 1, limit=50)
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

    async def _issue(self, account: str, attempt: Attempt) -> None:
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
    async def advance(self, account: str, attempt_id: str) -> Attempt:
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

    async def submit_code(self, account: str, attempt_id: str, code: str) -> Attempt:
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

    async def _refused(self, account: str, attempt: Attempt, outcome: Outcome) -> bool:
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

    async def renew(self, account: str, attempt_id: str) -> Attempt:
        """A new code for the same attempt (after a cancel, or when the old one expired)."""
        attempt = await self.get(account, attempt_id)
        if attempt.stage not in ("qr", "failed"):
            return attempt
        attempt.stage = "qr"
        await self._issue(account, attempt)
        return attempt

    async def _finish(self, account: str, attempt: Attempt) -> None:
        """``long/start`` once, however many polls saw status 2 at the same time.

        A poll that lost the race may save its older view of the attempt
        after the winner saved "done"; the winner's ``finished`` field, which
        no save writes, keeps the attempt done all the same.
        """
        key = keys.console_login_attempt(account, attempt.id)
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
            kind = errors.NOT_FOUND
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

    async def relogin(self, account: str, appid: str, proxy: str | None = None) -> Attempt | None:
        """``login/reconnect`` and a business read; None when the instance is back.

        Back: the recovery is recorded by the prober's own flip
        (``liveness.go_online``), so one ``InstanceRecovered`` is sent however
        the prober and this race. Not back: a new QR login of the instance
        begins (``long/stop``, its ``GapClosed``, ``getQr``) and is returned.
        ``proxy`` None reuses the one the gateway remembered.
        """
        if proxy is None:
            remembered = await self.text.hget(keys.instance(appid), "proxy")
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
                await liveness.go_online(self.text, self.settings, appid, auto_reconnected=False, at=time.time())
                return None
        return await self.begin_existing(account, appid, proxy=proxy)
