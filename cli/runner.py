"""Running the roles: the HTTP server, the worker, and ``up`` (everything at once).

``up`` owns the process tree: it starts the embedded Redis (when no
``SVCGW_REDIS_URL`` is given) before every other role and stops it after
all of them, so no worker ever outlives the Redis it writes to. On SIGINT
or SIGTERM the HTTP server stops first (no new acknowledgements), then the
workers finish or hand back what they hold, then Redis flushes and exits.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from svcgw.config.settings import Settings

__all__ = ["run_server", "run_up", "run_worker", "server_options"]

log = logging.getLogger("svcgw")

# Allocations of tracked objects (net of those freed) between two youngest-generation collections
# of a server or worker process; Python's default is 700. See ``settle_collector``.
GC_THRESHOLD = 10_000


def settle_collector() -> None:
    """Tune the cyclic garbage collector of a server or worker process, once its code is loaded.

    What a gateway call allocates is almost all freed by reference counting
    (no cycles), yet with Python's defaults the collector ran every few calls
    and walked every live object of the process (modules, the app, the
    libraries) in each full collection: about 40 µs per call at c=50, 13 %
    of the server's CPU. A worker is the same with attempts: each allocates
    a few hundred objects, a thousand may be in flight, and attempts held
    by a destination that never answers stay live until their timeout, so
    every full collection walked them all (about 10 % of a worker's CPU per
    delivery while another account's endpoints hung). Freezing what exists
    now moves it out of the collector's sight for good, and a higher first
    threshold lets calls and attempts come and go between collections; what
    cycles they do leave are still collected, a little later.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the HTTP server of ``settings`` (its protocol's own limits set too)."""
    from receiver.server.addressshare import AddressShare
    from receiver.server.httpprotocol import OneWriteProtocol
    from receiver.server.pressure import Pressure

    OneWriteProtocol.configure(
        header_timeout=settings.http_header_timeout,
        body_timeout=settings.http_body_timeout,
        body_min_rate=settings.http_body_min_rate,
        # Counted per process, against this process's own cap (SVCGW_HTTP_LIMIT_CONCURRENCY).
        shares=AddressShare(
            settings.http_address_share, exempt=settings.trusted_proxies, ipv6_prefix=settings.ipv6_prefix
        ),
        # Near the cap, room is made by shedding idle and slow connections (receiver.server.pressure).
        pressure=Pressure(settings.http_limit_concurrency, settings.http_keepalive_timeout),
    )
    return {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": 10,
        # Past this many connections and tasks, new requests get 503 at once instead of
        # queueing without bound; idle keep-alive connections close after the timeout.
        "limit_concurrency": settings.http_limit_concurrency,
        "timeout_keep_alive": settings.http_keepalive_timeout,
        "server_header": False,
        # Pinned dependencies: the gateway's hot path is mostly the event loop and HTTP parsing.
        # The protocol is uvicorn's httptools one, writing each answer in one piece (receiver.server.httpprotocol).
        "loop": "uvloop",
        "http": "receiver.server.httpprotocol:OneWriteProtocol",
        # X-Forwarded-For is read only from the proxies named in SVCGW_TRUSTED_PROXIES; by default
        # from none, so a client cannot choose the address its failed sign-ins are counted against.
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": list(settings.trusted_proxies),
    }


def run_server(settings: Settings) -> None:
    """The HTTP server; with ``SVCGW_HTTP_WORKERS`` > 1, that many processes share the port
    (receiver.server.listeners)."""
    import uvicorn

    settings.require_upstream()
    options = server_options(settings)
    if settings.http_workers > 1:
        from receiver.server.listeners import run_supervised

        # Each worker process builds its app from the same environment, and listens on its own socket.
        config = uvicorn.Config("cli.runner:app_from_env", factory=True, workers=settings.http_workers, **options)
        run_supervised(config)
        return
    from receiver.app import create_app

    config = uvicorn.Config(create_app(settings), **options)
    settle_collector()
    uvicorn.Server(config).run()


def app_from_env() -> Any:
    """The HTTP app of one of several server processes (``SVCGW_HTTP_WORKERS``)."""
    from receiver.app import create_app
    from svcgw.logs import configure

    configure()
    settings = Settings.from_env()
    server_options(settings)  # this process's protocol reads its limits
    app = create_app(settings)
    settle_collector()
    return app


def run_worker(settings: Settings, *, burst: bool = False) -> None:
    """Deliveries and the liveness prober on one event loop, until SIGTERM or SIGINT (see ``worker.main``)."""
    from worker.main import run

    settle_collector()
    run(settings, burst=burst)


def _spawn(role: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A session of its own: Ctrl-C in a terminal reaches only ``up``, which
    # then stops the children in order instead of all at once.
    return subprocess.Popen(
        [sys.executable, "-m", "cli", *role], env=env, stdin=subprocess.DEVNULL, start_new_session=True
    )


def run_up(settings: Settings, *, demo: bool = False, workers: int = 1) -> int:
    from .embedded import EmbeddedRedis

    env = dict(os.environ)
    embedded: EmbeddedRedis | None = None
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    stopping = threading.Event()
    exited: list[str] = []  # roles that stopped by themselves: up then exits non-zero

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if not settings.redis_configured:
            embedded = EmbeddedRedis(settings.state_dir)
            embedded.start()
            env["SVCGW_REDIS_URL"] = embedded.url
            log.info("embedded Redis at 127.0.0.1:%d, data in %s", embedded.port, embedded.dir)
        dashboard_generated = False
        if demo:
            from . import demosim
            from .demo import demo_dashboard, prepare_demo
            from .demotext import DEMO_RETRY_SCHEDULE

            dashboard_generated = demo_dashboard(env, settings.state_dir)
            # Its port is free, or up stops here, naming SVCGW_SIM_PORT; it answers before anything waits on it.
            sim_port, sim = demosim.start(env, settings.state_dir, lambda at: _spawn(["sim", "--port", str(at)], env))
            children.append(("sim", sim))
            env.setdefault("SVCGW_UPSTREAM_URL", f"http://127.0.0.1:{sim_port}")
            env.setdefault("SVCGW_ALLOW_PRIVATE_DESTINATIONS", "127.0.0.0/8,::1/128")
            env.setdefault("SVCGW_RETRY_SCHEDULE", DEMO_RETRY_SCHEDULE)  # a dead letter within a minute
        serve = _spawn(["serve"], env)
        children.append(("serve", serve))
        for _ in range(workers):
            children.append(("worker", _spawn(["worker"], env)))
        from .reachable import report_public_url

        def serving() -> bool:
            return serve.poll() is None and not stopping.is_set()

        report_public_url(Settings.from_env(env), alive=serving)  # says so plainly when events could not reach us
        if demo and serving():
            prepare_demo(Settings.from_env(env), dashboard_generated=dashboard_generated, alive=serving)
        if serving():
            print(f"svcgw is up: {settings.public_url}  (Ctrl-C stops it)", flush=True)
        while not stopping.is_set():
            for name, child in children:
                if child.poll() is not None:
                    log.error("%s exited with %s; stopping everything", name, child.returncode)
                    exited.append(name)
                    stopping.set()
            stopping.wait(0.5)
    finally:
        # HTTP first (no new acknowledgements), workers next, Redis last.
        for role in ("serve", "sim", "worker"):
            for name, child in children:
                if name == role and child.poll() is None:
                    child.terminate()
            for name, child in children:
                if name == role:
                    _wait(child, settings.delivery_timeout + 10)
        if embedded is not None:
            embedded.stop()
    return 1 if exited else 0


def _wait(child: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if child.poll() is None:
        child.kill()
        child.wait()
