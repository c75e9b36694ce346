"""The HTTP application: receiver, gateway API, console and health checks.

``create_app(settings)`` builds the Starlette app; Redis clients and the
shared outbound HTTP clients (the capability layer's, and the callback
sender of the console's test POST) are kept on ``app.state.services`` and
closed when the lifespan ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from svcgw.connections import async_client
from svcgw.ingest import Ingest
from svcgw.outbound import Sender, sender_for
from svcgw.receivers import RECEIVER_PREFIX
from svcgw.settings import Settings
from svcgw.store import Store
from svcgw.upstream import Upstream
from svcgw.vault import TokenVault

from .console import console_routes
from .dashboard import make_dashboard
from .gateway import Gateway, PathGuard
from .ingest import make_endpoint
from .metrics import metrics_endpoint
from .openapi import openapi_endpoint

__all__ = ["Services", "create_app"]

# Test POSTs are one per saved address; a few at once is plenty.
CALLBACK_TEST_CONNECTIONS = 8


@dataclass
class Services:
    settings: Settings
    redis: Redis  # bytes in, bytes out: raw bodies
    text_redis: Redis  # decode_responses=True: configuration
    store: Store
    ingest: Ingest
    vault: TokenVault
    upstream: Upstream | None = None  # the shared keep-alive client, open while the lifespan runs
    callback_sender: Sender | None = None  # opened by the first test POST, see callbacks()

    def callbacks(self) -> Sender:
        """The one guarded callback client of the app; call it inside the running loop.

        Created on first use because an aiohttp session belongs to the loop it
        was made on; the lifespan closes it.
        """
        if self.callback_sender is None:
            self.callback_sender = sender_for(self.settings, limit=CALLBACK_TEST_CONNECTIONS)
        return self.callback_sender



def build_services(settings: Settings) -> Services:
    raw, text = async_client(settings), async_client(settings, decode=True)
    vault = TokenVault.from_settings(settings)
    return Services(
        settings=settings,
        redis=raw,
        text_redis=text,
        store=Store(text, vault),
        ingest=Ingest(raw, settings),
        vault=vault,
    )


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    services: Services = request.app.state.services
    try:
        await services.redis.ping()
    except (RedisError, OSError):
        return JSONResponse({"status": "unavailable", "redis": "unreachable"}, status_code=503)
    return JSONResponse({"status": "ok", "redis": "ok"})


def create_app(settings: Settings, *, services: Services | None = None) -> Starlette:
    services = services or build_services(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.upstream_url and services.upstream is None:
            services.upstream = Upstream(
                settings.require_upstream(),
                timeout=settings.upstream_timeout,
                connect_timeout=settings.upstream_connect_timeout,
            )
        try:
            yield
        finally:
            if services.upstream is not None:
                await services.upstream.aclose()
                services.upstream = None
            if services.callback_sender is not None:
                await services.callback_sender.aclose()
                services.callback_sender = None
            await services.redis.aclose()
            await services.text_redis.aclose()

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"], name="metrics"),
        Route(
            RECEIVER_PREFIX + "{appid}/{token}",
            make_endpoint(services.ingest),
            methods=["POST"],
            name="receiver",
        ),
        *Gateway(services).routes(),
        Route("/openapi.json", openapi_endpoint, methods=["GET"], name="openapi"),
        *console_routes(services),
    ]
    if (dashboard := make_dashboard(settings)) is not None:
        routes.append(Mount("/rq", app=dashboard, name="rq-dashboard"))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(PathGuard)])
    app.state.services = services
    return app
