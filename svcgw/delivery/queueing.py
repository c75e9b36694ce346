"""Deliveries: their ids, their records, and the RQ jobs that carry them.

This module is the only writer of a new delivery. The records are written by
one piece of Lua, ``svcgw/storage/lua/delivery.lua``, which both writers include:

* the ingest script (``ingest``, run by :mod:`svcgw.intake.ingest` for a
  post to a receiver) checks the token, drops repeats, and writes the
  delivery of the new events;
* :func:`queue_delivery` (service events such as ``InstanceOffline``) adds
  the same write to a MULTI pipeline as one ``EVAL``.

Service events of one instance are delivered in order, each with a
per-instance sequence number ``seq`` (``svcgw/storage/lua/chain.lua``): a service
event is not attempted while an earlier one of its instance is queued or
retrying. The instance's undelivered service events wait in a list,
``keys.service_events(appid)``; the first is queued like any delivery, and
each of the others waits as an RQ job with status ``deferred`` in RQ's
deferred registry. The script that records a delivery as delivered or dead
(``svcgw/storage/lua/queue_finish.lua``) takes it off the list and queues the next,
in the same step. Both scripts touch only the keys they are given: the caller
reads the list and names its members' hashes (:mod:`svcgw.delivery.chainkeys`).
A worker killed mid-attempt holds nothing of the list: its job goes back
to the queue when its lease runs out, still first. One that vanishes
without ending (its job deleted with rq's own command-line tools, its data
evicted) is skipped when the instance's next service event is queued.
A dead service event that is replayed (``svcgw dlq replay``) is in no list
any more: it gets its one attempt at once, neither waiting for nor holding
back the instance's later service events, and keeps its ``seq``, by which
a consumer tells it is older than those. Customer events are in no list.

A delivery is: RQ's job hash, which also holds the delivery's fields for a
post's delivery (named by its log entry, svcgw.deliveryid; a service event's
has a delivery hash of its own, :func:`svcgw.storage.keys.delivery`), the job id at
the queue's tail, the queue in ``rq:queues``, and the post in the callback
log. Every delivery is an RQ
job (JSON serializer, id = delivery id, function ``worker.jobs.deliver``) in
the queue ``SVCGW_QUEUE`` so that rq-dashboard lists it and RQ's registries hold it: retries wait in RQ's scheduled
registry and dead letters in its failed registry, from which ``rq requeue``
replays them. The jobs are run by ``svcgw worker``, whose engine executes
many at once in one process; a stock ``rq worker`` must not consume the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from svcgw.config.settings import Settings
from svcgw.delivery.chainkeys import member_keys
from svcgw.intake.envelope import build_envelope
from svcgw.intake.fanout import plan
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import ENQUEUED_AT, job_description, job_fields
from svcgw.storage.scripts import add_to_transaction

__all__ = ["queue_delivery", "seq_pieces"]

# Where each event's seq goes in the envelope built for queue_delivery.lua: a
# byte that serialised JSON never holds raw, so cutting the envelope at it
# cuts nowhere else.
_SEQ_SLOT = b"\x00"


def queue_delivery(
    pipe: Any,
    keys: KeySpace,
    settings: Settings,
    *,
    appid: str,
    account: str,
    event_type: str,
    events: Sequence[dict[str, Any]],
    delivery_id: str,
    now: float,
    chain: Sequence[str],
    destinations: Sequence[str] = (),
) -> None:
    """Add to ``pipe`` (sync or asyncio, in MULTI mode) the command that queues one service-event delivery.

    ``chain``: the ids in the instance's service-event chain, as read under the transaction's
    WATCH of it (:mod:`svcgw.delivery.chainkeys`): the script touches their hashes, so it names them.
    ``destinations``: the further destinations that take the event type, in routing order
    (:meth:`svcgw.callbacks.routecache.Routes.targets`); each gets a delivery of its own with the
    same body, planned and written as a post's are (:func:`svcgw.intake.fanout.plan`, the ingest
    script's ``write_fanned``), in no chain: a destination that fails holds back none of the
    instance's later service events.

    Only buffers: one ``EVAL`` of ``queue_delivery``
    (:func:`svcgw.storage.scripts.add_to_transaction`), which writes the same
    records as the ingest script writes for an accepted post, with the events
    as the envelope's ``events`` and nothing counted as a duplicate. It also
    gives each event the instance's next ``seq`` and queues the delivery
    behind the instance's earlier service events (see the module's text).
    EVAL, not EVALSHA, so a script cache flushed meanwhile cannot fail the
    transaction; its result in the transaction's answers is the first ``seq``.
    """
    if any("seq" in event for event in events):
        raise ValueError("service events get their seq when queued; the event objects must not have one")
    pieces = seq_pieces(appid, event_type, events)
    chain = list(chain)
    queue_key = keys.rq.queue(settings.queue_name)
    description = job_description(event_type, appid)

    def fields_of(job_id: str) -> dict[str, Any]:
        return job_fields(
            job_id, queue_name=settings.queue_name, description=description, failure_ttl=settings.dead_letter_retention
        )

    def flat(fields: dict[str, Any]) -> list[Any]:
        return [part for name, value in fields.items() for part in (name, value)]

    job = fields_of(delivery_id)
    # A service event's delivery id is a dlv_ one, so its destinations' are too (never named by a post).
    fan = plan(keys, destinations, lambda job_id, _named: flat(fields_of(job_id)), primary=delivery_id)
    script_keys = [
        keys.delivery(delivery_id),
        keys.rq.job(delivery_id),
        queue_key,
        keys.rq.queues,
        keys.callback_log(appid),
        keys.service_events(appid),
        keys.service_event_seq(appid),
        keys.rq.deferred(settings.queue_name),
        *member_keys(keys, chain),
        *(fan.keys if fan else ()),
    ]
    args = [
        appid,
        account,
        event_type,
        repr(now),
        len(events),
        delivery_id,
        queue_key,
        settings.log_retention,
        job[ENQUEUED_AT],
        len(chain),
        len(pieces),
        len(fan.deliveries) if fan else 0,
        *chain,
        *pieces,
        *(fan.args if fan else ()),
        *flat(job),
    ]
    add_to_transaction(pipe, "queue_delivery", keys=script_keys, args=args)


def seq_pieces(appid: str, event_type: str, events: Sequence[dict[str, Any]]) -> list[bytes]:
    """The envelope of ``events``, cut where each event's ``seq`` goes (its last member).

    Joining the pieces with the numbers in between gives the body:
    ``{"appid":...,"events":[{"id":...,"seq":7}]}``.
    """
    raw_events = []
    for event in events:
        raw = orjson.dumps(event)
        raw_events.append(raw[:-1] + (b',"seq":' if len(raw) > 2 else b'"seq":') + _SEQ_SLOT + b"}")
    return build_envelope(appid, event_type, raw_events).split(_SEQ_SLOT)
