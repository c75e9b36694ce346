"""The web console for developer accounts, served under ``/console``.

Pages (``receiver.console.pages``) and a JSON API under ``/console/api``
(``receiver.console.api``) on top of one account-scoped service
(``receiver.console.service``); sessions and CSRF are in
``receiver.console.session``. ``console_routes(services)`` returns the mount.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import BaseRoute, Mount

from .api import Api
from .pages import Pages
from .service import ConsoleService
from .session import PATH, Sessions
from .web import Context

if TYPE_CHECKING:
    from receiver.services import Services

__all__ = ["console_routes"]


def console_routes(services: Services) -> list[BaseRoute]:
    service = ConsoleService(services)
    # The gateway's limiter: console changes and gateway calls share one budget per account.
    context = Context(service, Sessions(services.settings, services.text_redis, services.store), services.limiter)
    return [
        Mount(
            PATH,
            routes=[Mount("/api", routes=Api(context).routes()), *Pages(context).routes()],
            name="console",
        )
    ]
