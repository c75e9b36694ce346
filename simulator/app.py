"""The capability-layer simulator app: the operations endpoint, the control API, and serving.

``POST /svc/api/{module}/{action}`` runs one operation (``simulator.capabilities``)
against the simulator's state (``simulator.state``). Every answer is HTTP 200
with the envelope ``{code, message, time, data, detail}``; failures carry
``code -1`` and the spec's message. Before the operation runs, the endpoint logs
the call and applies the faults that act on the HTTP exchange itself: ``slow``
delays the answer, ``http_error`` answers a bare status or drops the connection
mid-answer, ``error`` forces a failure answer.

Callbacks (``GapConnected`` + ``GapSucceed`` after a start or a reconnect,
``GapClosed`` after a stop or an injected close) are posted after the answer
has gone out, in order per instance, to the instance's ``callbackUrl``.

The control API under ``/_sim`` is described in ``simulator.control``.
``create_app`` builds a simulator with empty state; ``run`` serves one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from simulator import control
from simulator.capabilities import Call, perform
from simulator.state import Instance, SimState, first, lookup, new_client

__all__ = ["Instance", "SimState", "create_app", "run"]


class _AbruptClose(Response):
    """Starts an answer and stops mid-body; the server then drops the connection."""

    def __init__(self) -> None:
        super().__init__(b"")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"64")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"code":0,', "more_body": True})


async def api(request: Request) -> Response:
    sim = control.sim_of(request)
    module, action = request.path_params["module"], request.path_params["action"]
    op = f"{module}/{action}"
    raw = await request.body()
    try:
        # The stdlib parser keeps integers of any size exact.
        body = json.loads(raw.decode("utf-8"))
    except ValueError:
        body = None
    sim.calls.append({"path": request.url.path, "body": body})
    inst = sim.find(body.get("appid")) if isinstance(body, dict) else None
    if inst is not None:
        inst.calls[op] += 1
    scopes = sim.scopes(inst)

    slow = lookup([f.slow for f in scopes], op)
    if slow:
        await asyncio.sleep(slow)
    http_error = lookup([f.http_error for f in scopes], op)
    if http_error == "close":
        return _AbruptClose()
    if isinstance(http_error, int):
        return Response(b"simulated upstream failure", status_code=http_error, media_type="text/plain")

    call = Call(
        sim=sim,
        module=module,
        action=action,
        parsed=body,
        raw=raw,
        qr_verify=bool(first([f.qr_verify for f in scopes])),
        reconnect_fails=first([f.reconnect_fails for f in scopes]),
    )
    answer = perform(call, inst, forced=lookup([f.error for f in scopes], op))
    task = BackgroundTask(sim.deliver, call.later) if call.later else None
    return Response(answer, media_type="application/json", background=task)


def _lifespan(sim: SimState) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with new_client() as client:
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
    routes = [Route("/svc/api/{module}/{action}", api, methods=["POST"]), *control.ROUTES]
    app = Starlette(
        routes=routes,
        lifespan=_lifespan(sim),
        exception_handlers={control.ControlError: control.control_error},
    )
    app.state.sim = sim
    return app


def run(host: str, port: int) -> None:
    """Serve a simulator until interrupted."""
    uvicorn.run(create_app(), host=host, port=port)
