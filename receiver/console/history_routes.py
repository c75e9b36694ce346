"""The console's callback log, dead letters and deliveries (``receiver.console.api``): their routes, declared once.

With the account's failing and probing destinations, the health of the addresses the deliveries go to.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from ..apispec import Param, path_param
from . import schemas as s
from .api import Api
from .consoleroute import APPID, BEFORE, ConsoleRoute, Limit, err, ok, op

__all__ = ["ROUTES"]

DELIVERY_ID = path_param("delivery_id")
APPID_QUERY = Param("appid", str)
# Deliveries and dead letters of one further destination (dst_...), or of the primary address ("primary").
DESTINATION_QUERY = Param("destination", str)

ROUTES: tuple[ConsoleRoute, ...] = (
    op(
        "get",
        "/instances/{appid}/log",
        "consoleCallbackLog",
        "The callback log: last 24 h, raw bodies as received, newest first",
        ok(s.LogPage),
        found=True,
        bad=True,
        params=(APPID, Param("limit", Limit), BEFORE),
        handler=Api.log,
    ),
    op(
        "get",
        "/dead-letters",
        "consoleDeadLetters",
        "Dead letters, newest first",
        ok(s.DeadLetterPage),
        found=True,
        bad=True,
        params=(
            APPID_QUERY,
            DESTINATION_QUERY,
            Param("limit", Limit),
            Param("offset", Annotated[int, Meta(ge=0)]),
        ),
        handler=Api.dead_letters,
    ),
    op(
        "get",
        "/dead-letters/{delivery_id}",
        "consoleDeadLetter",
        "One dead letter with its attempts (time, status, error) and body",
        ok(dict[str, Any]),
        found=True,
        params=(DELIVERY_ID,),
        handler=Api.dead_letter,
    ),
    op(
        "post",
        "/dead-letters/replay",
        "consoleReplay",
        "Replay dead letters: the ones named, or all of one instance",
        ok(s.Replayed),
        change=True,
        found=True,
        bad=True,
        body=s.ReplayRequest,
        handler=Api.replay,
    ),
    op(
        "get",
        "/instances/{appid}/deliveries",
        "consoleDeliveries",
        "The instance's deliveries of the log's retention, newest first, with every attempt",
        ok(s.DeliveryPage),
        found=True,
        bad=True,
        description=(
            "Filters combine. At most 5,000 deliveries are looked at per call: with filters that match "
            "little, a page can be short and next_before still says where to go on."
        ),
        params=(
            APPID,
            Param("state", s.DeliveryState),
            Param("event_type", str),
            Param("event_id", str),
            DESTINATION_QUERY,
            Param("limit", Limit),
            BEFORE,
        ),
        handler=Api.deliveries,
    ),
    op(
        "get",
        "/deliveries/{delivery_id}",
        "consoleDelivery",
        "One delivery with every attempt",
        ok(s.ConsoleDelivery),
        found=True,
        params=(DELIVERY_ID,),
        handler=Api.delivery,
    ),
    op(
        "post",
        "/deliveries/{delivery_id}/retry",
        "consoleRetryNow",
        "Retry now: a retrying delivery's next attempt, at once",
        ok(s.ConsoleDelivery),
        change=True,
        found=True,
        params=(DELIVERY_ID,),
        description=(
            "The attempt is the one the retry schedule planned next, brought forward: it counts as an "
            "attempt, and if it fails the schedule goes on from it. No body. code -40900 (409) when the "
            "delivery is not retrying (pending, delivered, dead) or its attempt is already under way."
        ),
        extra={409: err("code -40900: the delivery is not retrying, or its next attempt is already under way")},
        handler=Api.retry_now,
    ),
    op(
        "get",
        "/failing-destinations",
        "consoleFailing",
        "The account's destinations whose every attempt has failed for SVCGW_FAILING_AFTER seconds",
        ok(s.Failing),
        found=True,
        params=(APPID_QUERY,),
        handler=Api.failing,
    ),
    op(
        "get",
        "/probing-destinations",
        "consoleProbing",
        "The account's destinations whose attempts time out, which get fewer attempts at a time until they answer",
        ok(s.Probing),
        found=True,
        params=(APPID_QUERY,),
        handler=Api.probing,
    ),
)
