"""The capability layer's operations as the simulator plays them: one function per ``module/action``, over its state.

Operations are ``POST /svc/api/{module}/{action}`` with a JSON object body.
Implemented: ``device/create``, ``login/{getQr,checkQr,submitQrCode,reconnect,
logout}``, ``long/{start,stop,check,updateCallbackURL}``, ``message/{sync,
sendText,sendRichText,sendImage,sendGif,sendFile,sendVoice,sendVideo}`` and the
business read ``user/getProfile``. Any other operation echoes ``{module, action,
echo: <request body as sent>}``. Every call except ``device/create`` needs an
``appid`` the simulator knows, else ``instance not found``.

``user/getProfile`` is the business read that proves a connection: it answers
code 0 only while the instance is logged in and its long connection is up and
not silently lost; otherwise ``-1 long connection closed``. ``long/check`` says
less: it stays at code 0 after a silent drop, and answers non-zero for
``check_warmup`` seconds after ``long/start`` or ``login/reconnect``.

An operation takes the ``Call`` and the instance, changes the state, and
returns the answer's ``data``; it refuses by raising ``Fail`` (the answer is
still HTTP 200, with a non-zero code). Callbacks it owes are appended to
``Call.later`` and posted by the caller after the answer has gone out.
``perform`` runs one call and returns the answer envelope
``{code, message, time, data, detail}`` as bytes.
"""

from __future__ import annotations

import base64
import io
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import segno

from simulator import traffic
from simulator.state import Delivery, Instance, QrSession, SimState
from simulator.traffic import dumps

__all__ = ["HANDLERS", "Call", "Fail", "RawJSON", "envelope", "perform"]

SYNC_KEY_BASE = 1_000_000_000
CLOSED = "long connection closed"
QR_REFRESH_SECONDS = 30


