"""The console JSON API's whole table: every route, in the order of ``/openapi.json``.

Each resource declares its routes in its own module, with their handlers and the types of
``receiver.console.schemas``, in the shape of ``.consoleroute`` (who may call them, a change or a
read, counted or not, their errors). ``receiver.console`` makes the JSON API's router from this
table, and ``receiver.openapi`` the document (``receiver.apispec``). A new route goes in its
resource's table; a new resource's table goes here.
"""

from __future__ import annotations

from . import (
    account_routes,
    apikey_routes,
    denial_routes,
    destination_routes,
    history_routes,
    instance_routes,
    onboarding_routes,
)
from .consoleroute import ConsoleRoute

__all__ = ["ROUTES"]

ROUTES: tuple[ConsoleRoute, ...] = (
    *account_routes.ROUTES,
    *instance_routes.ROUTES,
    *history_routes.ROUTES,
    *denial_routes.ROUTES,
    *apikey_routes.ROUTES,
    *onboarding_routes.ROUTES,
    *destination_routes.ROUTES,
)
