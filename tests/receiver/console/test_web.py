"""The console's error answers: rows of the one error table, in the gateway's shape."""

from __future__ import annotations

import orjson
import pytest

from receiver.console.web import ConsoleHTTPError, address_error
from svcgw import errors
from svcgw.addresses import OWN_ADDRESS, AddressError


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
