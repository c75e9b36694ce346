"""Further destinations at ingest: what the ingest script is given for the destinations that take a post.

An instance's events go to its primary address and to every enabled further
destination of its account, then of its own, whose event types take them
(docs/destinations.md). Which ones take a post is the routing records'
(:mod:`svcgw.callbacks.routes`), read and kept by the receiver
(:class:`svcgw.callbacks.routecache.RoutesCache`, given to
:class:`svcgw.intake.ingest.Ingest` as its :class:`Targets`): the script
names every key before it runs, so the ids must be known then.

:func:`plan` is pure: per destination, a delivery named by the post and the
destination (:func:`svcgw.deliveryid.for_destination`, when the primary's is
named by its post) with one hash, RQ's lean fields and the delivery's together
as the primary's (no ``destination`` field: the id names it), or else one of the older id form (``dlv_``,
:func:`svcgw.deliveryid.new_delivery_id`) with its delivery hash and its RQ
job hash; and the destination's index (``KeySpace.destination_deliveries``),
as the script's KEYS and ARGV take them (``svcgw/storage/lua/ingest.lua``).
A post that no destination takes has no plan, and the script call is the
one it always was: not one key, argument or command more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from svcgw.deliveryid import for_destination, new_delivery_id
from svcgw.storage.keys import KeySpace

__all__ = ["FanOut", "Targets", "plan"]


class Targets(Protocol):
    """Which further destinations take a post: their ids, in routing order, each once."""

    async def targets(self, appid: str, event_type: str) -> list[str]: ...


@dataclass(frozen=True)
class FanOut:
    """The deliveries of one post to further destinations, as the ingest script is given them.

    ``deliveries``: ``(delivery id, destination id)`` in routing order; ``keys``: per delivery its
    delivery hash, its job hash (the same key for an id named by its post) and the destination's
    index; ``args``: the job hash's field count, then per delivery its id, the destination's id and
    its job hash's fields.
    """

    deliveries: tuple[tuple[str, str], ...]
    keys: tuple[str, ...]
    args: tuple[Any, ...]

    named: bool = False  # whether the ids are named by the post (svcgw.deliveryid.for_destination)


def plan(
    keys: KeySpace,
    destination_ids: Sequence[str],
    job: Callable[[str, bool], Sequence[bytes]],
    *,
    primary: str = "",
    new_id: Callable[[], str] = new_delivery_id,
) -> FanOut | None:
    """The deliveries to ``destination_ids`` (None: there are none), each with its RQ fields ``job(id, named)``.

    ``primary``: the post's delivery to the primary address; when it is named by its post, so is each
    of these (``named`` true: RQ's lean fields, one hash), else each is a ``dlv_`` one (RQ's whole
    template, a delivery hash of its own). Every job hash of one post has the same fields, so their
    count is given once.
    """
    if not destination_ids:
        return None
    derived = [for_destination(primary, destination_id) for destination_id in destination_ids]
    named = all(derived)
    deliveries = tuple(
        (derived_id if named and derived_id else new_id(), destination_id)
        for derived_id, destination_id in zip(derived, destination_ids, strict=True)
    )
    names: list[str] = []
    args: list[Any] = []
    counts = set()
    for delivery_id, destination_id in deliveries:
        names += [keys.delivery(delivery_id), keys.rq.job(delivery_id), keys.destination_deliveries(destination_id)]
        fields = job(delivery_id, named)
        counts.add(len(fields) // 2)
        args += [delivery_id, destination_id, *fields]
    (count,) = counts  # one template: one count
    return FanOut(deliveries, tuple(names), (count, *args), named)
