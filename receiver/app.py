"""The HTTP application: receiver, gateway API, console and health checks.

The composition root of the HTTP role. ``create_app(settings)`` builds the
Starlette app from its parts; what they share (``receiver.services``) is
kept on ``app.state.services`` and closed when the lifespan ends.

Errors are answered in one place per surface: the gateway's and the
receiver's at their one entry each (``receiver.gateway.refusals``,
``receiver.endpoint.receive``), the console's by a handler on each of its
mounts (``receiver.console.answers``), the operators' plain answers
(/metrics, /docs) by the app's handler of ``PlainRefusal`` and the
dashboard's guard (``receiver.dashboard``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Receive, Scope, Send

from svcgw.clientkeys import IPV6_PREFIX
from svcgw.config.settings import Settings
from svcgw.errors import PlainRefusal
from svcgw.shards.serverfacts import SettingsWatch
from svcgw.storage import layoutversion
from svcgw.upstream import Upstream

from .apispec import declared_routes
from .console import console_routes, favicon
from .dashboard import make_dashboard
from .dashboardlimit import SignInLimit
from .docs import docs_routes
from .endpoint import Endpoint, direct_post, make_endpoint
from .endpoint import schemas as endpoint_schemas
from .gateway import Gateway, PathGuard, direct_operation
from .gateway import schemas as gateway_schemas
from .headers import NoSniff
from .health import check_redis_settings, connect_shards
from .http import plain_refused
from .openapi import SERVER
from .openbodies import OpenBodyLimit
from .services import Services, build_services

__all__ = ["create_app"]

log = logging.getLogger("svcgw")


class ServiceApp(Starlette):
    """The app, with gateway calls on a plain API path handed straight to the gateway, and posts on a plain
    receiver path straight to the receiver.

    Those are nearly all the traffic, and routing them through the router and
    the middleware stack cost more than the gateway's own work, and a fifth of
    a post's; each adds what the middleware would (see ``Gateway.direct`` and
    ``Endpoint.direct``). Every other request, an ambiguous path included,
    takes the ordinary way.

    A client that goes away while its body is read (or whose body the server
    gave up on as too slow, ``receiver.server.httpprotocol``) ends its request with
    ``ClientDisconnect`` wherever the body was being read: nobody is left to
    answer, and it is an info line, not an error with a traceback.
    """

    gateway: Gateway
    receiver: Endpoint
    # Bits of an IPv6 client address every per-address limit counts by (receiver.http.client_address).
    ipv6_prefix: int = IPV6_PREFIX

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self  # as Starlette's own call does: the direct ways read settings from app.state too
        operation = direct_operation(scope)
        if operation is not None:
            await self.gateway.direct(scope, receive, send, *operation)
            return
        try:
            posted = direct_post(scope)
            if posted is not None:
                await self.receiver.direct(scope, receive, send, *posted)
            else:
                await super().__call__(scope, receive, send)
        except ClientDisconnect:
            # Not the path: a receiver's or an invitation's carries its token.
            client = scope.get("client")
            log.info(
                "%s request from %s ended before its body arrived (the client left, or was too slow: 408)",
                scope.get("method", "?"),
                client[0] if client else "an unknown client",
            )


def create_app(settings: Settings, *, services: Services | None = None) -> Starlette:
    services = services or build_services(settings)
    redis_settings = SettingsWatch(services.text_shards, persistence_required=settings.redis_persistence_required)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.upstream_url and services.upstream is None:
            services.upstream = Upstream(
                settings.require_upstream(),
                timeout=settings.upstream_timeout,
                connect_timeout=settings.upstream_connect_timeout,
            )
        await layoutversion.mark_at_start(services.redis, services.keys)
        await connect_shards(services)  # the first /readyz measures the shards, not their clients' setup
        await check_redis_settings(redis_settings)
        try:
            yield
        finally:
            if services.upstream is not None:
                await services.upstream.aclose()
                services.upstream = None
            if services.callback_sender is not None:
                await services.callback_sender.aclose()
                services.callback_sender = None
            for close in services.closing:
                await close()
            await services.aclose_clients()  # the posts' counters still held, before the clients close

    gateway = Gateway(services)
    receiver = make_endpoint(services.ingests or (services.ingest,), services.receiver_guard)
    routes: list[BaseRoute] = [
        # Each declared once, with its handler, in the table /openapi.json is made from.
        *declared_routes(SERVER),
        *declared_routes(endpoint_schemas.ROUTES, (receiver,)),
        *declared_routes(gateway_schemas.ROUTES, (gateway,)),
        # Asked by browsers of every page that names no icon of its own.
        Route("/favicon.ico", favicon, methods=["GET"], name="favicon"),
        *docs_routes(),  # /docs: the interactive reference of /openapi.json
        *console_routes(services, gateway),
    ]
    if (dashboard := make_dashboard(settings)) is not None:
        # Wrong passwords are limited per address as the console's sign-in limits them.
        guarded = SignInLimit(dashboard, settings.signin_failures_per_address)
        routes.append(Mount("/rq", app=guarded, name="rq-dashboard"))
    app = ServiceApp(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(NoSniff), Middleware(PathGuard), Middleware(OpenBodyLimit)],
        exception_handlers={PlainRefusal: plain_refused},
    )
    app.gateway = gateway
    app.receiver = receiver
    app.state.services = services
    app.state.redis_settings = redis_settings
    app.ipv6_prefix = settings.ipv6_prefix  # receiver.http.client_address: every per-address limit's key
    return app
