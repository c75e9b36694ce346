"""The capability-layer simulator app: operations, instance state and the control API.

Operations are ``POST /svc/api/{module}/{action}`` with a JSON object body. Every
answer is HTTP 200 with the envelope ``{code, message, time, data, detail}``;
failures carry ``code -1`` and the spec's message. Implemented: ``device/create``,
``login/{getQr,checkQr,submitQrCode,reconnect,logout}``,
``long/{start,stop,check,updateCallbackURL}``, ``message/{sync,sendText,
sendRichText,sendImage,sendGif,sendFile,sendVoice,sendVideo}`` and the business
read ``user/getProfile``. Any other operation echoes
``{module, action, echo: <request body as sent>}``. Every call except
``device/create`` needs an ``appid`` the simulator knows, else ``instance not found``.

``user/getProfile`` is the business read that proves a connection: it answers
code 0 only while the instance is logged in and its long connection is up and
not silently lost; otherwise ``-1 long connection closed``. ``long/check`` says
less: it stays at code 0 after a silent drop, and answers non-zero for
``check_warmup`` seconds after ``long/start`` or ``login/reconnect``.

Callbacks (``GapConnected`` + ``GapSucceed`` after a start or a reconnect,
``GapClosed`` after a stop or an injected close) are posted after the answer
has gone out, in order per instance, to the instance's ``callbackUrl``.

Control API (plain JSON, no envelope; errors are ``{"error": text}`` with 400, 404 or 409):

- ``POST /_sim/instances`` ``{appid?, name?, connected?: bool, callbackUrl?}`` seeds a
  logged-in instance and answers ``{appid}``. ``GET /_sim/instances`` lists appids;
  ``GET /_sim/instances/{appid}`` shows loggedIn, connected, dropped, usable,
  callbackUrl, proxy, pushHistory, calls (count per ``module/action``), messages, faults.
- ``POST /_sim/faults`` ``{appid?, ...}``: without appid the change is global. Settings
  persist until changed: ``slow`` (seconds), ``error`` (message, forces code -1) and
  ``http_error`` (a 4xx/5xx status, or ``"close"`` to drop the connection mid-answer)
  each take a value for every operation or ``{"module/action" or "*": value}``; null
  clears. ``reconnect_fails``: true or ``"silent"`` (code 0, connection stays down),
  ``"error"`` (code -1), false. ``qr_verify``: login asks for a 6-digit code (status 10).
  Actions on the instance (or all instances): ``drop``: true (long/check keeps saying 0)
  or seconds (it says 0 that long), false heals; ``gap_closed``: a code or
  ``{code, message}``, posts ``GapClosed`` and closes the connection (-11002 and -1008
  also end the login). ``GET /_sim/faults`` shows them, ``DELETE /_sim/faults`` clears all.
- ``GET /_sim/calls`` lists ``{path, body}`` of the last 10 000 operation calls; ``DELETE``
  resets it.
- ``POST /_sim/traffic`` ``{appid, rate?: 10, count?: 10, duplicates?: 0.0, kinds?: [...],
  seconds?: 60, seed?}`` starts posting Msg events to the instance's callbackUrl and
  answers the run's progress with its ``id``; ``GET /_sim/traffic[/{id}]`` shows progress.
- ``GET /_sim/config``, ``POST /_sim/config`` ``{check_warmup}``.
- ``POST /_sim/sink``: a demo callback endpoint; it keeps the last 100 callbacks (the
  ``X-Svc-Timestamp``, ``X-Svc-Signature`` and ``X-Svc-Delivery-Id`` headers and the raw
  body) and logs one line for each; ``GET /_sim/sink`` lists them, oldest first.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import secrets
import string
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from simulator import traffic
from simulator.traffic import dumps

__all__ = ["Instance", "SimState", "create_app", "run"]

T = TypeVar("T")

APPID_ALPHABET = string.ascii_letters + string.digits
MSG_ID_BASE = 1 << 62
SYNC_KEY_BASE = 1_000_000_000
CLOSED = "long connection closed"
SESSION_ENDING_CODES = frozenset({-11002, -1008})
CALL_LOG_LIMIT = 10_000
SINK_LIMIT = 100
SINK_HEADERS = ("X-Svc-Timestamp", "X-Svc-Signature", "X-Svc-Delivery-Id")
QR_IMAGE = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


class Fail(Exception):
    """An operation's failure answer (HTTP 200, non-zero code)."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ControlError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RawJSON(bytes):
    """Data already serialized, spliced into the envelope as it is."""


