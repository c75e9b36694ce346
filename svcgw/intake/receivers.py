"""Receiver URLs: where the capability layer posts an instance's events.

``{SVCGW_PUBLIC_URL}/svc/receiver/{appid}/{token}``. The token is the
unguessable part; only its digest is stored for look-ups
(``svcgw.storage.keys.receiver_lookup``). Callback addresses under
:func:`receiver_prefix` are the service itself (-40012).

The token names the instance's shard (:func:`receiver_shard`): ``s<i>.``
before the secret for shard ``i``, nothing for shard 0. So a post is routed
to its shard without a look-up, the receiver route keeps its shape (and a
deployment of one shard its URLs, token and all), tokens made before shards
existed name shard 0, where their instances are, and adding a shard changes
no URL the capability layer holds. In the token rather than in a path
segment of its own because the token is already the part the service
makes, and its digest covers the prefix: a token edited to name another
shard is no receiver there.
"""

from __future__ import annotations

from svcgw.config.settings import Settings
from svcgw.shards.placement import shard_of_token

__all__ = ["RECEIVER_PREFIX", "receiver_path", "receiver_prefix", "receiver_shard", "receiver_url"]

RECEIVER_PREFIX = "/svc/receiver/"


def receiver_path(appid: str, token: str) -> str:
    return f"{RECEIVER_PREFIX}{appid}/{token}"


def receiver_prefix(settings: Settings) -> str:
    """The absolute prefix of every receiver URL of this service."""
    return settings.public_url.rstrip("/") + RECEIVER_PREFIX


def receiver_url(settings: Settings, appid: str, token: str) -> str:
    return settings.public_url.rstrip("/") + receiver_path(appid, token)


def receiver_shard(token: str) -> int | None:
    """The shard a receiver token routes its posts to; None when its shard prefix is malformed."""
    return shard_of_token(token)
