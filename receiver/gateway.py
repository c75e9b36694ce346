"""The gateway API: ``POST /svc/api/{module}/{action}`` and ``POST /svc/instances/set-callback``.

Every operation, listed in the spec or not, is forwarded to
``SVCGW_UPSTREAM_URL`` + the same path with the request body as received,
and the capability layer's answer is returned as it came: HTTP 200, the same
bytes (19-digit integers untouched). The only rewrites are the
``callbackUrl`` field sent upstream by ``long/start`` and
``long/updateCallbackURL`` (the caller's address is swapped for the
instance's receiver URL) and, in an answer, any mention of that receiver URL
(swapped back for the caller's address; see :func:`scrub`).

Order of checks; the first one that fails answers, with
``{code, message, data: null}``:

1. Path, before routing, on the raw path as received (``PathGuard``), for
   paths under ``/svc/api/`` or ``/svc/instances/``: a trailing slash, an
   empty segment, a dot segment, an encoded ``/`` or ``.`` (``%2f``,
   ``%2e``, any case), or an API path other than ``/svc/api/{module}/{action}``
   is -40004 (400).
2. API key, from ``Svc-Key``, ``X-Svc-Key`` or ``Authorization: Bearer``:
   missing, invalid, revoked, or several headers carrying different keys is
   401 (code 401).
3. Rate limit (``receiver.ratelimit``): every call that got past 2 counts,
   whatever its outcome, a refused one included; excess is -42900 (429)
   with ``Retry-After``.
4. Body: larger than :data:`MAX_BODY_BYTES` is -41300 (413); not UTF-8
   JSON, or not a JSON object, is -40001 (400).
5. Instance field: a spelling of it other than ``appid`` or ``ql_appid``
   (``appId``, ``app_id``, ``APPID``, ``qlAppId``...), either one sent twice,
   or both sent with different values is -40002 (400). Both with the same
   value count as one field. ``ql_appid`` is accepted on every operation,
   not only ``friend/deleteSnsComment``: the spec names it without saying
   where it stops applying, and the body goes upstream as sent either way.
6. ``appid`` present: missing (or null) is -40001 (400), except on the
   operations that configure a callback (``long/start``,
   ``long/updateCallbackURL``, ``set-callback``), where it is -40010 (400);
   a body that is not an object stays -40001 there too, as check 4 answers
   first. A value that is not a string is -40001 (400).
7. Controlled operation: one the console denied to the account
   (``svcgw accounts deny``; compared without regard to case) is -40300
   (403). ``set-callback`` is the operation ``instances/set-callback``.
8. ``callbackUrl`` or ``pushHistory`` (or another spelling of them, such as
   ``callbackURL``) on any other operation is -40403 (403); on the
   callback operations, another spelling is -40403 too, so no address
   reaches the capability layer unchecked.
9. Ownership, except on ``device/create``: an ``appid`` that does not exist
   and one of another account get the same -40404 (404) after the same
   Redis work (one ``HGET``).
10. Per operation:

    * ``device/create`` (any string ``appid``, the empty one included):
      entitlement expired is -40402 (403), quota full -40402 (402). A slot
      is reserved atomically before forwarding (:class:`DeviceQuota`), so
      concurrent creates never exceed the quota; a new ``data.appid`` in a
      code-0 answer is registered under the account, and the slot is
      released whatever happened.
    * ``long/start``, ``long/updateCallbackURL``, ``set-callback``:
      ``callbackUrl`` must pass ``check_callback_url`` (-40011, -40012,
      -40013; missing is -40011). The first two forward with the receiver
      URL in its place; when the capability layer answers code 0, and for
      ``long/start`` also code -1 with message ``started`` (already
      running: the connection was reset and runs on with the receiver URL
      of its first start, which is this same URL), the caller's address
      becomes the instance's forward address, and ``long/start`` marks the
      instance maintained again. Any other answer leaves the stored address
      as it was and is passed on. ``set-callback`` is not forwarded: it only
      stores the address and answers ``{code: 0, message: "ok", time,
      data: {appid, callbackUrl}}``.
    * ``long/stop`` and ``login/logout`` with code 0 update the instance's
      liveness state; ``login/getQr``, ``login/checkQr`` and
      ``login/reconnect`` with code 0 remember the ``proxy`` sent.

11. Forwarding: no answer (connection failure, timeout) or an unusable one
    (not HTTP 200 with a JSON object carrying an integer ``code``) is
    -50002 (502); on ``long/start`` and ``long/updateCallbackURL`` it is
    -50000 (502), as is a failure to store the address afterwards.

Redis being unreachable at any step is -50002 (502). The query string of a
gateway call is not forwarded: operations take their input from the body.
"""