@dataclass
class Faults:
    slow: dict[str, float] = field(default_factory=dict)
    error: dict[str, str] = field(default_factory=dict)
    http_error: dict[str, int | str] = field(default_factory=dict)
    reconnect_fails: str | None = None
    qr_verify: bool | None = None

    def snapshot(self) -> dict[str, Any]:
        return {
            "slow": self.slow,
            "error": self.error,
            "http_error": self.http_error,
            "reconnect_fails": self.reconnect_fails,
            "qr_verify": self.qr_verify,
        }


@dataclass
class QrSession:
    needs_code: bool
    polls: int = 0
    verified: bool = False
    last_status: int | None = None


@dataclass
class Instance:
    appid: str
    user_id: int
    name: str = "sim"
    logged_in: bool = False
    connected: bool = False
    dropped_at: float | None = None
    drop_check_ok_for: float | None = None
    callback_url: str | None = None
    push_history: bool = False
    proxy: str | None = None
    connection_changed_at: float = float("-inf")
    qr: dict[str, QrSession] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    messages: list[dict[str, Any]] = field(default_factory=list)
    faults: Faults = field(default_factory=Faults)
    post_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def usable(self) -> bool:
        return self.logged_in and self.connected and self.dropped_at is None

    def snapshot(self) -> dict[str, Any]:
        return {
            "appid": self.appid,
            "name": self.name,
            "userId": self.user_id,
            "loggedIn": self.logged_in,
            "connected": self.connected,
            "dropped": self.dropped_at is not None,
            "usable": self.usable,
            "callbackUrl": self.callback_url,
            "proxy": self.proxy,
            "pushHistory": self.push_history,
            "calls": dict(self.calls),
            "messages": len(self.messages),
            "faults": self.faults.snapshot(),
        }


def _new_client() -> httpx.AsyncClient:
    # trust_env off: proxy variables must not divert callbacks meant for loopback sinks.
    return httpx.AsyncClient(timeout=5.0, trust_env=False)


@dataclass
class SimState:
    check_warmup: float = 3.0
    instances: dict[str, Instance] = field(default_factory=dict)
    faults: Faults = field(default_factory=Faults)
    # Bounded so that a long benchmark does not grow without end.
    calls: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=CALL_LOG_LIMIT))
    runs: dict[str, traffic.TrafficRun] = field(default_factory=dict)
    sink: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=SINK_LIMIT))
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    client: httpx.AsyncClient | None = None
    message_ids: Iterator[int] = field(default_factory=lambda: itertools.count(MSG_ID_BASE + 1))

    def add_instance(self, appid: str | None = None, *, name: str = "sim") -> Instance:
        if appid is None:
            appid = "we_" + "".join(secrets.choice(APPID_ALPHABET) for _ in range(15))
        user_id = traffic.USER_ID_BASE + 10_000 + secrets.randbelow(10**9)
        inst = self.instances[appid] = Instance(appid=appid, user_id=user_id, name=name)
        return inst

    @asynccontextmanager
    async def http(self) -> AsyncIterator[httpx.AsyncClient]:
        """The shared client while the lifespan runs; a short-lived one otherwise."""
        if self.client is not None and not self.client.is_closed:
            yield self.client
            return
        async with _new_client() as client:
            yield client


Delivery = tuple[Instance, str, list[bytes]]


@dataclass
class Call:
    sim: SimState
    module: str
    action: str
    body: dict[str, Any]
    raw: bytes
    qr_verify: bool
    reconnect_fails: str | None
    later: list[Delivery] = field(default_factory=list)


def _lookup(tables: list[dict[str, T]], op: str) -> T | None:
    """Most specific first: instance op, instance ``*``, global op, global ``*``."""
    for table in tables:
        for key in (op, "*"):
            if key in table:
                return table[key]
    return None


def _first(values: list[T | None]) -> T | None:
    return next((v for v in values if v is not None), None)


def _envelope(code: int, message: str, data: Any) -> bytes:
    head = dumps({"code": code, "message": message, "time": time.strftime("%Y-%m-%d %H:%M:%S")})
    payload = bytes(data) if isinstance(data, RawJSON) else dumps(data)
    return head[:-1] + b',"data":' + payload + b',"detail":""}'


