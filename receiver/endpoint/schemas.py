"""The receiver endpoint's route, declared once with its handler, and its request and answer types.

The app's router and ``/openapi.json`` are both made from :data:`ROUTES`
(``receiver.apispec``).

The endpoint reads a post with ``svcgw.intake.envelope`` (raw bytes, ids kept
digit for digit), not with these types: they describe the post for the
document only, as the gateway's do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from svcgw.intake.receivers import RECEIVER_PREFIX

from ..apispec import RETRY_AFTER, Answer, ApiRoute, Error, Param
from .receive import Endpoint

__all__ = ["ROUTES", "ReceiverAnswer", "ReceiverPost"]

Segment = Annotated[str, Meta(min_length=1, pattern="^[A-Za-z0-9_-]+$")]
Count = Annotated[int, Meta(ge=0)]


class ReceiverPost(msgspec.Struct):
    """A post of an instance's events."""

    event_type: Annotated[str, Meta(min_length=1)]
    events: list[dict[str, Any]]
    appid: str | UnsetType = UNSET


class Stored(msgspec.Struct):
    """How many events of the post are new, and how many were seen before."""

    accepted: Count
    duplicates: Count


class ReceiverAnswer(msgspec.Struct):
    """The post is stored."""

    code: Literal[0]
    message: str
    data: Stored


def _error(description: str) -> Answer:
    return Answer(description, Error)


ROUTES = (
    ApiRoute(
        "post",
        RECEIVER_PREFIX + "{appid}/{token}",
        "receiveEvents",
        "Where the capability layer posts an instance's events",
        description="Answers 2xx once the post is stored; the events are then forwarded to the caller.",
        params=(
            Param("appid", Segment, "path", "the instance"),
            Param("token", Segment, "path", "the instance's secret receiver token"),
        ),
        body=ReceiverPost,
        answers={
            200: Answer("stored", ReceiverAnswer),
            400: _error("not a JSON object"),
            404: _error("no such receiver"),
            413: _error("body too large"),
            422: _error("not an envelope"),
            429: Answer(
                "too many posts to receivers that do not exist from this address; retry after Retry-After",
                Error,
                headers={"Retry-After": RETRY_AFTER},
            ),
            503: Answer("storage unavailable; retry", Error, headers={"Retry-After": RETRY_AFTER}),
        },
        handler=Endpoint.handle,
    ),
)
