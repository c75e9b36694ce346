"""The console's error rows, and the row of a further destination's refused value."""

from __future__ import annotations

from receiver.console import codes
from svcgw.callbacks.destinationrules import BadEventTypes, BadLabel, BadRate, DestinationRejected, TooManyDestinations


def test_the_console_picks_its_not_found_row_by_the_thing_not_by_its_words() -> None:
    assert codes.CONSOLE_NOT_FOUND["dead letter"] is codes.NO_DEAD_LETTER
    assert codes.CONSOLE_NOT_FOUND["instance"] is codes.NOT_THE_CALLERS


def test_a_refused_destination_value_has_the_row_of_its_class() -> None:
    assert codes.destination_kind(BadEventTypes("x")) is codes.BAD_EVENT_TYPES
    assert codes.destination_kind(BadRate("x")) is codes.BAD_RATE
    assert codes.destination_kind(TooManyDestinations("x")) is codes.TOO_MANY_DESTINATIONS
    assert codes.destination_kind(BadLabel("x")) is codes.BAD_REQUEST
    assert codes.destination_kind(DestinationRejected("x")) is codes.BAD_REQUEST
