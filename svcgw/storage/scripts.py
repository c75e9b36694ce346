"""The service's Lua scripts: one registry, one ``.lua`` file each under ``svcgw/storage/lua/``.

Each file starts with a comment that names its KEYS and ARGV. Every file is
read once. Every script the service runs is run through here, asked for by
name (:func:`names` lists them), in one of three ways:

* :func:`register`: a script object of the caller's client, made once when the
  caller is built; each call is an ``EVALSHA``, the script loaded again when
  Redis lost it;
* :func:`add_to_transaction`: one call added to a ``MULTI`` pipeline, as an
  ``EVAL`` of the whole text. Not ``EVALSHA``: a script missing from Redis
  (a restart, ``SCRIPT FLUSH``) between the pipeline's load and its ``EXEC``
  would fail that one command while the transaction's others are applied;
  ``EVAL`` cannot be missing;
* :func:`batched`: the calls made in one turn of the event loop sent
  together (:mod:`svcgw.storage.scriptbatch`), for the gateway's admission
  (the receiver's ingest makes its :class:`ScriptBatch` of the script it registered).

Some scripts call code they share with others or keep apart: ``delivery.lua``
(the one writer of a delivery), ``chain.lua`` (service events' order),
``dedup.lua`` (the de-duplication window), ``clock.lua`` (the time of a
call in milliseconds, the caller's or Redis's), and the finish's concerns kept
apart from it, ``breaker.lua``, ``failing.lua`` and ``bare_outcome.lua``
(one script still, so that a claim's end is atomic). Those are put together here,
once, the shared parts first (:data:`_PARTS`). The gateway's admission
script runs a whole script of its own as a function (:data:`_FUNCTIONS`):
``rate_window.lua``, also run alone by the rate limiter; both read the clock
of ``clock.lua``, which comes once, before either. No caller joins script
text itself.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any, overload

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.commands.core import AsyncScript, Script

from svcgw.storage.scriptbatch import ScriptBatch

__all__ = ["ScriptBatch", "add_to_transaction", "batched", "names", "register", "source", "text"]

# The scripts made of several files, in order: what they call first, the script itself last.
_PARTS: dict[str, tuple[str, ...]] = {
    "ingest": ("delivery", "dedup", "ingest"),
    "queue_delivery": ("delivery", "chain", "queue_delivery"),
    # A service event delivered or dead lets its instance's next one go; an attempt that timed out, or
    # answered a destination being probed, moves what the destination is allowed; one failed or
    # delivered starts or ends its destination's failing; a delivered one keeps its bare outcome.
    "queue_finish": ("chain", "breaker", "failing", "bare_outcome", "queue_finish"),
    "chain_advance": ("chain", "chain_advance"),
    # The windows of calls: one clock.
    "rate_window": ("clock", "rate_window"),
    "gateway_admit": ("clock", "gateway_admit"),
    "signin_reserve": ("clock", "signin_reserve"),
    "signin_lane": ("clock", "signin_lane"),
}

# The scripts that run others whole, each as a local function ``name(KEYS, ARGV)`` defined before
# the script, so that what they share has one implementation: the gateway's admission counts its
# call in the rate windows as the rate limiter does. The function's own shared parts come first.
_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "gateway_admit": ("rate_window",),
    # The known browser's look-up and reservation in one round trip, its windows counted as every sign-in's.
    "signin_lane": ("signin_reserve",),
}


@functools.cache
def source(name: str) -> str:
    """The text of the one file ``svcgw/storage/lua/<name>.lua``."""
    return resources.files("svcgw.storage").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def _shared(name: str) -> tuple[str, ...]:
    return _PARTS.get(name, (name,))[:-1]


@functools.cache
def names() -> tuple[str, ...]:
    """Every script the service runs, by name: the files under ``lua/`` but the parts only others include."""
    parts = {part for name in _PARTS for part in _shared(name)}
    files = resources.files("svcgw.storage").joinpath("lua").iterdir()
    return tuple(sorted({f.name.removesuffix(".lua") for f in files if f.name.endswith(".lua")} - parts))


@functools.cache
def text(name: str) -> str:
    """The whole script ``name``: the shared parts (its functions' first), the functions, then its file."""
    functions = _FUNCTIONS.get(name, ())
    shared = dict.fromkeys(part for script in (*functions, name) for part in _shared(script))
    return "\n".join([
        *(source(part) for part in shared),
        *(f"local function {function}(KEYS, ARGV)\n{source(function)}\nend" for function in functions),
        source(name),
    ])  # fmt: skip


@overload
def register(redis: AsyncRedis, name: str) -> AsyncScript: ...
@overload
def register(redis: Redis, name: str) -> Script: ...
def register(redis: AsyncRedis | Redis, name: str) -> AsyncScript | Script:
    """The script ``name`` registered with ``redis`` (EVALSHA, loaded again when Redis lost it)."""
    return redis.register_script(text(name))


def add_to_transaction(pipe: Any, name: str, *, keys: Sequence[Any], args: Sequence[Any]) -> None:
    """Add one call of the script ``name`` to ``pipe`` (sync or asyncio, in MULTI mode): an ``EVAL``.

    Only buffers; its answer is the script's, in its place among the transaction's answers.
    """
    pipe.eval(text(name), len(keys), *keys, *args)


def batched(redis: AsyncRedis, name: str) -> ScriptBatch:
    """The script ``name`` for callers on one event loop: each turn's calls sent as one pipeline."""
    return ScriptBatch(register(redis, name))
