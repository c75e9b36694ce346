"""The service's Lua scripts: one registry, one ``.lua`` file each under ``svcgw/storage/lua/``.

Each file starts with a comment that names its KEYS and ARGV. Every file is
read once. A caller asks for a script by name: :func:`register` gives it a
script object of its client (done once, when the caller is built), or
:func:`text` the whole text for a ``pipe.eval``.

Some scripts call code they share with others or keep apart: ``delivery.lua``
(the one writer of a delivery), ``chain.lua`` (service events' order) and
``dedup.lua`` (the de-duplication window). Those are
put together here, once, the shared parts first (:data:`_PARTS`). The
gateway's admission script runs a whole script of its own as a function
(:data:`_FUNCTIONS`): ``rate_window.lua``, also run alone by the rate
limiter. No caller joins script text itself.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import overload

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript, Script

__all__ = ["register", "source", "text"]

# The scripts made of several files, in order: what they call first, the script itself last.
_PARTS: dict[str, tuple[str, ...]] = {
    "ingest": ("delivery", "dedup", "ingest"),
    "queue_delivery": ("delivery", "chain", "queue_delivery"),
    # A service event delivered or dead lets its instance's next one go; an attempt that timed out, or
    # answered a destination being probed, moves what the destination is allowed.
    "queue_finish": ("chain", "probing", "queue_finish"),
    "chain_advance": ("chain", "chain_advance"),
}

# The scripts that run others whole, each as a local function ``name(KEYS, ARGV)`` defined before
# the script, so that what they share has one implementation: the gateway's admission counts its
# call in the rate windows as the rate limiter does.
_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "gateway_admit": ("rate_window",),
}


@functools.cache
def source(name: str) -> str:
    """The text of the one file ``svcgw/storage/lua/<name>.lua``."""
    return resources.files("svcgw.storage").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


@functools.cache
def text(name: str) -> str:
    """The whole script ``name``: its file, after the code it calls (the functions, then the shared files)."""
    functions = "".join(
        f"local function {function}(KEYS, ARGV)\n{source(function)}\nend\n" for function in _FUNCTIONS.get(name, ())
    )
    return functions + "\n".join(source(part) for part in _PARTS.get(name, (name,)))


@overload
def register(redis: AsyncRedis, name: str) -> AsyncScript: ...
@overload
def register(redis: Redis, name: str) -> Script: ...
def register(redis: AsyncRedis | Redis, name: str) -> AsyncScript | Script:
    """The script ``name`` registered with ``redis`` (EVALSHA, loaded again when Redis lost it)."""
    return redis.register_script(text(name))
