"""The console's shared plumbing: its refusals."""

from __future__ import annotations

from receiver.console.web import ConsoleHTTPError, RateLimited, address_error
from receiver.gateway import codes as gateway_codes
from svcgw.callbacks.addresses import OWN_ADDRESS, AddressError


def test_a_refused_address_is_the_row_of_its_code_with_its_own_message() -> None:
    refused = address_error(AddressError(OWN_ADDRESS, "callbackUrl points at this service's own address"))
    assert (refused.status, refused.code) == (400, -40012)
    assert refused.message == "callbackUrl points at this service's own address"


def test_a_change_over_the_rate_limit_says_when_to_try_again() -> None:
    limited = RateLimited(12)
    assert isinstance(limited, ConsoleHTTPError)
    assert (limited.status, limited.code, limited.retry_after) == (429, -42900, 12)
    assert limited.headers == {"Retry-After": "12"}
    assert limited.message == gateway_codes.RATE_LIMITED.message