def _gap_bodies(appid: str, *event_types: str) -> list[bytes]:
    now = int(time.time())
    return [dumps(traffic.envelope(appid, kind, [{"sendTime": now}])) for kind in event_types]


def _gap_closed_body(appid: str, code: int, message: str | None = None) -> bytes:
    return dumps(traffic.envelope(appid, "GapClosed", [traffic.gap_closed_event(code, message)]))


async def _deliver(sim: SimState, deliveries: list[Delivery]) -> None:
    for inst, url, bodies in deliveries:
        async with inst.post_lock, sim.http() as client:
            for body in bodies:
                await traffic.post_body(client, url, body)


def _as_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def _require_usable(inst: Instance) -> None:
    if not inst.usable:
        raise Fail(CLOSED)


def _callback_url(body: dict[str, Any]) -> str:
    url = body.get("callbackUrl")
    if not isinstance(url, str) or not url:
        raise Fail("callbackUrl cannot be empty")
    return url


# --- operations ---------------------------------------------------------------


def _device_create(sim: SimState, body: dict[str, Any]) -> Any:
    kind = body.get("type")
    if not isinstance(kind, str) or not kind:
        raise Fail("type cannot be empty")
    version = body.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise Fail("version must be an integer")
    name = body.get("name")
    inst = sim.add_instance(name=name if isinstance(name, str) and name else "sim")
    return {"appid": inst.appid}


def _get_qr(call: Call, inst: Instance) -> Any:
    proxy = call.body.get("proxy")
    if not isinstance(proxy, str):
        raise Fail("proxy is required")
    if inst.connected:
        raise Fail("please close long client")
    inst.proxy = proxy
    session_id = uuid.uuid4().hex
    inst.qr[session_id] = QrSession(needs_code=call.qr_verify)
    return {"uuid": session_id, "imageBase64": QR_IMAGE, "refreshInterval": 30}


def _qr_session(call: Call, inst: Instance) -> tuple[str, QrSession | None]:
    session_id = call.body.get("uuid")
    if not isinstance(session_id, str):
        return "", None
    return session_id, inst.qr.get(session_id)


def _check_qr(call: Call, inst: Instance) -> Any:
    session_id, session = _qr_session(call, inst)
    if session is None:
        raise Fail("qrcode not found")
    if session.verified:
        status = 2
    else:
        steps = (-1, 1, 10) if session.needs_code else (-1, 1, 2)
        status = steps[min(session.polls, len(steps) - 1)]
    session.polls += 1
    session.last_status = status
    if status == 2:
        inst.logged_in = True
    return {"status": status, "uuid": session_id}


def _submit_qr_code(call: Call, inst: Instance) -> Any:
    _, session = _qr_session(call, inst)
    if session is None or session.last_status != 10:
        raise Fail("-12019 qrcode_not_need_verify")
    code = call.body.get("code")
    if not (isinstance(code, str) and len(code) == 6 and code.isdigit()):
        raise Fail("invalid verify code")
    session.verified = True
    return {}


def _reconnect(call: Call, inst: Instance) -> Any:
    proxy = call.body.get("proxy")
    if isinstance(proxy, str):
        inst.proxy = proxy
    if not inst.logged_in:
        raise Fail("not logged in")
    if call.reconnect_fails == "error":
        raise Fail("reconnect failed")
    if call.reconnect_fails == "silent":
        return {}
    was_up = inst.connected and inst.dropped_at is None
    inst.connected, inst.dropped_at = True, None
    inst.connection_changed_at = time.monotonic()
    if not was_up and inst.callback_url:
        call.later.append((inst, inst.callback_url, _gap_bodies(inst.appid, "GapConnected", "GapSucceed")))
    return {}


def _logout(call: Call, inst: Instance) -> Any:
    inst.logged_in = inst.connected = False
    inst.dropped_at = None
    inst.qr.clear()
    return {}


def _long_start(call: Call, inst: Instance) -> Any:
    url = _callback_url(call.body)
    if not inst.logged_in:
        raise Fail("not logged in")
    inst.connection_changed_at = time.monotonic()
    if inst.connected:
        # The running connection is reset; the callbackUrl of its start stays.
        inst.dropped_at = None
        raise Fail("started")
    inst.connected, inst.dropped_at = True, None
    inst.callback_url = url
    inst.push_history = bool(call.body.get("pushHistory"))
    call.later.append((inst, url, _gap_bodies(inst.appid, "GapConnected", "GapSucceed")))
    return {}


