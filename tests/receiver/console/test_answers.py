"""The console's answers to errors: its two tables, the JSON API's rendering, the pages' rows."""

from __future__ import annotations

import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from receiver.console import codes as console_codes
from receiver.console.answers import API_ROWS, PAGE_ROWS, api_answer, api_handlers, flow_page
from receiver.console.pageserving import PageError
from receiver.console.qrattempt import AttemptGone, FlowError, Outcome
from receiver.console.service import DeniedByOperator
from receiver.console.web import ConsoleHTTPError, RateLimited
from receiver.credentialguard import Throttled
from receiver.gateway import codes as gateway_codes
from receiver.http import BodyTooLarge, ConflictingKeys
from svcgw import errors
from svcgw.callbacks.addresses import OWN_ADDRESS, AddressError
from svcgw.delivery.retrynow import NotRetrying
from svcgw.errors import Invalid, NotFound
from svcgw.registry.passwords import PasswordRejected


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        (console_codes.NOT_SIGNED_IN, 401, 401),
        (console_codes.KEY_REFUSED, 401, 401),
        (console_codes.CSRF_FAILED, 403, -40310),
        (console_codes.NOT_THE_CALLERS, 404, -40404),
        (console_codes.NO_DEAD_LETTER, 404, -40404),
        (console_codes.BAD_REQUEST, 400, -40000),
        (console_codes.UNSUPPORTED_MEDIA, 415, -41500),
        (console_codes.STORAGE_UNAVAILABLE, 503, -50002),
    ],
)
def test_each_kind_answers_its_status_and_code(kind: errors.ErrorKind, status: int, code: int) -> None:
    response = api_answer(ConsoleHTTPError(kind))
    assert response.status_code == status
    assert orjson.loads(response.body) == {"code": code, "message": kind.message, "data": None}
    assert response.headers["cache-control"] == "no-store"
    assert ("www-authenticate" in response.headers) == (status == 401)


@pytest.mark.parametrize(
    ("raised", "status", "code", "message"),
    [
        (DeniedByOperator("denied by the operator"), 403, -40320, "denied by the operator"),
        (NotRetrying("it is delivered"), 409, -40900, "it is delivered"),
        (Invalid("state must be one of ..."), 400, -40000, "state must be one of ..."),
        (PasswordRejected("too short"), 400, -40000, "too short"),
        (BodyTooLarge(65536), 400, -40000, "the body is larger than 65536 bytes"),
        (AddressError(OWN_ADDRESS, "own address"), 400, -40012, "own address"),
        (ConflictingKeys(), 401, 401, console_codes.NOT_SIGNED_IN.message),
        (Throttled(7), 429, -42900, gateway_codes.KEYS_THROTTLED_MESSAGE),
        (RateLimited(3), 429, -42900, gateway_codes.RATE_LIMITED.message),
        (AttemptGone("x"), 404, -40404, "no such login attempt (an attempt expires after 15 minutes)"),
        (RedisConnectionError("down"), 503, -50002, console_codes.STORAGE_UNAVAILABLE.message),
    ],
)
def test_the_api_table_gives_each_error_its_row(raised: Exception, status: int, code: int, message: str) -> None:
    refusal = API_ROWS.answer(raised)
    assert (refusal.status, refusal.code, refusal.message) == (status, code, message)
    assert API_ROWS.answer(refusal) is refusal


def test_a_thing_not_found_is_answered_by_what_it_is_not_by_its_words() -> None:
    # The message says "dead letter"; the thing is an instance: the instance's row.
    assert API_ROWS.answer(NotFound("no dead letter 'x'", what="instance")).kind is console_codes.NOT_THE_CALLERS
    assert API_ROWS.answer(NotFound("no instance 'x'", what="dead letter")).kind is console_codes.NO_DEAD_LETTER
    assert API_ROWS.answer(NotFound("no delivery 'x'", what="delivery")).kind is console_codes.NO_DELIVERY
    assert API_ROWS.answer(NotFound("no key 'x'", what="api key")).kind is console_codes.NO_KEY
    # A thing the console never looks for has no row there: raised again, a bug and not an answer.
    account = NotFound("no account 'x'", what="account")
    with pytest.raises(NotFound) as raised:
        API_ROWS.answer(account)
    assert raised.value is account


def test_the_headers_of_a_refusal_are_kept_and_a_401_names_bearer() -> None:
    limited = api_answer(API_ROWS.answer(Throttled(7)))
    assert limited.headers["retry-after"] == "7" and "www-authenticate" not in limited.headers
    assert api_answer(API_ROWS.answer(ConflictingKeys())).headers["www-authenticate"] == "Bearer"


def test_a_refused_login_step_is_answered_as_the_gateway_or_the_layer_answered_it() -> None:
    by_gateway = api_answer(API_ROWS.answer(FlowError(Outcome("device/create", 429, -42900, "slow down", None, "5"))))
    assert (by_gateway.status_code, by_gateway.headers["retry-after"]) == (429, "5")
    assert orjson.loads(by_gateway.body) == {"code": -42900, "message": "slow down", "data": None}
    # The gateway's own 401 is not the console's: no scheme named.
    unauthorized = api_answer(API_ROWS.answer(FlowError(Outcome("device/create", 401, 401, "gone"))))
    assert unauthorized.status_code == 401 and "www-authenticate" not in unauthorized.headers
    by_layer = api_answer(API_ROWS.answer(FlowError(Outcome("login/getQr", 200, -3, "no"))))
    assert by_layer.status_code == 200
    assert orjson.loads(by_layer.body)["message"] == "login/getQr was refused: -3 no"


def test_the_api_handler_is_registered_for_every_class_of_its_table() -> None:
    handlers = api_handlers()
    assert set(handlers) == set(API_ROWS.classes)
    assert len(set(handlers.values())) == 1


@pytest.mark.parametrize(
    ("raised", "status", "title"),
    [
        (NotFound("no instance 'x'", what="instance"), 404, "Not found"),
        (NotFound("no account 'x'", what="account"), 404, "Not found"),
        (AttemptGone("x"), 404, "Login expired"),
        (RedisConnectionError("down"), 503, "Storage unavailable"),
        (PageError(400, "Bad filter", "state must be one of ..."), 400, "Bad filter"),
    ],
)
def test_the_pages_table_gives_each_error_its_page(raised: Exception, status: int, title: str) -> None:
    page = PAGE_ROWS.answer(raised)
    assert (page.status, page.title) == (status, title)


def test_the_rate_limit_page_says_when_and_sends_retry_after() -> None:
    page = PAGE_ROWS.answer(RateLimited(1))
    assert (page.status, page.headers) == (429, {"Retry-After": "1"})
    assert page.message.endswith("Try again in 1 second.")
    assert PAGE_ROWS.answer(RateLimited(30)).message.endswith("Try again in 30 seconds.")


def test_a_refused_login_step_as_a_page() -> None:
    by_layer = flow_page(Outcome("long/stop", 200, -3, "no"))
    assert (by_layer.status, by_layer.title, by_layer.headers) == (502, "Refused", {})
    assert by_layer.context == {
        "refusal": {"code": -3, "message": "no", "operation": "long/stop"},
        "nav": "instances",
    }
    by_gateway = PAGE_ROWS.answer(FlowError(Outcome("long/stop", 429, -42900, "slow", None, "4")))
    assert (by_gateway.status, by_gateway.headers) == (429, {"Retry-After": "4"})

