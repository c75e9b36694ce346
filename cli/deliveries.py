"""``svcgw deliveries``: an instance's deliveries with every attempt, and retry now.

``list`` shows the deliveries of the log's retention, newest first (state,
attempts, next attempt, and the destination: ``primary`` for the primary
address's, else the further destination's ``dst_…`` id, each post's primary
delivery first), and whether their destination is being probed
(``svcgw.delivery.breaker``: its attempts time out, so it gets fewer at a
time and the others wait without counting an attempt): the primary address's,
or with ``--destination dst_…`` that further destination's address; ``show``
one delivery with each attempt's answer, and its own destination's probing;
``retry`` brings a retrying delivery's next attempt forward to now. All
three read and write through the same modules as the console
(``svcgw.delivery.listing``, ``svcgw.delivery.byid``, ``svcgw.delivery.retrynow``).
"""

from __future__ import annotations

import click
from rich.console import Group, RenderableType
from rich.text import Text

from svcgw.delivery import breaker, byid, listing, retrynow
from svcgw.delivery.breaker import BreakerRecord
from svcgw.delivery.listing import PRIMARY, STATES, Delivery
from svcgw.delivery.outcomes import ANSWERS_NOTE
from svcgw.errors import NotFound
from svcgw.shards.routing import first_found, instance_shard

from .context import Admin, admin_command
from .output import console, emit, json_option, record, table, when

__all__ = ["deliveries"]


@click.group()
def deliveries() -> None:
    """Deliveries of an instance: pending, retrying, delivered or dead, with every attempt."""


def breaker_note(probe: BreakerRecord | None) -> Text | None:
    """One line saying that the deliveries' destination is being probed, and what that means for them."""
    if probe is None:
        return None
    state = "answers again, opening up" if probe.word == "a" else "attempts time out"
    return Text(
        f"destination {probe.destination} is being probed since {when(probe.since)} ({state}): "
        f"at most {probe.limit} attempt(s) at a time per worker; the others wait without counting an attempt",
        style="yellow",
    )


COLUMNS = (
    "id", "destination", "event type", "event ids", "state", "received", "attempts", "last outcome", "next attempt",
)  # fmt: skip


def destination_of(delivery: Delivery) -> str:
    """The further destination's id, or ``primary`` for the primary address's delivery."""
    return delivery.destination or PRIMARY


def _next(delivery: Delivery) -> str | None:
    if delivery.state == "pending" and delivery.next_attempt_at is None:
        return "now (queued)"
    return when(delivery.next_attempt_at)


@deliveries.command("list")
@click.argument("appid")
@click.option("--state", type=click.Choice(STATES), default=None, help="Only deliveries in this state.")
@click.option("--event-type", default=None, metavar="TYPE", help="Only deliveries of this event type.")
@click.option("--event-id", default=None, metavar="ID", help="Only the deliveries carrying this event id.")
@click.option(
    "--destination",
    default=None,
    metavar="DST",
    help="Only the deliveries to this further destination (dst_...), or 'primary' for the primary address's.",
)
@click.option("--limit", type=click.IntRange(1, listing.MAX_LIMIT), default=50, show_default=True)
@click.option("--before", default=None, metavar="CURSOR", help="Older than this (next_before of a previous page).")
@json_option
@admin_command
async def deliveries_list(
    admin: Admin,
    appid: str,
    state: str | None,
    event_type: str | None,
    event_id: str | None,
    destination: str | None,
    limit: int,
    before: str | None,
    as_json: bool,
) -> None:
    """List an instance's deliveries, newest first."""
    page = await listing.list_deliveries(
        *await instance_shard(admin.shards, appid),
        admin.settings,
        appid,
        state=state,
        event_type=event_type,
        event_id=event_id,
        destination=destination,
        limit=limit,
        before=before,
    )
    probe = await _probe(admin, appid, destination)

    def render() -> RenderableType:
        shown = table(
            COLUMNS,
            (
                (
                    d.id,
                    destination_of(d),
                    d.event_type,
                    ", ".join(d.event_ids),
                    d.state,
                    when(d.received_at),
                    len(d.attempts),
                    d.last_outcome,
                    _next(d),
                )
                for d in page.deliveries
            ),
        )
        if page.next_before:
            shown.caption = f"older: --before {page.next_before}"
        note = breaker_note(probe)
        return shown if note is None else Group(shown, note)

    emit(as_json, {**page.as_dict(), "probing": probe.as_dict() if probe else None}, render)