def _long_stop(call: Call, inst: Instance) -> Any:
    if inst.connected:
        inst.connected, inst.dropped_at = False, None
        if inst.callback_url:
            call.later.append((inst, inst.callback_url, [_gap_closed_body(inst.appid, 0)]))
    return {}


def _long_check(call: Call, inst: Instance) -> Any:
    if not inst.connected:
        raise Fail(CLOSED)
    now = time.monotonic()
    if inst.dropped_at is not None:
        grace = inst.drop_check_ok_for
        if grace is not None and now - inst.dropped_at >= grace:
            raise Fail(CLOSED)
        return None
    if now - inst.connection_changed_at < call.sim.check_warmup:
        raise Fail("long connection starting")
    return None


def _update_callback_url(call: Call, inst: Instance) -> Any:
    inst.callback_url = _callback_url(call.body)
    return {"appid": inst.appid, "callbackUrl": inst.callback_url}


def _get_profile(call: Call, inst: Instance) -> Any:
    _require_usable(inst)
    return {"appid": inst.appid, "userId": inst.user_id, "name": inst.name}


def _sync(call: Call, inst: Instance) -> Any:
    _require_usable(inst)
    limit, key = call.body.get("limit"), call.body.get("syncKey", 0)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise Fail("limit must be an integer >= 1")
    if not isinstance(key, int) or isinstance(key, bool):
        raise Fail("syncKey must be an integer")
    after = [m for m in inst.messages if m["syncKey"] > key]
    page = after[:limit]
    return {
        "count": len(page),
        "isEnd": len(after) <= limit,
        "list": page or None,
        "syncKey": page[-1]["syncKey"] if page else key,
    }


def _record(sim: SimState, inst: Instance, body: dict[str, Any], content_type: int, content: Any) -> Any:
    seq = len(inst.messages) + 1
    room = _as_int(body.get("conversationId")) or traffic.ROOM_ID_BASE + seq
    group = traffic.is_room_id(room)
    record = {
        "id": next(sim.message_ids),
        "syncKey": SYNC_KEY_BASE + seq,
        "messageType": 1 if group else 0,
        "fromUserId": inst.user_id,
        "toUserId": 0 if group else room,
        "roomId": room,
        "contentType": content_type,
        "flag": 0,
        "sendTime": int(time.time()),
        "appInfo": secrets.token_hex(8),
        "senderName": inst.name,
        "content": content,
    }
    inst.messages.append(record)
    return record


def _text_content(value: Any) -> Any:
    # A malformed text is accepted and leaves an empty message, as upstream does.
    return [{"type": 0, "text": value if isinstance(value, str) else ""}]


def _rich_content(value: Any) -> Any:
    if not isinstance(value, list):
        raise Fail("content must be an array")
    for fragment in value:
        if not isinstance(fragment, dict) or fragment.get("type") not in (0, 3):
            raise Fail("unsupported rich text type")
    return value


def _object(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _picked(*keys: str) -> Callable[[Any], Any]:
    def pick(value: Any) -> Any:
        given = _object(value)
        return {k: given[k] for k in keys if k in given}

    return pick


def _video_content(value: Any) -> Any:
    content = _object(value)
    token = secrets.token_hex(8)
    content.setdefault("path", f"/data/video/{token}.mp4")
    content.setdefault("sourcePath", f"/data/video/{token}.src.mp4")
    content.setdefault("uploadDir", "/data/video")
    return content


def _send(content_type: int, shape: Callable[[Any], Any]) -> Callable[[Call, Instance], Any]:
    def send(call: Call, inst: Instance) -> Any:
        _require_usable(inst)
        return _record(call.sim, inst, call.body, content_type, shape(call.body.get("content")))

    return send


def _echo(call: Call, inst: Instance) -> Any:
    head = dumps({"module": call.module, "action": call.action})
    return RawJSON(head[:-1] + b',"echo":' + call.raw.strip() + b"}")


HANDLERS: dict[str, Callable[[Call, Instance], Any]] = {
    "login/getQr": _get_qr,
    "login/checkQr": _check_qr,
    "login/submitQrCode": _submit_qr_code,
    "login/reconnect": _reconnect,
    "login/logout": _logout,
    "long/start": _long_start,
    "long/stop": _long_stop,
    "long/check": _long_check,
    "long/updateCallbackURL": _update_callback_url,
    "user/getProfile": _get_profile,
    "message/sync": _sync,
    "message/sendText": _send(0, _text_content),
    "message/sendRichText": _send(0, _rich_content),
    "message/sendImage": _send(14, _object),
    "message/sendGif": _send(29, _object),
    "message/sendFile": _send(15, _picked("id", "name", "url", "size", "md5")),
    "message/sendVoice": _send(16, _picked("id", "name", "url", "size", "voiceTime", "md5")),
    "message/sendVideo": _send(23, _video_content),
}


class _AbruptClose(Response):
    """Starts an answer and stops mid-body; the server then drops the connection."""

    def __init__(self) -> None:
        super().__init__(b"")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"64")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"code":0,', "more_body": True})


