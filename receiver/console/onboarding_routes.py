"""The console's QR login and instance actions (``receiver.console.onboarding``): their routes, declared once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import Response

from ..apispec import Answer, Ok, path_param
from . import schemas as s
from .consoleroute import APPID, LIMITED, ConsoleRoute, err, op
from .onboarding import OnboardingApi

__all__ = ["ROUTES"]

ATTEMPT = path_param("attempt")
GATEWAY_NOTE = (
    " Each step is a gateway call made for the account with the gateway's own checks, and counts against the "
    "rate limit as that call would. A step the gateway refuses answers its status, code and message "
    "(-40402 quota, -40300 denied, -40404, -42900 with Retry-After); one the capability layer refuses answers "
    "HTTP 200 with the layer's code and a message naming the operation."
)
REFUSALS = {
    429: LIMITED,
    402: err("code -40402: the account's device quota is full (403: entitlement expired)"),
    502: err("code -50002 or -50000: the capability layer could not be reached (the gateway's answer)"),
}


def step(
    path: str,
    operation_id: str,
    summary: str,
    data: Any,
    *,
    handler: Callable[..., Awaitable[Response]],
    status: int = 200,
    method: str = "post",
    found: bool = True,
    **extra: Any,
) -> ConsoleRoute:
    """A step of a QR login or an instance action: a gateway call, refused as the gateway refuses it.

    Its success is ``status`` with ``data``; the capability layer's refusal is HTTP 200.
    """
    success, refused = Ok[data], s.LayerRefused
    answers = {200: Answer("success, or the capability layer's refusal", (success, refused))}
    if status != 200:
        answers = {status: Answer("created", success), 200: Answer("the capability layer's refusal", refused)}
    change = method != "get"
    return op(
        method,
        path,
        operation_id,
        summary,
        answers.pop(status),
        handler=handler,
        status=status,
        change=change,
        counted=False,
        found=found,
        bad=change,
        note=GATEWAY_NOTE,
        extra={**REFUSALS, **answers},
        **extra,
    )


ROUTES: tuple[ConsoleRoute, ...] = (
    step(
        "/instances/new",
        "consoleNewInstance",
        "A new instance: device/create and the first QR code of its login",
        s.ConsoleLogin,
        status=201,
        found=False,
        body=s.LoginOptions,
        handler=OnboardingApi.begin,
    ),
    step(
        "/logins/{attempt}",
        "consoleLogin",
        "One poll of a QR login (checkQr); on status 2, long/start",
        s.ConsoleLogin,
        method="get",
        params=(ATTEMPT,),
        description="A code older than its refreshInterval that nobody scanned is replaced.",
        handler=OnboardingApi.poll,
    ),
    step(
        "/logins/{attempt}/code",
        "consoleLoginCode",
        "submitQrCode with the six-digit code sent to the phone",
        s.ConsoleLogin,
        params=(ATTEMPT,),
        body=s.CodeRequest,
        handler=OnboardingApi.code,
    ),
    step(
        "/logins/{attempt}/renew",
        "consoleLoginRenew",
        "A new QR code for the login",
        s.ConsoleLogin,
        params=(ATTEMPT,),
        handler=OnboardingApi.renew,
    ),
    step(
        "/instances/{appid}/relogin",
        "consoleRelogin",
        "login/reconnect and a business read; if the instance is not back, a QR login",
        s.Relogin,
        params=(APPID,),
        body=s.ReloginRequest,
        body_required=False,
        handler=OnboardingApi.relogin,
    ),
    step(
        "/instances/{appid}/qr-login",
        "consoleQrLogin",
        "A QR login of the instance: long/stop, its GapClosed, then getQr",
        s.ConsoleLogin,
        status=201,
        params=(APPID,),
        body=s.LoginOptions,
        handler=OnboardingApi.qr_login,
    ),
    step(
        "/instances/{appid}/stop",
        "consoleStop",
        "long/stop",
        s.InstanceDone,
        params=(APPID,),
        handler=OnboardingApi.stop,
    ),
    step(
        "/instances/{appid}/start",
        "consoleStart",
        "long/start towards the address given, the instance's own, or the account default",
        s.InstanceDone,
        params=(APPID,),
        body=s.StartRequest,
        handler=OnboardingApi.start,
    ),
    step(
        "/instances/{appid}/logout",
        "consoleLogout",
        "login/logout: the session key is destroyed",
        s.InstanceDone,
        params=(APPID,),
        handler=OnboardingApi.logout,
    ),
)
