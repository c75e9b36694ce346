"""The simulator's control API: hooks for tests and demos under ``/_sim``.

Plain JSON, no envelope. A refused request raises ``ControlError`` (status and
message), answered as ``{"error": text}`` with 400, 404 or 409.

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
- ``POST /_sim/qr`` ``{appid, action, uuid?, code?}``: the person with the phone acts on
  the instance's QR code (the newest one, or ``uuid``): ``scan`` (checkQr says 1),
  ``confirm`` (2, or 10 if a code is required and was not sent yet), ``cancel`` (4),
  ``code`` (10: a six-digit code is required; ``code`` sets which one, else one is
  drawn; either way it is answered). Answers ``{uuid, status, code?}``; 404 without a
  QR code, 400 for an unknown action or a code that is not six digits. A session that
  was acted on waits for the next action instead of moving on by itself.
- ``GET /_sim/config``, ``POST /_sim/config`` ``{check_warmup, qr_auto}``: ``qr_auto``
  false makes every new QR code wait for ``/_sim/qr`` (the demo and the console's
  browser test); true (the default) moves it on by one step per checkQr poll.
- ``POST /_sim/sink``: a demo callback endpoint; it keeps the last 100 callbacks (the
  ``X-Svc-Timestamp``, ``X-Svc-Signature`` and ``X-Svc-Delivery-Id`` headers and the raw
  body) and logs one line for each; ``GET /_sim/sink`` lists them, oldest first.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from simulator import traffic
from simulator.state import Delivery, Faults, Instance, SimState
from simulator.traffic import dumps

__all__ = ["ROUTES", "ControlError", "control_error", "json_answer", "sim_of"]

T = TypeVar("T")

SINK_HEADERS = ("X-Svc-Timestamp", "X-Svc-Signature", "X-Svc-Delivery-Id")


class ControlError(Exception):
    """A refused control request: answered ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def sim_of(request: Request) -> SimState:
    """The state of the simulator app serving ``request``."""
    return cast(SimState, request.app.state.sim)


def json_answer(value: Any, status: int = 200, background: BackgroundTask | None = None) -> Response:
    return Response(dumps(value), status_code=status, media_type="application/json", background=background)


async def control_error(request: Request, exc: Exception) -> Response:
    error = cast(ControlError, exc)
    return json_answer({"error": error.message}, status=error.status)


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
    inst = sim.find(appid)
    if inst is None:
        raise ControlError(404, "instance not found")
    return inst


def _number(name: str, value: Any, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
        raise ControlError(400, f"{name} must be a number >= {low}")
    return float(value)


# --- instances ------------------------------------------------------------------


async def seed_instance(request: Request) -> Response:
    sim, body = sim_of(request), await _control_body(request)
    appid, name, url = body.get("appid"), body.get("name", "sim"), body.get("callbackUrl")
    if appid is not None and (not isinstance(appid, str) or not appid):
        raise ControlError(400, "appid must be a non-empty string")
    if not isinstance(name, str) or (url is not None and not isinstance(url, str)):
        raise ControlError(400, "name and callbackUrl must be strings")
    inst = sim.add_instance(appid, name=name)
    inst.logged_in, inst.callback_url = True, url
    inst.connected = bool(body.get("connected"))
    return json_answer({"appid": inst.appid}, status=201)


async def list_instances(request: Request) -> Response:
    return json_answer({"instances": list(sim_of(request).instances)})


async def show_instance(request: Request) -> Response:
    return json_answer(_instance(sim_of(request), request.path_params["appid"]).snapshot())


# --- faults ---------------------------------------------------------------------


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
            else:
                inst.drop(grace)
    if "gap_closed" in body:
        spec = body["gap_closed"]
        spec = spec if isinstance(spec, dict) else {"code": spec}
        code, message = spec.get("code"), spec.get("message")
        if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str | None):
            raise ControlError(400, "gap_closed must be a code or {code, message}")
        for inst in targets:
            deliveries += inst.close(code, message)
    return deliveries


async def set_faults(request: Request) -> Response:
    sim, body = sim_of(request), await _control_body(request)
    if body.get("appid") is None:
        faults, targets = sim.faults, list(sim.instances.values())
    else:
        inst = _instance(sim, body["appid"])
        faults, targets = inst.faults, [inst]
    _set_settings(faults, body)
    deliveries = _act(targets, body)
    task = BackgroundTask(sim.deliver, deliveries) if deliveries else None
    return json_answer({"faults": faults.snapshot()}, background=task)


