"""One worker process: the delivery engine and the liveness prober on one event loop.

Both roles run as tasks of one ``asyncio.Runner`` (uvloop when installed).
Every process delivers and probes for every shard (``SVCGW_REDIS_SHARDS``):
each shard has its own ``redis.asyncio`` client, engine, prober and RQ
registration, and they all wait on the process's one stop event. A shard
that is down or failing over holds up only its own: its engine and prober
retry with a growing pause, and an engine that fails outright is started
again after one (:func:`_deliver`), while the other shards' go on.

The engines share one callback client and the process's caps per
destination and per account, as one engine had them, and its probing of
destinations whose attempts time out (:mod:`worker.breaker`). On a Redis
Cluster they also share the worker's slots (``SVCGW_DELIVERY_CONCURRENCY``),
as one Redis's one engine has them (:mod:`worker.sharedslots`).

SIGTERM and SIGINT stop them all: each engine lets attempts in flight
finish within the delivery timeout and hands back what it still holds, and
each prober hands back the probes it has not finished (see
``worker.engine`` and ``worker.prober``). With ``burst`` each engine stops
once nothing is left to deliver on its shard, and the probers once every
engine has.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from svcgw.callbacks.outbound import sender_for
from svcgw.config.settings import Settings
from svcgw.shards.clients import aclose_all, role_clients
from svcgw.shards.serverfacts import check_shards, log_reports
from svcgw.storage import layoutversion
from svcgw.vault import TokenVault

from . import presence, prober
from .engine import Engine, loop_factory
from .presence import Presence
from .sharedslots import SharedSlots

__all__ = ["run", "serve"]

log = logging.getLogger("svcgw")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long the start waits for each shard's settings (svcgw.storage.serverchecks); one down is not waited for.
SETTINGS_CHECK_SECONDS = 2.0

# An engine that ended on an error starts again after this long at most (doubling from a tenth of a second).
RESTART_PAUSE_MAX = 5.0


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
    clients = role_clients(settings)
    # Said at start, in the worker's log too: a Redis that evicts or forgets loses deliveries.
    reports = await check_shards(
        clients, persistence_required=settings.redis_persistence_required, timeout=SETTINGS_CHECK_SECONDS
    )
    log_reports(reports, log)
    vault = TokenVault.from_settings(settings)
    # The shards' engines share the process's callback client and its caps per destination and per
    # account, as one engine had them: more shards is not more connections to one destination.
    sender = sender_for(settings)
    # Each part's log lines name its shard when there are several: the same lines come once per shard.
    shard_of = (lambda index: index) if len(clients) > 1 else (lambda index: None)
    first = Engine(settings, clients[0].redis, vault, client=sender, keys=clients[0].keys, shard=shard_of(0))
    engines = [
        first,
        *(
            Engine(settings, redis, vault, client=sender, name=first.name, keys=keys, shard=shard_of(index))
            for index, (redis, keys) in enumerate(clients[1:], 1)
        ),
    ]
    for engine in engines[1:]:
        engine.gate = first.gate
    if settings.shard_layout.cluster:
        # Its virtual shards are one deployment: the worker claims what one Redis's would (worker.sharedslots).
        shared = SharedSlots(first.shared.total, first.shared.low, ramp=True)
        for engine in engines:
            engine.shared = shared
    registrations: list[Presence] = []
    helpers: list[asyncio.Task[None]] = []
    try:
        for index, ((redis, keys), engine) in enumerate(zip(clients, engines, strict=True)):
            await layoutversion.mark_at_start(redis, keys)  # a shard that is down is marked at its first post instead
            probing = prober.serve(settings, redis, keys, stop, shard=shard_of(index))
            helpers.append(asyncio.create_task(probing, name=f"prober-{index}"))
            # rq info and rq-dashboard list the worker
            registered = presence.attach(engine, settings, redis, shard=shard_of(index))
            await registered.start()
            registrations.append(registered)
            helpers.append(asyncio.create_task(registered.serve(stop), name=f"presence-{index}"))
        await asyncio.gather(*(_deliver(engine, index, stop, burst) for index, engine in enumerate(engines)))
    finally:
        stop.set()
        await asyncio.gather(*helpers, return_exceptions=True)
        for registered in registrations:
            await registered.stop()
        for signum in signals:
            loop.remove_signal_handler(signum)
        await aclose_all(clients)
        await sender.aclose()


async def _deliver(engine: Engine, shard: int, stop: asyncio.Event, burst: bool) -> None:
    """One shard's engine until ``stop`` (or, with ``burst``, its shard is empty); started again after an error.

    The engine rides out Redis errors itself; anything that still ends it
    (its shard failing in its shutdown, say) must not end the process, nor
    the other shards' engines.
    """
    failures = 0
    while True:
        try:
            await engine.serve(stop, burst=burst)
            return
        except Exception:
            if stop.is_set():
                return
            failures += 1
            pause = min(0.1 * 2**failures, RESTART_PAUSE_MAX)
            log.exception("delivery engine of shard %d stopped; starting it again in %.1fs", shard, pause)
            try:
                await asyncio.wait_for(stop.wait(), pause)
            except TimeoutError:
                pass
