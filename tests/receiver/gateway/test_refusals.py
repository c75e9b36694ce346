"""The gateway's table of answers to errors, and its one handler's warnings."""

from __future__ import annotations

import logging

import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from receiver.credentialguard import Throttled
from receiver.gateway import codes as gateway_codes
from receiver.gateway.refusals import ROWS, refused
from receiver.http import BodyTooLarge, ConflictingKeys
from svcgw.callbacks.addresses import OWN_ADDRESS, AddressError
from svcgw.errors import GatewayError, NotFound
from svcgw.registry.copies import ShardUnavailable
from svcgw.upstream import UpstreamUnreachable


@pytest.mark.parametrize(
    ("raised", "status", "code", "message", "headers"),
    [
        (GatewayError(gateway_codes.QUOTA_FULL, "full"), 402, -40402, "full", {}),
        (NotFound("no instance 'we_x'", what="instance"), 404, -40404, gateway_codes.NOT_FOUND.message, {}),
        # The caller's account, gone since its key was checked: a key that no longer works (no scheme named).
        (NotFound("no account 'acc_x'", what="account"), 401, 401, gateway_codes.UNAUTHORIZED.message, {}),
        (BodyTooLarge(2048), 413, -41300, "the request body is larger than 2048 bytes", {}),
        (ConflictingKeys(), 401, 401, gateway_codes.UNAUTHORIZED.message, {"WWW-Authenticate": "Bearer"}),
        (Throttled(9), 429, -42900, gateway_codes.KEYS_THROTTLED_MESSAGE, {"Retry-After": "9"}),
        (AddressError(OWN_ADDRESS, "our own"), 400, -40012, "our own", {}),
        (UpstreamUnreachable("user/getProfile: refused"), 502, -50002, gateway_codes.UNAVAILABLE.message, {}),
        (RedisConnectionError("down"), 502, -50002, gateway_codes.UNAVAILABLE.message, {}),
        (RedisClusterException("no node"), 502, -50002, gateway_codes.UNAVAILABLE.message, {}),
        (ShardUnavailable(1, RedisConnectionError("down")), 502, -50002, gateway_codes.UNAVAILABLE.message, {}),
    ],
)
def test_every_error_the_gateway_answers_has_its_row(
    raised: Exception, status: int, code: int, message: str, headers: dict[str, str]
) -> None:
    response = refused(raised, "user", "getProfile")
    assert response.status_code == status
    assert orjson.loads(response.body) == {"code": code, "message": message, "data": None}
    assert {name: response.headers[name] for name in headers} == headers
    assert ("www-authenticate" in response.headers) == ("WWW-Authenticate" in headers)


def test_a_thing_the_gateway_never_looks_for_is_no_answer() -> None:
    letter = NotFound("no dead letter 'x'", what="dead letter")
    with pytest.raises(NotFound) as raised:
        ROWS.answer(letter)
    assert raised.value is letter


def test_failures_are_warned_of_with_the_operation(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="svcgw.gateway"):
        refused(UpstreamUnreachable("long/stop: connection refused"), "long", "stop")
        refused(RedisConnectionError("down"), "user", "getProfile")
        refused(GatewayError(gateway_codes.NOT_FOUND), "user", "getProfile")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "upstream long/stop failed: long/stop: connection refused"),
        ("WARNING", "gateway storage error on user/getProfile: ConnectionError"),
    ]