def _sim(request: Request) -> SimState:
    return cast(SimState, request.app.state.sim)


async def api(request: Request) -> Response:
    sim = _sim(request)
    module, action = request.path_params["module"], request.path_params["action"]
    op = f"{module}/{action}"
    raw = await request.body()
    try:
        # The stdlib parser keeps integers of any size exact.
        body = json.loads(raw.decode("utf-8"))
    except ValueError:
        body = None
    sim.calls.append({"path": request.url.path, "body": body})
    appid = body.get("appid") if isinstance(body, dict) else None
    inst = sim.instances.get(appid) if isinstance(appid, str) else None
    if inst is not None:
        inst.calls[op] += 1
    scopes = [inst.faults, sim.faults] if inst is not None else [sim.faults]

    slow = _lookup([f.slow for f in scopes], op)
    if slow:
        await asyncio.sleep(slow)
    http_error = _lookup([f.http_error for f in scopes], op)
    if http_error == "close":
        return _AbruptClose()
    if isinstance(http_error, int):
        return Response(b"simulated upstream failure", status_code=http_error, media_type="text/plain")

    call = Call(
        sim=sim,
        module=module,
        action=action,
        body=body if isinstance(body, dict) else {},
        raw=raw,
        qr_verify=bool(_first([f.qr_verify for f in scopes])),
        reconnect_fails=_first([f.reconnect_fails for f in scopes]),
    )
    code, message, data = 0, "ok", None
    try:
        forced = _lookup([f.error for f in scopes], op)
        if forced is not None:
            raise Fail(forced)
        if not isinstance(body, dict):
            raise Fail("request body must be a JSON object")
        if op == "device/create":
            data = _device_create(sim, body)
        elif inst is None:
            raise Fail("instance not found")
        else:
            data = HANDLERS.get(op, _echo)(call, inst)
    except Fail as exc:
        code, message, data = exc.code, exc.message, None
    task = BackgroundTask(_deliver, sim, call.later) if call.later else None
    return Response(_envelope(code, message, data), media_type="application/json", background=task)


# --- control API --------------------------------------------------------------


def _json(value: Any, status: int = 200, background: BackgroundTask | None = None) -> Response:
    return Response(dumps(value), status_code=status, media_type="application/json", background=background)


async def _control_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ControlError(400, "body is not JSON") from exc
    if not isinstance(value, dict):
        raise ControlError(400, "body must be a JSON object")
    return value


def _instance(sim: SimState, appid: Any) -> Instance:
    inst = sim.instances.get(appid) if isinstance(appid, str) else None
    if inst is None:
        raise ControlError(404, "instance not found")
    return inst