from __future__ import annotations

import json
import logging
import posixpath
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from svcgw import errors, keys, liveness
from svcgw.addresses import AddressError, check_callback_url
from svcgw.errors import GatewayError
from svcgw.receivers import RECEIVER_PREFIX, receiver_path
from svcgw.store import NotFound
from svcgw.store import Scope as CallbackScope
from svcgw.upstream import Answer, Upstream, UpstreamError

from .ratelimit import RateLimiter

if TYPE_CHECKING:
    from .app import Services

__all__ = [
    "API_PATH",
    "MAX_BODY_BYTES",
    "SET_CALLBACK_PATH",
    "DeviceQuota",
    "Gateway",
    "PathGuard",
    "instance_id",
    "path_problem",
    "replace_member",
    "scan_object",
    "scrub",
]

log = logging.getLogger("svcgw.gateway")

API_PATH = "/svc/api/{module}/{action}"
SET_CALLBACK_PATH = "/svc/instances/set-callback"
SET_CALLBACK_OPERATION = "instances/set-callback"

# Uploads go through the gateway and their request shapes are not given, so
# the limit is generous; it only stops a body from filling the memory.
MAX_BODY_BYTES = 32 * 1024 * 1024

DEVICE_CREATE = "device/create"
LONG_START = "long/start"
UPDATE_CALLBACK = "long/updateCallbackURL"
CALLBACK_OPERATIONS = frozenset({LONG_START, UPDATE_CALLBACK, SET_CALLBACK_OPERATION})
PROXY_OPERATIONS = frozenset({"login/getQr", "login/checkQr", "login/reconnect"})

INSTANCE_FIELDS = ("appid", "ql_appid")
CALLBACK_FIELDS = ("callbackUrl", "pushHistory")

# How long a quota slot stays reserved if the server dies mid-create; longer
# than any upstream call may take.
RESERVATION_SECONDS = 120


