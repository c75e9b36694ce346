"""The console's instances and their callbacks (``receiver.console.api``): their routes, declared once."""

from __future__ import annotations

from ..apispec import Param
from . import schemas as s
from .api import Api
from .consoleroute import APPID, ConsoleRoute, ok, op

__all__ = ["ROUTES"]


def _callback(scope: str, params: tuple[Param, ...]) -> list[ConsoleRoute]:
    path = "/instances/{appid}/callback" if params else "/callback"
    found = bool(params)
    return [
        op(
            "get",
            path,
            f"consoleGet{scope}Callback",
            f"The {scope.lower()} callback settings",
            ok(s.ConsoleCallback),
            handler=Api.get_callback,
            params=params,
            found=found,
        ),
        op(
            "put",
            path,
            f"consoleSet{scope}Callback",
            f"Save the {scope.lower()} callback address; a non-empty one gets one SvcCallbackTest POST",
            ok(s.SavedCallback),
            handler=Api.put_callback,
            change=True,
            found=found,
            bad=True,
            params=params,
            body=s.CallbackRequest,
            description=(
                "An empty url removes the address and its Bearer token. A blank bearer_token keeps the stored "
                "token while the address keeps its origin (scheme, host, port); on a new origin the token is "
                "deleted unless keep_token is true. bearer false deletes it. The address is saved even when "
                "the test fails; test is null when no test was sent."
            ),
        ),
    ]


ROUTES: tuple[ConsoleRoute, ...] = (
    op(
        "get",
        "/instances",
        "consoleInstances",
        "The account's instances",
        ok(list[s.ConsoleInstance]),
        handler=Api.instances,
    ),
    op(
        "get",
        "/instances/{appid}",
        "consoleInstance",
        "One instance",
        ok(s.ConsoleInstance),
        params=(APPID,),
        found=True,
        handler=Api.instance,
    ),
    *_callback("Account", ()),
    op(
        "post",
        "/callback/rotate-secret",
        "consoleRotateAccountSecret",
        "New signing secret for the account default",
        ok(s.ConsoleCallback),
        change=True,
        handler=Api.rotate,
    ),
    *_callback("Instance", (APPID,)),
    op(
        "post",
        "/instances/{appid}/callback/rotate-secret",
        "consoleRotateInstanceSecret",
        "New signing secret for the instance's own address",
        ok(s.ConsoleCallback),
        change=True,
        params=(APPID,),
        found=True,
        handler=Api.rotate,
    ),
)