async def show_faults(request: Request) -> Response:
    sim = sim_of(request)
    per_instance = {a: i.faults.snapshot() for a, i in sim.instances.items() if i.faults != Faults()}
    return json_answer({"global": sim.faults.snapshot(), "instances": per_instance})


async def clear_faults(request: Request) -> Response:
    sim = sim_of(request)
    sim.faults = Faults()
    for inst in sim.instances.values():
        inst.faults = Faults()
    return json_answer({"cleared": True})


# --- call log -------------------------------------------------------------------


async def show_calls(request: Request) -> Response:
    return json_answer(list(sim_of(request).calls))


async def clear_calls(request: Request) -> Response:
    sim = sim_of(request)
    cleared = len(sim.calls)
    sim.calls.clear()
    return json_answer({"cleared": cleared})


# --- traffic --------------------------------------------------------------------


async def start_traffic(request: Request) -> Response:
    sim, body = sim_of(request), await _control_body(request)
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
    return json_answer({"id": run_id, **run.snapshot()}, status=202)


async def list_traffic(request: Request) -> Response:
    return json_answer({run_id: run.snapshot() for run_id, run in sim_of(request).runs.items()})


async def show_traffic(request: Request) -> Response:
    run = sim_of(request).runs.get(request.path_params["run_id"])
    if run is None:
        raise ControlError(404, "traffic run not found")
    return json_answer(run.snapshot())


# --- QR login, as the person holding the phone ------------------------------------

QR_ACTIONS = ("scan", "confirm", "cancel", "code")


async def act_on_qr(request: Request) -> Response:
    sim, body = sim_of(request), await _control_body(request)
    inst = _instance(sim, body.get("appid"))
    action, session_id, code = body.get("action"), body.get("uuid"), body.get("code")
    if action not in QR_ACTIONS:
        raise ControlError(400, f"action must be one of {', '.join(QR_ACTIONS)}")
    if session_id is None and inst.qr:
        session_id = next(reversed(inst.qr))  # the newest code shown
    session = inst.qr.get(session_id) if isinstance(session_id, str) else None
    if session is None:
        raise ControlError(404, "no such QR code (call login/getQr first)")
    if action == "code":
        if code is None:
            code = f"{secrets.randbelow(10**6):06d}"
        if not (isinstance(code, str) and len(code) == 6 and code.isdigit()):
            raise ControlError(400, "code must be six digits")
    session.act(action, code if action == "code" else None)
    answer: dict[str, Any] = {"uuid": session_id, "status": session.status}
    if session.code is not None:
        answer["code"] = session.code
    return json_answer(answer)


# --- demo sink and config -------------------------------------------------------


async def sink_receive(request: Request) -> Response:
    raw = await request.body()
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    doc = doc if isinstance(doc, dict) else {}
    events = doc.get("events")
    entry = {name: request.headers.get(name) for name in SINK_HEADERS}
    sim_of(request).sink.append({**entry, "body": raw.decode("utf-8", "replace")})
    print(
        f"sink: {doc.get('event_type')} events={len(events) if isinstance(events, list) else 0} "
        f"delivery={entry['X-Svc-Delivery-Id']} body={raw[:200].decode('utf-8', 'replace')}",
        flush=True,
    )
    return json_answer({"ok": True})


async def sink_list(request: Request) -> Response:
    return json_answer(list(sim_of(request).sink))


async def config(request: Request) -> Response:
    sim = sim_of(request)
    if request.method == "POST":
        body = await _control_body(request)
        if "check_warmup" in body:
            sim.check_warmup = _number("check_warmup", body["check_warmup"])
        if "qr_auto" in body:
            if not isinstance(body["qr_auto"], bool):
                raise ControlError(400, "qr_auto must be true or false")
            sim.qr_auto = body["qr_auto"]
    return json_answer({"check_warmup": sim.check_warmup, "qr_auto": sim.qr_auto})


ROUTES = [
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
    Route("/_sim/qr", act_on_qr, methods=["POST"]),
    Route("/_sim/config", config, methods=["GET", "POST"]),
    Route("/_sim/sink", sink_receive, methods=["POST"]),
    Route("/_sim/sink", sink_list, methods=["GET"]),
]
