"""The console's error answers: rows of the one error table, in the gateway's shape."""

from __future__ import annotations

import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from receiver.console.service import DeliveryNotFound, DeniedByOperator, Invalid, NotFound, NotRetrying
from receiver.console.web import ConsoleHTTPError, address_error, console_refusal
from svcgw import errors
from svcgw.callbacks.addresses import OWN_ADDRESS, AddressError


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        (errors.NOT_SIGNED_IN, 401, 401),
        (errors.KEY_REFUSED, 401, 401),
        (errors.CSRF_FAILED, 403, -40310),
        (errors.NOT_THE_CALLERS, 404, -40404),
        (errors.NO_DEAD_LETTER, 404, -40404),
        (errors.BAD_REQUEST, 400, -40000),
        (errors.UNSUPPORTED_MEDIA, 415, -41500),
        (errors.STORAGE_UNAVAILABLE, 503, -50002),
    ],
)
def test_each_kind_answers_its_status_and_code(kind: errors.ErrorKind, status: int, code: int) -> None:
    response = ConsoleHTTPError(kind).response()
    assert response.status_code == status
    assert orjson.loads(response.body) == {"code": code, "message": kind.message, "data": None}
    assert response.headers["cache-control"] == "no-store"
    assert ("www-authenticate" in response.headers) == (status == 401)


def test_a_message_of_its_own_and_a_refused_address() -> None:
    answer = ConsoleHTTPError(errors.BAD_REQUEST, "limit must be a whole number").response()
    assert orjson.loads(answer.body)["message"] == "limit must be a whole number"

    refused = address_error(AddressError(OWN_ADDRESS, "callbackUrl points at this service's own address"))
    assert (refused.status, refused.code) == (400, -40012)
    assert refused.message == "callbackUrl points at this service's own address"


@pytest.mark.parametrize(
    ("raised", "status", "code", "message"),
    [
        (DeniedByOperator("denied by the operator"), 403, -40320, "denied by the operator"),
        (DeliveryNotFound("no delivery 'x'"), 404, -40404, errors.NO_DELIVERY.message),
        (NotRetrying("it is delivered"), 409, -40900, "it is delivered"),
        (NotFound("no dead letter 'x'"), 404, -40404, errors.NO_DEAD_LETTER.message),
        (NotFound("no instance 'x'"), 404, -40404, errors.NOT_THE_CALLERS.message),
        (Invalid("state must be one of ..."), 400, -40000, "state must be one of ..."),
        (AddressError(OWN_ADDRESS, "own address"), 400, -40012, "own address"),
        (RedisConnectionError("down"), 503, -50002, errors.STORAGE_UNAVAILABLE.message),
    ],
)
def test_the_one_mapping_of_what_a_handler_raises(raised: Exception, status: int, code: int, message: str) -> None:
    refusal = console_refusal(raised)
    assert (refusal.status, refusal.code, refusal.message) == (status, code, message)
    assert console_refusal(refusal) is refusal
