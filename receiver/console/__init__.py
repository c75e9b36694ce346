"""The web console for developer accounts, served under ``/console``.

Pages (``receiver.console.pages``) and a JSON API under ``/console/api``
(``receiver.console.api``) on top of one account-scoped service
(``receiver.console.service``); sessions and CSRF are in
``receiver.console.session``. A new instance by QR login and the instance
actions (``receiver.console.onboarding`` over ``receiver.console.qrflow``)
make their gateway calls through the app's one ``Gateway``. Signing in,
invitations and the account page (``receiver.console.account``, with
``.signin``), API keys (``receiver.console.apikeys``) and further
destinations (``receiver.console.destinations``, ``.destinationpages``) add
their pages and API routes. Each route of the JSON API is declared once,
with its handler, in its resource's ``*_routes`` module; ``.routes``
assembles them into :data:`API_ROUTES`: its router is made from them, as
``/openapi.json`` is (``receiver.apispec``).
``console_routes(services, gateway)`` returns the mount: the JSON API's and
the pages' side by side, each with its one handler of errors
(``receiver.console.answers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.middleware import Middleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount

from svcgw.registry.invitations import Invitations

from ..apispec import declared_routes
from . import routes
from .account import AccountApi, AccountPages
from .answers import api_handlers, page_handlers
from .api import Api
from .apikeys import KeyApi, KeyPages
from .consoleroute import API, ConsoleRoute
from .destinationpages import DestinationPages
from .destinations import DestinationApi, Destinations
from .onboarding import OnboardingApi, OnboardingPages
from .pages import Pages
from .qrflow import QrFlow
from .service import ConsoleService
from .session import PATH, Sessions
from .signin import PasswordSignIn
from .web import Context

if TYPE_CHECKING:
    from receiver.gateway import Gateway
    from receiver.services import Services

__all__ = ["API_ROUTES", "console_routes", "favicon"]

# Every route of the JSON API, in the order of /openapi.json.
API_ROUTES: tuple[ConsoleRoute, ...] = routes.ROUTES


_ICON = Path(__file__).parent / "static" / "favicon.svg"


async def favicon(request: Request) -> Response:
    """``/favicon.ico``: the console's icon, for a browser on a page that names none (else a 404 per page)."""
    return FileResponse(_ICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})


def console_routes(services: Services, gateway: Gateway) -> list[BaseRoute]:
    service = ConsoleService(services)
    # The gateway's limiter: console changes and gateway calls share one budget per account.
    context = Context(
        service,
        Sessions(services.settings, services.text_redis, services.store),
        services.limiter,
        PasswordSignIn(services),
        Invitations(services.text_redis, services.keys),
        services.key_guard,
    )
    api, pages, flow = Api(context), Pages(context), QrFlow(gateway, services)
    destinations = Destinations(services, service)
    owners = (api, AccountApi(api), KeyApi(api), OnboardingApi(api, flow), DestinationApi(api, destinations))
    api_routes = declared_routes(API_ROUTES, owners, prefix=API, endpoint=api.endpoint)
    page_routes = [
        *OnboardingPages(pages, flow).routes(),
        *pages.routes(),
        *AccountPages(pages).routes(),
        *KeyPages(pages).routes(),
        *DestinationPages(pages, destinations).routes(),
    ]
    # Siblings, not one inside the other: an error of the API never reaches the pages' handler.
    return [
        Mount(
            PATH,
            routes=[
                Mount("/api", routes=api_routes, middleware=[_handled(api_handlers())]),
                Mount("", routes=page_routes, middleware=[_handled(page_handlers(pages))]),
            ],
            name="console",
        )
    ]


def _handled(handlers: dict[Any, Any]) -> Middleware:
    """Starlette's exception handlers, for one mount: its errors answered in one place."""
    return Middleware(ExceptionMiddleware, handlers=handlers)