def _squash(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


_INSTANCE_SPELLINGS = frozenset(_squash(name) for name in INSTANCE_FIELDS)
_CALLBACK_SPELLINGS = frozenset(_squash(name) for name in CALLBACK_FIELDS)


# --- the path ----------------------------------------------------------------

_GUARDED_TREES = (("svc", "api"), ("svc", "instances"))


def path_problem(raw_path: bytes) -> str | None:
    """Why a raw request path under the gateway's trees is ambiguous, or None.

    Paths outside ``/svc/api/`` and ``/svc/instances/`` (after decoding and
    resolving dots, so ``//svc/./api/x/y`` is inside) are not judged here.
    """
    text = raw_path.split(b"?", 1)[0].decode("latin-1")
    loose = [part for part in posixpath.normpath("/" + unquote(text)).split("/") if part]
    tree = tuple(loose[:2])
    if tree not in _GUARDED_TREES:
        return None
    lowered = text.lower()
    if "%2f" in lowered or "%2e" in lowered:
        return "ambiguous request path: encoded '/' or '.'; use /svc/api/{module}/{action}"
    segments = text.split("/")
    if segments[0] != "" or "" in segments[1:]:
        return "ambiguous request path: empty segment or trailing slash; use /svc/api/{module}/{action}"
    if any(unquote(segment) in (".", "..") for segment in segments[1:]):
        return "ambiguous request path: dot segment; use /svc/api/{module}/{action}"
    if tree == ("svc", "api") and len(segments) != 5:
        return "ambiguous request path; use /svc/api/{module}/{action}"
    return None


class PathGuard:
    """ASGI middleware answering -40004 before routing, so nothing is redirected or guessed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode("utf-8")
            problem = path_problem(raw)
            if problem is not None:
                response = GatewayError(errors.AMBIGUOUS_PATH, problem).response()
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# --- the body ----------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_WS = " \t\n\r"


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


@dataclass(frozen=True)
class Member:
    """A top-level member of the body: its decoded name and where its value's text lies."""

    name: str
    start: int
    end: int


def scan_object(text: str) -> tuple[dict[str, Any], list[Member]]:
    """Parse a JSON object, keeping where each top-level value is (duplicates included).

    Raises ``ValueError`` when ``text`` is not JSON, ``TypeError`` when it is
    JSON but not an object. Integers of any size stay exact.
    """
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        _DECODER.decode(text)  # ValueError if this is not JSON at all
        raise TypeError("the body is not a JSON object")
    document: dict[str, Any] = {}
    members: list[Member] = []
    i = _skip(text, i + 1)
    if text[i : i + 1] == "}":
        i += 1
    else:
        while True:
            if text[i : i + 1] != '"':
                raise ValueError("a member name must be a string")
            name, i = _DECODER.raw_decode(text, i)
            i = _skip(text, i)
            if text[i : i + 1] != ":":
                raise ValueError("':' expected")
            start = _skip(text, i + 1)
            value, i = _DECODER.raw_decode(text, start)
            members.append(Member(name, start, i))
            document[name] = value
            i = _skip(text, i)
            if text[i : i + 1] == ",":
                i = _skip(text, i + 1)
                continue
            if text[i : i + 1] == "}":
                i += 1
                break
            raise ValueError("',' or '}' expected")
    if _skip(text, i) != len(text):
        raise ValueError("extra data after the object")
    return document, members


def replace_member(text: str, members: Iterable[Member], name: str, value: str) -> str:
    """``text`` with every top-level ``name`` member's value replaced by the string ``value``.

    Only those spans change; every other byte of the body stays as sent.
    """
    encoded = json.dumps(value)
    for member in sorted((m for m in members if m.name == name), key=lambda m: m.start, reverse=True):
        text = text[: member.start] + encoded + text[member.end :]
    return text


def instance_id(document: dict[str, Any], members: list[Member], *, configuring: bool) -> str:
    """The instance the call is about, under checks 5 and 6 of the module docstring."""
    names = [member.name for member in members]
    for name in names:
        if name not in INSTANCE_FIELDS and _squash(name) in _INSTANCE_SPELLINGS:
            raise GatewayError(errors.INSTANCE_FIELD, f"wrong instance field name {name[:64]!r}; send appid")
    for field in INSTANCE_FIELDS:
        if names.count(field) > 1:
            raise GatewayError(errors.INSTANCE_FIELD, f"{field} sent more than once")
    values = {field: document[field] for field in INSTANCE_FIELDS if document.get(field) is not None}
    for field, value in values.items():
        if not isinstance(value, str):
            raise GatewayError(errors.APPID_MISSING, f"{field} must be a string")
    distinct = set(values.values())
    if len(distinct) > 1:
        raise GatewayError(errors.INSTANCE_FIELD, "appid and ql_appid differ; send one instance field")
    if not distinct:
        if configuring:
            raise GatewayError(errors.CALLBACK_APPID_MISSING)
        raise GatewayError(errors.APPID_MISSING, "appid missing")
    return cast(str, distinct.pop())


# --- answers -------------------------------------------------------------------


def _strings(value: Any) -> Iterable[str]:
    """Every string in a parsed JSON value, member names included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def mentions(document: Any, needle: str) -> bool:
    return any(needle in text for text in _strings(document))


def _json_forms(value: str) -> set[bytes]:
    """The ways a JSON encoder may write ``value`` as a string, quotes included."""
    forms = set()
    for ensure_ascii in (True, False):
        encoded = json.dumps(value, ensure_ascii=ensure_ascii)
        forms.add(encoded.encode("utf-8"))
        forms.add(encoded.replace("/", "\\/").encode("utf-8"))
    return forms


def _redact(value: Any, receiver_url: str, token: str, replacement: str) -> Any:
    if isinstance(value, str):
        return value.replace(receiver_url, replacement).replace(token, "[redacted]")
    if isinstance(value, dict):
        return {
            _redact(k, receiver_url, token, replacement): _redact(v, receiver_url, token, replacement)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, receiver_url, token, replacement) for item in value]
    return value


def scrub(answer: Answer, receiver_url: str, token: str, replacement: str) -> bytes:
    """The answer's bytes with the instance's receiver URL replaced by ``replacement``.

    The caller must never see the receiver URL (its token lets anyone post
    events as the capability layer). Answers that do not contain the token
    come back untouched. Otherwise the JSON-encoded receiver URL is replaced
    where it is a whole string (the echo of ``updateCallbackURL``), then
    inside longer strings, leaving every other byte as it was. Only if the
    token is still there after that (an encoding nobody uses) is the answer
    re-serialized from its parsed form with the token redacted.
    """
    if not mentions(answer.envelope, token):
        return answer.raw
    raw = answer.raw
    quoted = orjson.dumps(replacement)
    forms = sorted(_json_forms(receiver_url), key=len, reverse=True)
    for form in forms:
        raw = raw.replace(form, quoted)
    for form in forms:
        raw = raw.replace(form[1:-1], quoted[1:-1])
    try:
        cleaned = json.loads(raw)
    except (ValueError, RecursionError):
        cleaned = None
    if cleaned is not None and not mentions(cleaned, token):
        return raw
    log.warning("upstream answer mentions the receiver URL in an unusual encoding; re-serialized")
    redacted = _redact(answer.envelope, receiver_url, token, replacement)
    return json.dumps(redacted, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _json(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")


def _pass_on(raw: bytes) -> Response:
    return Response(raw, status_code=200, media_type="application/json")


def _is_started(answer: Answer) -> bool:
    """``long/start`` on a running connection: reset, and still running."""
    message = answer.message.strip()
    return answer.code == -1 and (message == "started" or message.endswith("|started"))


# --- device quota --------------------------------------------------------------


# KEYS: account instances, reservations. ARGV: quota, reservation id, seconds.
# A reservation already renamed to an appid that is registered is not counted twice.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local used = redis.call('SCARD', KEYS[1])
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('SISMEMBER', KEYS[1], member) == 0 then used = used + 1 end
end
if used >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]) + 1)
return 1
"""

# KEYS: reservations. ARGV: reservation id, appid. The slot now holds the appid.
_HOLD = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
redis.call('ZADD', KEYS[1], score, ARGV[2])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""


@dataclass
class Reservation:
    account: str
    id: str
    appid: str | None = None


class DeviceQuota:
    """Quota slots for ``device/create``, counted as instances + creations in flight.

    ``reserve`` takes a slot atomically (one Lua script) or says the quota is
    full. When the capability layer answers with a new appid, ``hold`` renames
    the slot to that appid before it is registered: from then on the script
    counts the appid once, whether it is still a reservation, already in the
    account's instances, or both. ``release`` frees the slot in every case.
    A slot left behind by a server that died mid-call expires by itself.
    """

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._reserve = redis.register_script(_RESERVE)
        self._hold = redis.register_script(_HOLD)

    async def reserve(self, account_id: str, quota: int) -> Reservation | None:
        reservation = Reservation(account_id, "rsv_" + secrets.token_hex(8))
        taken = await self._reserve(
            keys=[keys.account_instances(account_id), keys.device_reservations(account_id)],
            args=[quota, reservation.id, RESERVATION_SECONDS],
        )
        return reservation if int(taken) else None

    async def hold(self, reservation: Reservation, appid: str) -> None:
        await self._hold(keys=[keys.device_reservations(reservation.account)], args=[reservation.id, appid])
        reservation.appid = appid

    async def release(self, reservation: Reservation) -> None:
        names = [reservation.id] + ([reservation.appid] if reservation.appid else [])
        await self.redis.zrem(keys.device_reservations(reservation.account), *names)


# --- the gateway -----------------------------------------------------------------

_ADDRESS_KINDS = {
    errors.CALLBACK_URL_INVALID.code: errors.CALLBACK_URL_INVALID,
    errors.CALLBACK_URL_OWN.code: errors.CALLBACK_URL_OWN,
    errors.CALLBACK_URL_UNUSABLE.code: errors.CALLBACK_URL_UNUSABLE,
}


@dataclass(frozen=True)
class Call:
    """A request that passed the common checks (1 to 9)."""

    account: str
    module: str
    action: str
    raw: bytes
    text: str
    document: dict[str, Any]
    members: list[Member]
    appid: str

    @property
    def operation(self) -> str:
        return f"{self.module}/{self.action}"


def presented_key(request: Request) -> str | None:
    """The one API key the request carries, or None (none, or different ones)."""
    found: set[str] = set()
    for header in ("svc-key", "x-svc-key"):
        for value in request.headers.getlist(header):
            found.add(value.strip())
    for value in request.headers.getlist("authorization"):
        scheme, _, credentials = value.strip().partition(" ")
        if scheme.lower() == "bearer":
            found.add(credentials.strip())
    if len(found) != 1:
        return None
    key = found.pop()
    return key or None


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise GatewayError(errors.BODY_TOO_LARGE, f"the request body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise GatewayError(errors.BODY_TOO_LARGE, f"the request body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(raw: bytes) -> tuple[str, dict[str, Any], list[Member]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GatewayError(errors.APPID_MISSING, "the body is not UTF-8 JSON") from None
    try:
        document, members = scan_object(text)
    except TypeError:
        raise GatewayError(errors.APPID_MISSING, "the body must be a JSON object") from None
    except (ValueError, RecursionError):
        raise GatewayError(errors.APPID_MISSING, "the body is not valid JSON") from None
    return text, document, members


class Gateway:
    def __init__(self, services: Services) -> None:
        settings = services.settings
        self.services = services
        self.settings = settings
        self.store = services.store
        self.redis: Redis = services.text_redis
        self.limiter = RateLimiter(services.text_redis, settings.rate_limit)
        self.quota = DeviceQuota(services.text_redis)
        self.public_url = settings.public_url.rstrip("/")
        self.own_origins = [settings.public_origin]
        self.own_prefixes = [self.public_url + RECEIVER_PREFIX]

    def routes(self) -> list[BaseRoute]:
        return [
            Route(API_PATH, self.api, methods=["POST"], name="gateway"),
            Route(SET_CALLBACK_PATH, self.set_callback, methods=["POST"], name="set-callback"),
        ]

    # --- endpoints ----------------------------------------------------------
    async def api(self, request: Request) -> Response:
        module, action = request.path_params["module"], request.path_params["action"]
        return await self._answer(request, module, action, self._operation)

    async def set_callback(self, request: Request) -> Response:
        module, action = SET_CALLBACK_OPERATION.split("/")
        return await self._answer(request, module, action, self._set_callback)

    async def _answer(
        self, request: Request, module: str, action: str, handler: Callable[[Call], Awaitable[Response]]
    ) -> Response:
        try:
            call = await self._admit(request, module, action)
            return await handler(call)
        except GatewayError as exc:
            return exc.response()
        except RedisError as exc:
            log.warning("gateway storage error on %s/%s: %s", module, action, type(exc).__name__)
            return GatewayError(errors.UNAVAILABLE).response()

    # --- checks 2 to 9 ---------------------------------------------------------
    async def _admit(self, request: Request, module: str, action: str) -> Call:
        operation = f"{module}/{action}"
        key = presented_key(request)
        account = await self.store.authenticate(key) if key else None
        if account is None:
            raise GatewayError(errors.UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
        verdict = await self.limiter.hit(account)
        if not verdict.allowed:
            raise GatewayError(errors.RATE_LIMITED, headers={"Retry-After": str(verdict.retry_after)})
        raw = await _read_body(request)
        text, document, members = _parse(raw)
        appid = instance_id(document, members, configuring=operation in CALLBACK_OPERATIONS)
        denied = {name.lower() for name in await self.store.denied(account)}
        if operation.lower() in denied:
            raise GatewayError(errors.OPERATION_DENIED, f"{operation} is not enabled for this account")
        for member in members:
            if _squash(member.name) in _CALLBACK_SPELLINGS and (
                operation not in CALLBACK_OPERATIONS or member.name not in CALLBACK_FIELDS
            ):
                unsupported = errors.CALLBACK_FIELD_UNSUPPORTED
                message = f"{member.name[:64]!r} is not accepted on {operation}; {unsupported.message}"
                raise GatewayError(unsupported, message)
        if operation != DEVICE_CREATE and await self.store.owner(appid) != account:
            raise GatewayError(errors.NOT_FOUND)
        return Call(account, module, action, raw, text, document, members, appid)

    # --- operations -----------------------------------------------------------
    def _upstream(self) -> Upstream:
        upstream = self.services.upstream
        if upstream is None:
            raise GatewayError(errors.UNAVAILABLE, "the capability layer is not configured")
        return upstream

    async def _forward(self, call: Call, body: bytes) -> Answer:
        try:
            return await self._upstream().call(call.module, call.action, body)
        except UpstreamError as exc:
            log.warning("upstream %s failed: %s", call.operation, exc)
            raise GatewayError(errors.UNAVAILABLE) from exc

    async def _operation(self, call: Call) -> Response:
        if call.operation == DEVICE_CREATE:
            return await self._device_create(call)
        if call.operation in (LONG_START, UPDATE_CALLBACK):
            return await self._configure_callback(call)
        answer = await self._forward(call, call.raw)
        if answer.ok:
            await self._after(call)
        if mentions(answer.envelope, RECEIVER_PREFIX):
            return _pass_on(await self._scrub_other(call, answer))
        return _pass_on(answer.raw)

    async def _after(self, call: Call) -> None:
        """Liveness bookkeeping once the capability layer accepted the operation."""
        if call.operation == "long/stop":
            await liveness.mark_stopped(self.redis, call.appid)
        elif call.operation == "login/logout":
            await liveness.mark_logged_out(self.redis, call.appid)
        elif call.operation in PROXY_OPERATIONS:
            proxy = call.document.get("proxy")
            if isinstance(proxy, str):
                await liveness.record_proxy(self.redis, call.appid, proxy)

    async def _scrub_other(self, call: Call, answer: Answer) -> bytes:
        receiver_url, token = await self._receiver_url(call.appid)
        config = await self.store.get_callback(CallbackScope(appid=call.appid))
        return scrub(answer, receiver_url, token, config.url or "")

    async def _device_create(self, call: Call) -> Response:
        try:
            account = await self.store.get_account(call.account)
        except NotFound:
            raise GatewayError(errors.UNAUTHORIZED) from None
        if account.expired():
            raise GatewayError(errors.ENTITLEMENT_EXPIRED)
        reservation: Reservation | None = None
        if account.devices is not None:
            reservation = await self.quota.reserve(account.id, account.devices)
            if reservation is None:
                raise GatewayError(errors.QUOTA_FULL, f"the account's device quota ({account.devices}) is full")
        try:
            answer = await self._forward(call, call.raw)
            data = answer.data
            appid = data.get("appid") if answer.ok and isinstance(data, dict) else None
            if isinstance(appid, str) and appid:
                if reservation is not None:
                    await self.quota.hold(reservation, appid)
                await self._register(account.id, appid)
        finally:
            if reservation is not None:
                await self.quota.release(reservation)
        return _pass_on(answer.raw)

    async def _register(self, account_id: str, appid: str) -> None:
        owner = await self.store.owner(appid)
        if owner is None:
            await self.store.register_instance(appid, account_id)
        elif owner != account_id:
            log.error("device/create returned an appid registered to another account")
            raise GatewayError(errors.UNAVAILABLE)

    async def _check_url(self, value: object) -> str:
        try:
            checked = await run_in_threadpool(
                check_callback_url,
                value,
                own_origins=self.own_origins,
                own_prefixes=self.own_prefixes,
                allow=self.settings.allow_private_destinations,
            )
        except AddressError as exc:
            raise GatewayError(_ADDRESS_KINDS.get(exc.code, errors.CALLBACK_URL_INVALID), exc.message) from None
        return checked.url

    async def _receiver_url(self, appid: str) -> tuple[str, str]:
        token = await self.store.receiver_token(appid)
        return self.public_url + receiver_path(appid, token), token

    async def _configure_callback(self, call: Call) -> Response:
        url = await self._check_url(call.document.get("callbackUrl"))
        try:
            receiver_url, token = await self._receiver_url(call.appid)
        except NotFound:
            raise GatewayError(errors.NOT_FOUND) from None
        body = replace_member(call.text, call.members, "callbackUrl", receiver_url).encode("utf-8")
        try:
            answer = await self._upstream().call(call.module, call.action, body)
        except UpstreamError as exc:
            log.warning("upstream %s failed: %s", call.operation, exc)
            raise GatewayError(errors.REGISTRATION_FAILED) from exc
        if answer.ok or (call.operation == LONG_START and _is_started(answer)):
            try:
                await self.store.set_callback(CallbackScope(appid=call.appid), url)
                if call.operation == LONG_START:
                    await liveness.mark_started(self.redis, call.appid, self.settings.probe_interval)
            except RedisError as exc:
                log.warning("storing the callback address of an instance failed: %s", type(exc).__name__)
                raise GatewayError(errors.REGISTRATION_FAILED) from exc
        return _pass_on(scrub(answer, receiver_url, token, url))

    async def _set_callback(self, call: Call) -> Response:
        url = await self._check_url(call.document.get("callbackUrl"))
        try:
            config = await self.store.set_callback(CallbackScope(appid=call.appid), url)
        except NotFound:
            raise GatewayError(errors.NOT_FOUND) from None
        except RedisError as exc:
            raise GatewayError(errors.REGISTRATION_FAILED) from exc
        return _json(
            {
                "code": 0,
                "message": "ok",
                "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                "data": {"appid": call.appid, "callbackUrl": config.url},
            }
        )
