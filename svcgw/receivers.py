"""Receiver URLs: where the capability layer posts an instance's events.

``{SVCGW_PUBLIC_URL}/svc/receiver/{appid}/{token}``. The token is the
unguessable part; only its digest is stored for look-ups
(``svcgw.keys.receiver_lookup``). Callback addresses under
:func:`receiver_prefix` are the service itself (-40012).
"""

from __future__ import annotations

from .settings import Settings

__all__ = ["RECEIVER_PREFIX", "receiver_path", "receiver_prefix", "receiver_url"]

RECEIVER_PREFIX = "/svc/receiver/"


def receiver_path(appid: str, token: str) -> str:
    return f"{RECEIVER_PREFIX}{appid}/{token}"


def receiver_prefix(settings: Settings) -> str:
    """The absolute prefix of every receiver URL of this service."""
    return settings.public_url.rstrip("/") + RECEIVER_PREFIX


def receiver_url(settings: Settings, appid: str, token: str) -> str:
    return settings.public_url.rstrip("/") + receiver_path(appid, token)