class Fail(Exception):
    """An operation's failure answer (HTTP 200, non-zero code)."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class RawJSON(bytes):
    """Data already serialized, spliced into the envelope as it is."""


@dataclass
class Call:
    """One operation call: the request as parsed (maybe not an object) and as sent, and the faults in effect."""

    sim: SimState
    module: str
    action: str
    parsed: Any
    raw: bytes
    qr_verify: bool
    reconnect_fails: str | None
    later: list[Delivery] = field(default_factory=list)

    @property
    def op(self) -> str:
        return f"{self.module}/{self.action}"

    @property
    def body(self) -> dict[str, Any]:
        """The body as a JSON object; empty when it was something else."""
        return self.parsed if isinstance(self.parsed, dict) else {}


def envelope(code: int, message: str, data: Any) -> bytes:
    head = dumps({"code": code, "message": message, "time": time.strftime("%Y-%m-%d %H:%M:%S")})
    payload = bytes(data) if isinstance(data, RawJSON) else dumps(data)
    return head[:-1] + b',"data":' + payload + b',"detail":""}'


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


# --- device and login -----------------------------------------------------------


def device_create(call: Call) -> Any:
    body = call.body
    kind = body.get("type")
    if not isinstance(kind, str) or not kind:
        raise Fail("type cannot be empty")
    version = body.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise Fail("version must be an integer")
    name = body.get("name")
    inst = call.sim.add_instance(name=name if isinstance(name, str) and name else "sim")
    return {"appid": inst.appid}


def get_qr(call: Call, inst: Instance) -> Any:
    proxy = call.body.get("proxy")
    if not isinstance(proxy, str):
        raise Fail("proxy is required")
    if inst.connected:
        raise Fail("please close long client")
    inst.proxy = proxy
    session_id = uuid.uuid4().hex
    inst.qr[session_id] = QrSession(needs_code=call.qr_verify, manual=not call.sim.qr_auto)
    return {"uuid": session_id, "imageBase64": qr_image(session_id), "refreshInterval": QR_REFRESH_SECONDS}


def qr_image(session_id: str) -> str:
    """A real QR code (PNG, base64 without a ``data:`` prefix) of the login session, as a phone would scan it."""
    png = io.BytesIO()
    segno.make(f"svcgw-sim-login:{session_id}", error="m").save(png, kind="png", scale=5, border=2)
    return base64.b64encode(png.getvalue()).decode("ascii")


def _qr_session(call: Call, inst: Instance) -> tuple[str, QrSession | None]:
    session_id = call.body.get("uuid")
    if not isinstance(session_id, str):
        return "", None
    return session_id, inst.qr.get(session_id)


def check_qr(call: Call, inst: Instance) -> Any:
    session_id, session = _qr_session(call, inst)
    if session is None:
        raise Fail("qrcode not found")
    status = session.poll()
    if status == 2:
        inst.logged_in = True
    return {"status": status, "uuid": session_id}


def submit_qr_code(call: Call, inst: Instance) -> Any:
    _, session = _qr_session(call, inst)
    if session is None or session.last_status != 10:
        raise Fail("-12019 qrcode_not_need_verify")
    code = call.body.get("code")
    if not (isinstance(code, str) and len(code) == 6 and code.isdigit()):
        raise Fail("invalid verify code")
    if session.code is not None and not secrets.compare_digest(code, session.code):
        raise Fail("invalid verify code")
    session.verified = True
    return {}


def reconnect(call: Call, inst: Instance) -> Any:
    proxy = call.body.get("proxy")
    if isinstance(proxy, str):
        inst.proxy = proxy
    if not inst.logged_in:
        raise Fail("not logged in")
    if call.reconnect_fails == "error":
        raise Fail("reconnect failed")
    if call.reconnect_fails == "silent":
        return {}
    call.later += inst.connect()
    return {}


def logout(call: Call, inst: Instance) -> Any:
    inst.logged_in = inst.connected = False
    inst.dropped_at = None
    inst.qr.clear()
    return {}


# --- long connection ------------------------------------------------------------


def long_start(call: Call, inst: Instance) -> Any:
    url = _callback_url(call.body)
    if not inst.logged_in:
        raise Fail("not logged in")
    if inst.connected:
        # The running connection is reset; the callbackUrl of its start stays.
        inst.connection_changed_at = time.monotonic()
        inst.dropped_at = None
        raise Fail("started")
    inst.callback_url = url
    inst.push_history = bool(call.body.get("pushHistory"))
    call.later += inst.connect()
    return {}


def long_stop(call: Call, inst: Instance) -> Any:
    call.later += inst.close(0)
    return {}


def long_check(call: Call, inst: Instance) -> Any:
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


def update_callback_url(call: Call, inst: Instance) -> Any:
    inst.callback_url = _callback_url(call.body)
    return {"appid": inst.appid, "callbackUrl": inst.callback_url}


def get_profile(call: Call, inst: Instance) -> Any:
    _require_usable(inst)
    return {"appid": inst.appid, "userId": inst.user_id, "name": inst.name}


# --- messages -------------------------------------------------------------------


def sync(call: Call, inst: Instance) -> Any:
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


def send(content_type: int, shape: Callable[[Any], Any]) -> Callable[[Call, Instance], Any]:
    """The ``message/send*`` operation that records a message of ``content_type`` with content ``shape``d."""

    def send_message(call: Call, inst: Instance) -> Any:
        _require_usable(inst)
        return _record(call.sim, inst, call.body, content_type, shape(call.body.get("content")))

    return send_message


def echo(call: Call, inst: Instance) -> Any:
    head = dumps({"module": call.module, "action": call.action})
    return RawJSON(head[:-1] + b',"echo":' + call.raw.strip() + b"}")


HANDLERS: dict[str, Callable[[Call, Instance], Any]] = {
    "login/getQr": get_qr,
    "login/checkQr": check_qr,
    "login/submitQrCode": submit_qr_code,
    "login/reconnect": reconnect,
    "login/logout": logout,
    "long/start": long_start,
    "long/stop": long_stop,
    "long/check": long_check,
    "long/updateCallbackURL": update_callback_url,
    "user/getProfile": get_profile,
    "message/sync": sync,
    "message/sendText": send(0, _text_content),
    "message/sendRichText": send(0, _rich_content),
    "message/sendImage": send(14, _object),
    "message/sendGif": send(29, _object),
    "message/sendFile": send(15, _picked("id", "name", "url", "size", "md5")),
    "message/sendVoice": send(16, _picked("id", "name", "url", "size", "voiceTime", "md5")),
    "message/sendVideo": send(23, _video_content),
}


def perform(call: Call, inst: Instance | None, forced: str | None) -> bytes:
    """Run one call and answer its envelope; ``forced`` is an injected error message that wins over all."""
    code, message, data = 0, "ok", None
    try:
        if forced is not None:
            raise Fail(forced)
        if not isinstance(call.parsed, dict):
            raise Fail("request body must be a JSON object")
        if call.op == "device/create":
            data = device_create(call)
        elif inst is None:
            raise Fail("instance not found")
        else:
            data = HANDLERS.get(call.op, echo)(call, inst)
    except Fail as exc:
        code, message, data = exc.code, exc.message, None
    return envelope(code, message, data)
