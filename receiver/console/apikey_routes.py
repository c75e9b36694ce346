"""The console's API keys (``receiver.console.apikeys``): their routes, declared once."""

from __future__ import annotations

from ..apispec import path_param
from . import schemas as s
from .apikeys import KeyApi
from .consoleroute import ConsoleRoute, ok, op

__all__ = ["ROUTES"]

KEY_ID = path_param("key_id")

ROUTES: tuple[ConsoleRoute, ...] = (
    op(
        "get",
        "/keys",
        "consoleKeys",
        "The account's API keys: in use first, then revoked",
        ok(s.KeyList),
        handler=KeyApi.listed,
    ),
    op(
        "post",
        "/keys",
        "consoleCreateKey",
        "Create an API key; the answer holds the key, shown this once",
        ok(s.ConsoleNewKey),
        status=201,
        change=True,
        bad=True,
        body=s.NewKeyRequest,
        handler=KeyApi.create,
    ),
    op(
        "delete",
        "/keys/{key_id}",
        "consoleRevokeKey",
        "Revoke a key: the gateway refuses the very next call made with it",
        ok(s.ConsoleApiKey),
        change=True,
        found=True,
        params=(KEY_ID,),
        handler=KeyApi.revoke,
    ),
)
