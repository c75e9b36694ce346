"""The console's controlled operations, the account's denials (``.api``): their routes, declared once."""

from __future__ import annotations

from . import schemas as s
from .api import Api
from .consoleroute import ConsoleRoute, err, ok, op

__all__ = ["ROUTES"]

DENIED = ok(s.Denied)
OPERATOR_DENIAL = {
    403: err(
        "code -40310: CSRF token missing or wrong; code -40320: denied by the operator, only the operator "
        "can allow it again (nothing was changed)"
    )
}

ROUTES: tuple[ConsoleRoute, ...] = (
    op(
        "get",
        "/operations",
        "consoleDenied",
        "Controlled operations the account may not call",
        DENIED,
        handler=Api.operations,
    ),
    op(
        "post",
        "/operations/deny",
        "consoleDeny",
        "Deny operations (the gateway then answers 403)",
        DENIED,
        change=True,
        bad=True,
        body=s.OperationsRequest,
        handler=Api.deny,
    ),
    op(
        "post",
        "/operations/allow",
        "consoleAllow",
        "Allow operations again (the account's own denials; -40320 for one the operator denied)",
        DENIED,
        change=True,
        bad=True,
        body=s.OperationsRequest,
        extra=OPERATOR_DENIAL,
        handler=Api.allow,
    ),
)
