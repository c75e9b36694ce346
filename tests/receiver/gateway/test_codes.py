"""The gateway API's error rows."""

from __future__ import annotations

from receiver.gateway import codes
from svcgw.callbacks.addresses import AddressError


def test_the_gateway_table_pairs_each_code_with_its_status_once() -> None:
    # One code may have two statuses only as the spec pairs them (-40402: 402 quota, 403 entitlement).
    pairs = {(kind.code, kind.status) for kind in codes.ALL_KINDS}
    assert len(pairs) == len(codes.ALL_KINDS)


def test_the_gateway_picks_its_not_found_row_by_the_thing_not_by_its_words() -> None:
    assert codes.GATEWAY_NOT_FOUND["instance"] is codes.NOT_FOUND
    assert codes.GATEWAY_NOT_FOUND["account"] is codes.UNAUTHORIZED


def test_an_address_error_has_the_row_of_its_code() -> None:
    assert codes.address_kind(AddressError(-40013, "internal")) is codes.CALLBACK_URL_UNUSABLE
    assert codes.address_kind(AddressError(-40012, "own")) is codes.CALLBACK_URL_OWN
    assert codes.address_kind(AddressError(-1, "odd")) is codes.CALLBACK_URL_INVALID
