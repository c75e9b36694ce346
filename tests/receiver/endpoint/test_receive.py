"""The receiver's table of answers to a post that was not stored."""

from __future__ import annotations

import logging

import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from receiver.credentialguard import Throttled
from receiver.endpoint.receive import refused
from receiver.http import BadContentLength, BodyTooLarge
from svcgw import errors
from svcgw.intake.envelope import EnvelopeError
from svcgw.intake.ingest import ReplicaNotConfirmed, UnknownReceiver
from svcgw.storage.layoutversion import LayoutError


@pytest.mark.parametrize(
    ("raised", "status", "code", "message", "retry_after"),
    [
        (BadContentLength(), 400, -400, "invalid Content-Length", None),
        (BodyTooLarge(1024), 413, -413, "the body is larger than 1024 bytes", None),
        (EnvelopeError("event_type must be a string", 422), 422, -422, "event_type must be a string", None),
        (EnvelopeError("the body is not valid JSON"), 400, -400, "the body is not valid JSON", None),
        (UnknownReceiver("we_x"), 404, -404, errors.RECEIVER_NOT_FOUND.message, None),
        (Throttled(4), 429, -429, errors.RECEIVER_LIMITED.message, "4"),
        (RedisConnectionError("down"), 503, -50002, errors.RECEIVER_UNAVAILABLE.message, "1"),
        (RedisClusterException("no node"), 503, -50002, errors.RECEIVER_UNAVAILABLE.message, "1"),
        (ReplicaNotConfirmed("1 of 2"), 503, -50002, errors.RECEIVER_UNAVAILABLE.message, "1"),
        (LayoutError("layout 9"), 503, -50002, errors.RECEIVER_UNAVAILABLE.message, "1"),
    ],
)
def test_every_refused_post_has_its_row(
    raised: Exception, status: int, code: int, message: str, retry_after: str | None
) -> None:
    response = refused(raised)
    assert response.status_code == status
    assert orjson.loads(response.body) == {"code": code, "message": message, "data": None}
    assert response.headers.get("retry-after") == retry_after


def test_a_layout_it_cannot_keep_is_an_error_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="svcgw.receiver"):
        refused(LayoutError("the layout marker names layout 9"))
        refused(RedisConnectionError("down"))
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "post not stored: the layout marker names layout 9")
    ]
