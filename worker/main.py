"""One worker process: the delivery engine and the liveness prober on one event loop.

Both roles run as tasks of one ``asyncio.Runner`` (uvloop when installed)
and share one ``redis.asyncio`` client. SIGTERM and SIGINT stop both: the
engine lets attempts in flight finish within the delivery timeout and hands
back what it still holds, and the prober hands back the probes it has not
finished (see ``worker.engine`` and ``worker.prober``). With ``burst`` the
engine stops once nothing is left to deliver, and the prober with it.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from svcgw import layout
from svcgw.connections import async_client
from svcgw.settings import Settings
from svcgw.vault import TokenVault

from . import presence, prober
from .engine import Engine, loop_factory

__all__ = ["run", "serve"]

log = logging.getLogger("svcgw")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run(settings: Settings, *, burst: bool = False) -> None:
    """Run the worker until a signal stops it (or, with ``burst``, until nothing is left to deliver)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(serve(settings, burst=burst))


async def serve(settings: Settings, *, burst: bool = False, stop: asyncio.Event | None = None) -> None:
    """The worker on the running loop; :func:`run` starts a loop of its own for it.

    ``stop``, when given, stops it instead of the signals: signal handlers
    belong to the main thread, and a worker on another thread (the tests')
    is stopped by setting that event from its loop.
    """
    # One stop signal for the whole process: the engine and the prober both wait on it.
    signals = SIGNALS if stop is None else ()
    stop = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        log.info("worker stopping (signal %d)", signum)
        stop.set()

    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    redis = async_client(settings)
    await layout.mark_at_start(redis)
    engine = Engine(settings, redis, TokenVault.from_settings(settings))
    probing = asyncio.create_task(prober.serve(settings, redis, stop), name="prober")
    registered = presence.attach(engine, settings, redis)  # rq info and rq-dashboard list the worker
    await registered.start()
    beating = asyncio.create_task(registered.serve(stop), name="presence")
    try:
        await engine.serve(stop, burst=burst)
    finally:
        stop.set()
        await asyncio.gather(probing, beating, return_exceptions=True)
        await registered.stop()
        for signum in signals:
            loop.remove_signal_handler(signum)
        await redis.aclose()
