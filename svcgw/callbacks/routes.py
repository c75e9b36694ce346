"""The routing record: which further destinations of a scope take a post of a given event type.

One record per scope (an account, or one instance), a Redis hash
(``KeySpace.routes_account`` / ``KeySpace.routes_instance``) written with
every change of the scope's destinations and copied to the shards whose
scripts read it (:mod:`svcgw.registry.copies`). It is the compact part of
the destinations that delivery needs per post; everything else of a
destination (address, secret, token, rate limit) is read from its own hash at
attempt time. Its shape, field by field:

* ``*``: the ids of the scope's **enabled** destinations that take every
  event type (no filter), separated by one space, oldest first;
* ``<event type>`` (``Msg``, ``InstanceOffline``, ...): the ids of the
  enabled destinations whose filter names that type, likewise.

A disabled destination is in no field; a scope with no enabled destination
has no record (the key does not exist). Event type names never hold a space,
``*`` or anything but letters, digits and ``_``
(:func:`svcgw.callbacks.destinationrules.check_event_types`), so field names
cannot collide. A post of event type ``T`` goes to the ids of ``HMGET record * T``:
in Lua, the two answers split on spaces (an id is in at most one of the two
fields, unless a post's own event type is ``*``, which any printable name may
be: read the field once then). :func:`route` is the same reading in Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

__all__ = ["EVERY_TYPE", "Routed", "build_routes", "route"]

EVERY_TYPE = "*"


class Routed(Protocol):
    """What the record needs of a destination."""

    @property
    def id(self) -> str: ...

    @property
    def enabled(self) -> bool: ...

    @property
    def event_types(self) -> tuple[str, ...]: ...

    @property
    def created_at(self) -> float: ...


def build_routes(destinations: Iterable[Routed]) -> dict[str, str]:
    """The record of a scope whose destinations are ``destinations``; empty: no record."""
    fields: dict[str, list[str]] = {}
    for destination in sorted(destinations, key=lambda d: (d.created_at, d.id)):
        if not destination.enabled:
            continue
        for name in destination.event_types or (EVERY_TYPE,):
            fields.setdefault(name, []).append(destination.id)
    return {name: " ".join(ids) for name, ids in fields.items()}


def route(record: Mapping[str, str], event_type: str) -> list[str]:
    """The ids a post of ``event_type`` goes to by ``record``: those taking every type, then the type's own."""
    found: list[str] = []
    for name in (EVERY_TYPE, event_type):
        for destination_id in (record.get(name) or "").split():
            if destination_id not in found:
                found.append(destination_id)
    return found