def _number(name: str, value: Any, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise ControlError(400, f"{name} must be a number >= {low}")
    return float(value)


async def seed_instance(request: Request) -> Response:
    sim, body = _sim(request), await _control_body(request)
    appid, name, url = body.get("appid"), body.get("name", "sim"), body.get("callbackUrl")
    if appid is not None and (not isinstance(appid, str) or not appid):
        raise ControlError(400, "appid must be a non-empty string")
    if not isinstance(name, str) or (url is not None and not isinstance(url, str)):
        raise ControlError(400, "name and callbackUrl must be strings")
    inst = sim.add_instance(appid, name=name)
    inst.logged_in, inst.callback_url = True, url
    inst.connected = bool(body.get("connected"))
    return _json({"appid": inst.appid}, status=201)


async def list_instances(request: Request) -> Response:
    return _json({"instances": list(_sim(request).instances)})


async def show_instance(request: Request) -> Response:
    return _json(_instance(_sim(request), request.path_params["appid"]).snapshot())


def _update(table: dict[str, T], value: Any, check: Callable[[Any], T]) -> None:
    if value is None:
        table.clear()
    elif isinstance(value, dict):
        for op, item in value.items():
            if item is None:
                table.pop(op, None)
            else:
                table[op] = check(item)
    else:
        table["*"] = check(value)


def _check_message(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ControlError(400, "error must be a non-empty message")
    return value


def _check_status(value: Any) -> int | str:
    if value == "close" or (isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599):
        return cast(int | str, value)
    raise ControlError(400, 'http_error must be a 4xx/5xx status or "close"')


def _set_settings(faults: Faults, body: dict[str, Any]) -> None:
    if "slow" in body:
        _update(faults.slow, body["slow"], lambda v: _number("slow", v))
    if "error" in body:
        _update(faults.error, body["error"], _check_message)
    if "http_error" in body:
        _update(faults.http_error, body["http_error"], _check_status)
    if "reconnect_fails" in body:
        mode = body["reconnect_fails"]
        if mode not in (True, False, None, "silent", "error"):
            raise ControlError(400, 'reconnect_fails must be a bool, "silent" or "error"')
        faults.reconnect_fails = "silent" if mode is True else (mode or None)
    if "qr_verify" in body:
        if body["qr_verify"] not in (True, False, None):
            raise ControlError(400, "qr_verify must be a bool")
        faults.qr_verify = body["qr_verify"]


def _act(targets: list[Instance], body: dict[str, Any]) -> list[Delivery]:
    deliveries: list[Delivery] = []
    if "drop" in body:
        drop = body["drop"]
        grace = None if isinstance(drop, bool) else _number("drop", drop)
        for inst in targets:
            if drop is False:
                inst.dropped_at = None
            elif inst.connected and inst.dropped_at is None:
                inst.dropped_at, inst.drop_check_ok_for = time.monotonic(), grace
    if "gap_closed" in body:
        spec = body["gap_closed"]
        spec = spec if isinstance(spec, dict) else {"code": spec}
        code, message = spec.get("code"), spec.get("message")
        if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str | None):
            raise ControlError(400, "gap_closed must be a code or {code, message}")
        for inst in targets:
            if not inst.connected:
                continue
            inst.connected, inst.dropped_at = False, None
            if code in SESSION_ENDING_CODES:
                inst.logged_in = False
            if inst.callback_url:
                deliveries.append((inst, inst.callback_url, [_gap_closed_body(inst.appid, code, message)]))
    return deliveries


async def set_faults(request: Request) -> Response:
    sim, body = _sim(request), await _control_body(request)
    if body.get("appid") is None:
        faults, targets = sim.faults, list(sim.instances.values())
    else:
        inst = _instance(sim, body["appid"])
        faults, targets = inst.faults, [inst]
    _set_settings(faults, body)
    deliveries = _act(targets, body)
    task = BackgroundTask(_deliver, sim, deliveries) if deliveries else None
    return _json({"faults": faults.snapshot()}, background=task)


async def show_faults(request: Request) -> Response:
    sim = _sim(request)
    per_instance = {a: i.faults.snapshot() for a, i in sim.instances.items() if i.faults != Faults()}
    return _json({"global": sim.faults.snapshot(), "instances": per_instance})


async def clear_faults(request: Request) -> Response:
    sim = _sim(request)
    sim.faults = Faults()
    for inst in sim.instances.values():
        inst.faults = Faults()
    return _json({"cleared": True})


async def show_calls(request: Request) -> Response:
    return _json(list(_sim(request).calls))


async def clear_calls(request: Request) -> Response:
    sim = _sim(request)
    cleared = len(sim.calls)
    sim.calls.clear()
    return _json({"cleared": cleared})


async def start_traffic(request: Request) -> Response:
    sim, body = _sim(request), await _control_body(request)
    inst = _instance(sim, body.get("appid"))
    if sim.client is None:
        raise ControlError(409, "traffic needs the app's lifespan to be running")
    if not inst.callback_url or not inst.usable:
        raise ControlError(409, "instance has no usable long connection with a callbackUrl")
    count = body.get("count", 10)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ControlError(400, "count must be an integer >= 1")
    duplicates = _number("duplicates", body.get("duplicates", 0.0))
    kinds = body.get("kinds") or list(traffic.KINDS)
    if not isinstance(kinds, list) or not set(kinds) <= set(traffic.KINDS):
        raise ControlError(400, f"kinds must be a list drawn from {', '.join(traffic.KINDS)}")
    if duplicates > 1:
        raise ControlError(400, "duplicates is a fraction between 0 and 1")
    seed = body.get("seed")
    run = traffic.TrafficRun(
        appid=inst.appid,
        url=inst.callback_url,
        count=count,
        rate=_number("rate", body.get("rate", 10.0)),
        seconds=_number("seconds", body.get("seconds", 60.0)),
    )
    stream = traffic.posts(
        random.Random(seed),
        appid=inst.appid,
        owner=inst.user_id,
        kinds=kinds,
        duplicates=duplicates,
        clock=time.time,
    )
    run_id = uuid.uuid4().hex[:12]
    sim.runs[run_id] = run
    task = asyncio.create_task(traffic.run_traffic(sim.client, run, stream, active=lambda: inst.usable))
    sim.tasks.add(task)
    task.add_done_callback(sim.tasks.discard)
    return _json({"id": run_id, **run.snapshot()}, status=202)


async def list_traffic(request: Request) -> Response:
    return _json({run_id: run.snapshot() for run_id, run in _sim(request).runs.items()})


async def show_traffic(request: Request) -> Response:
    run = _sim(request).runs.get(request.path_params["run_id"])
    if run is None:
        raise ControlError(404, "traffic run not found")
    return _json(run.snapshot())


async def sink_receive(request: Request) -> Response:
    raw = await request.body()
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    doc = doc if isinstance(doc, dict) else {}
    events = doc.get("events")
    entry = {name: request.headers.get(name) for name in SINK_HEADERS}
    _sim(request).sink.append({**entry, "body": raw.decode("utf-8", "replace")})
    print(
        f"sink: {doc.get('event_type')} events={len(events) if isinstance(events, list) else 0} "
        f"delivery={entry['X-Svc-Delivery-Id']} body={raw[:200].decode('utf-8', 'replace')}",
        flush=True,
    )
    return _json({"ok": True})


async def sink_list(request: Request) -> Response:
    return _json(list(_sim(request).sink))


async def config(request: Request) -> Response:
    sim = _sim(request)
    if request.method == "POST":
        body = await _control_body(request)
        if "check_warmup" in body:
            sim.check_warmup = _number("check_warmup", body["check_warmup"])
    return _json({"check_warmup": sim.check_warmup})


async def _control_error(request: Request, exc: Exception) -> Response:
    error = cast(ControlError, exc)
    return _json({"error": error.message}, status=error.status)


def _lifespan(sim: SimState) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with _new_client() as client:
            sim.client = client
            try:
                yield
            finally:
                sim.client = None
                running = list(sim.tasks)
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)

    return lifespan