@deliveries.command("show")
@click.argument("delivery_id")
@json_option
@admin_command
async def deliveries_show(admin: Admin, delivery_id: str, as_json: bool) -> None:
    """Show one delivery: its state, next attempt, and every attempt with the answer's first 1 KB."""
    delivery = await _show(admin, delivery_id)
    waiting = delivery.state not in ("delivered", "dead")
    probe = await _probe(admin, delivery.appid, delivery.destination) if waiting else None
    if as_json:
        emit(True, {**delivery.as_dict(), "probing": probe.as_dict() if probe else None}, lambda: None)
        return
    note = breaker_note(probe)
    console().print(_detail(delivery) if note is None else Group(_detail(delivery), note))


def _detail(d: Delivery) -> RenderableType:
    facts = record(
        {
            "id": d.id,
            "appid": d.appid,
            "destination": destination_of(d),
            "event type": d.event_type,
            "event ids": ", ".join(d.event_ids),
            "state": d.state,
            "received": when(d.received_at),
            "next attempt": _next(d),
            "delivered": when(d.delivered_at),
            "dead since": when(d.dead_at),
        },
        "delivery",
    )
    attempts = table(
        ("#", "at", "outcome", "ms", "answer (first 1 KB)"),
        ((a.number, when(a.at), a.outcome, a.duration_ms, a.response) for a in d.attempts),
        "attempts",
    )
    if d.state == "delivered":
        # What queue_finish.lua keeps of a delivered delivery (svcgw.delivery.outcomes).
        return Group(facts, attempts, ANSWERS_NOTE)
    return Group(facts, attempts)


@deliveries.command("retry")
@click.argument("delivery_id")
@json_option
@admin_command
async def deliveries_retry(admin: Admin, delivery_id: str, as_json: bool) -> None:
    """Retry now: a retrying delivery's next attempt, at once.

    It counts as the attempt the schedule planned next; if it fails, the
    schedule goes on from it. Refused for a delivery that is not retrying.
    """
    await first_found(admin.shards, lambda shard: retrynow.retry_now(*shard, admin.settings, delivery_id), NotFound)
    delivery = await _show(admin, delivery_id)
    emit(as_json, {"id": delivery_id, "queued": True, "delivery": delivery.as_dict()}, lambda: None)
    if not as_json:
        click.echo(f"{delivery_id} queued for its next attempt now (attempt {len(delivery.attempts) + 1})")


async def _probe(admin: Admin, appid: str, destination: str | None) -> BreakerRecord | None:
    """The probing record of the address the deliveries go to, when it is being probed: the primary address's
    (``destination`` None or ``primary``), else the further destination's, one ``appid``'s events go to."""
    if not destination or destination == PRIMARY:
        return await breaker.of_instance(admin.shards, admin.settings, appid)
    try:
        inherited, own = await admin.store().destinations_for(appid)
    except NotFound:
        return None
    urls = [d.url for d in (*inherited, *own) if d.id == destination]
    # The instance's account's record of that address: probing is kept per account.
    return await breaker.of_instance(admin.shards, admin.settings, appid, urls[0]) if urls else None


async def _show(admin: Admin, delivery_id: str) -> Delivery:
    """The delivery from whichever shard holds it (a delivery id does not name its shard)."""
    return await first_found(admin.shards, lambda shard: byid.show(*shard, admin.settings, delivery_id), NotFound)
