"""The console's further destinations (``receiver.console.destinations``): their routes, declared once."""

from __future__ import annotations

from ..apispec import Param, path_param
from . import schemas as s
from .consoleroute import APPID, BEFORE, ConsoleRoute, Limit, err, ok, op
from .destinations import DestinationApi

__all__ = ["ROUTES"]

DESTINATION_ID = path_param("destination_id", "dst_ and 16 hex digits")
NOT_FOUND = err("code -40404: no such destination (or appid), or another account's (the same answer)")
BAD = err(
    "code -40000 bad value; -40011/-40012/-40013 address refused (as a callback address); "
    "-40020 event types not plain event type names; -40021 rate not more than 0 and at most 1000; "
    "-40022 a Bearer token with control characters"
)
FULL = err("code -40920: the account, or the instance, has its most destinations (10); remove one first")
SAVED_NOTE = (
    " The address is checked first (nothing is saved when it is refused); once saved, the destination gets one "
    "SvcCallbackTest POST signed with its own secret (and its Bearer token when one is set), and stays saved "
    "whatever the test answers."
)


def _listing(scope: str, path: str, found: bool) -> list[ConsoleRoute]:
    params = (APPID,) if found else ()
    target = "this instance" if found else "all the account's instances"
    whose = "the instance's own (the list also names the account's, which it takes too)" if found else "the account's"
    return [
        op(
            "get",
            path,
            f"console{scope}Destinations",
            f"Further destinations: {whose}, oldest first (no signing secrets)",
            ok(s.DestinationList),
            handler=DestinationApi.listed,
            params=params,
            found=found,
            extra={404: NOT_FOUND} if found else None,
        ),
        op(
            "post",
            path,
            f"consoleAdd{scope}Destination",
            f"Add a further destination for {target}",
            ok(s.SavedDestination, "created, with its test POST's outcome"),
            handler=DestinationApi.add,
            status=201,
            change=True,
            found=found,
            bad=True,
            params=params,
            body=s.DestinationRequest,
            note=SAVED_NOTE,
            extra={400: BAD, 409: FULL, **({404: NOT_FOUND} if found else {})},
        ),
    ]


ROUTES: tuple[ConsoleRoute, ...] = (
    *_listing("Account", "/destinations", False),
    *_listing("Instance", "/instances/{appid}/destinations", True),
    op(
        "get",
        "/destinations/{destination_id}",
        "consoleDestination",
        "One further destination, with its signing secret (never its Bearer token)",
        ok(s.ConsoleDestination),
        found=True,
        params=(DESTINATION_ID,),
        extra={404: NOT_FOUND},
        handler=DestinationApi.show,
    ),
    op(
        "patch",
        "/destinations/{destination_id}",
        "consoleUpdateDestination",
        "Change a further destination: what is sent changes, the rest stays (enabled false disables it)",
        ok(s.SavedDestination),
        change=True,
        found=True,
        bad=True,
        params=(DESTINATION_ID,),
        body=s.DestinationUpdate,
        description=(
            "A blank bearer_token keeps the stored token while the url keeps its origin (scheme, host, port); "
            "on a new origin the token is deleted unless keep_token is true; bearer false deletes it. A test "
            "POST is sent when the url or the token changes, or the destination is enabled again; test is null "
            "otherwise."
        ),
        extra={400: BAD, 404: NOT_FOUND},
        handler=DestinationApi.update,
    ),
    op(
        "delete",
        "/destinations/{destination_id}",
        "consoleRemoveDestination",
        "Remove a further destination with its secret and token",
        ok(s.ConsoleDestination),
        change=True,
        found=True,
        params=(DESTINATION_ID,),
        extra={404: NOT_FOUND},
        handler=DestinationApi.remove,
    ),
    op(
        "post",
        "/destinations/{destination_id}/rotate-secret",
        "consoleRotateDestinationSecret",
        "New signing secret for a further destination; the old one is not kept",
        ok(s.ConsoleDestination),
        change=True,
        found=True,
        params=(DESTINATION_ID,),
        extra={404: NOT_FOUND},
        handler=DestinationApi.rotate,
    ),
    op(
        "post",
        "/destinations/{destination_id}/test",
        "consoleTestDestination",
        "Send one SvcCallbackTest POST to a further destination now",
        ok(s.ConsoleTest, "the test's outcome; ok means only that the address answered 2xx"),
        change=True,
        found=True,
        params=(DESTINATION_ID,),
        description="Not queued, not retried, not in the callback log. No body.",
        extra={404: NOT_FOUND},
        handler=DestinationApi.test,
    ),
    op(
        "get",
        "/destinations/{destination_id}/deliveries",
        "consoleDestinationDeliveries",
        "A further destination's deliveries of the log's retention, newest first, with every attempt",
        ok(s.DeliveryPage),
        found=True,
        bad=True,
        params=(DESTINATION_ID, Param("limit", Limit), BEFORE),
        description=(
            "For an account's destination, those of every instance of the account. Its dead letters: "
            "GET /dead-letters?destination=<id>."
        ),
        extra={404: NOT_FOUND},
        handler=DestinationApi.deliveries,
    ),
)