def create_app(*, check_warmup: float = 3.0) -> Starlette:
    """A fresh simulator with empty state; ``check_warmup`` is the long/check settling time."""
    sim = SimState(check_warmup=check_warmup)
    routes = [
        Route("/svc/api/{module}/{action}", api, methods=["POST"]),
        Route("/_sim/instances", seed_instance, methods=["POST"]),
        Route("/_sim/instances", list_instances, methods=["GET"]),
        Route("/_sim/instances/{appid}", show_instance, methods=["GET"]),
        Route("/_sim/faults", set_faults, methods=["POST"]),
        Route("/_sim/faults", show_faults, methods=["GET"]),
        Route("/_sim/faults", clear_faults, methods=["DELETE"]),
        Route("/_sim/calls", show_calls, methods=["GET"]),
        Route("/_sim/calls", clear_calls, methods=["DELETE"]),
        Route("/_sim/traffic", start_traffic, methods=["POST"]),
        Route("/_sim/traffic", list_traffic, methods=["GET"]),
        Route("/_sim/traffic/{run_id}", show_traffic, methods=["GET"]),
        Route("/_sim/config", config, methods=["GET", "POST"]),
        Route("/_sim/sink", sink_receive, methods=["POST"]),
        Route("/_sim/sink", sink_list, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=_lifespan(sim), exception_handlers={ControlError: _control_error})
    app.state.sim = sim
    return app


def run(host: str, port: int) -> None:
    """Serve a simulator until interrupted."""
    uvicorn.run(create_app(), host=host, port=port)
