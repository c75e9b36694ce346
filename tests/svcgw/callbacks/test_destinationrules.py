"""The values a further destination may hold: event types, rate limit, label, id."""

from __future__ import annotations

import pytest

from receiver.console import codes as console_codes
from svcgw import errors
from svcgw.callbacks.destinationrules import (
    KNOWN_EVENT_TYPES,
    MAX_EVENT_TYPES,
    BadEventTypes,
    BadLabel,
    BadRate,
    DestinationRejected,
    check_event_types,
    check_label,
    check_rate,
    is_destination_id,
    split_event_types,
)


def test_event_types_are_kept_in_order_without_repeats_and_empty_means_every_type() -> None:
    assert check_event_types([]) == ()
    assert check_event_types(["", "  "]) == ()
    assert check_event_types(["InstanceOffline", " Msg ", "InstanceOffline"]) == ("InstanceOffline", "Msg")
    assert check_event_types(KNOWN_EVENT_TYPES) == KNOWN_EVENT_TYPES
    # A name the spec does not list yet is a plain name all the same.
    assert check_event_types(["FriendRequest_2"]) == ("FriendRequest_2",)


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (["msg"], "spelled 'Msg'"),
        (["instanceoffline"], "spelled 'InstanceOffline'"),
        (["SvcCallbackTest"], "only as a test"),
        (["Msg,Gap"], "not an event type name"),
        (["*"], "not an event type name"),
        (["1Msg"], "not an event type name"),
        (["Msg Gap"], "not an event type name"),
        (["M" * 65], "longer than 64"),
        ([f"Type{i}" for i in range(MAX_EVENT_TYPES + 1)], f"at most {MAX_EVENT_TYPES}"),
        ([5], "list of event type names"),
    ],
)
def test_bad_event_types_are_refused_with_their_row(names: list[object], said: str) -> None:
    with pytest.raises(BadEventTypes) as refused:
        check_event_types(names)
    assert said in refused.value.message
    assert console_codes.destination_kind(refused.value) is console_codes.BAD_EVENT_TYPES
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, errors.Rejected)


def test_a_comma_or_space_list_is_split() -> None:
    assert split_event_types("Msg, InstanceOffline  InstanceRecovered,") == [
        "Msg",
        "InstanceOffline",
        "InstanceRecovered",
    ]
    assert split_event_types("") == []


@pytest.mark.parametrize(
    ("given", "kept"), [(None, None), (20, 20.0), (0.5, 0.5), ("20", 20.0), ("", None), ("none", None), (1000, 1000.0)]
)
def test_a_rate_is_deliveries_per_second_or_none(given: object, kept: float | None) -> None:
    assert check_rate(given) == kept


@pytest.mark.parametrize("given", [0, -1, 1000.5, float("nan"), float("inf"), True, "fast", [20]])
def test_a_bad_rate_is_refused_with_its_row(given: object) -> None:
    with pytest.raises(BadRate) as refused:
        check_rate(given)
    assert console_codes.destination_kind(refused.value).code == -40021


def test_a_label_is_short_plain_text() -> None:
    assert check_label("  CRM  ") == "CRM" and check_label(None) == ""
    for bad in ("x" * 101, "a\nb", "a\u200bb", 5):
        with pytest.raises(BadLabel):
            check_label(bad)
    assert issubclass(BadLabel, DestinationRejected)
    assert console_codes.destination_kind(BadLabel("x")) is console_codes.BAD_REQUEST


def test_only_the_form_of_an_id_names_a_destination() -> None:
    assert is_destination_id("dst_0123456789abcdef")
    for other in ("dst_0123456789ABCDEF", "dst_123", "key_0123456789abcdef", "dst_0123456789abcdef0", ""):
        assert not is_destination_id(other)
