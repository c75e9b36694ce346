"""The routing record: enabled destinations by event type, ``*`` for those that take every type."""

from __future__ import annotations

from dataclasses import dataclass

from svcgw.callbacks.routes import build_routes, route


@dataclass(frozen=True)
class D:
    id: str
    enabled: bool = True
    event_types: tuple[str, ...] = ()
    created_at: float = 0.0


def test_the_record_of_the_customers_three_destinations() -> None:
    crm = D("dst_crm", event_types=("Msg",), created_at=1)
    oncall = D("dst_oncall", event_types=("InstanceOffline", "InstanceRecovered"), created_at=2)
    archive = D("dst_archive", created_at=3)
    record = build_routes([archive, oncall, crm])
    assert record == {
        "Msg": "dst_crm",
        "InstanceOffline": "dst_oncall",
        "InstanceRecovered": "dst_oncall",
        "*": "dst_archive",
    }
    assert route(record, "Msg") == ["dst_archive", "dst_crm"]
    assert route(record, "InstanceOffline") == ["dst_archive", "dst_oncall"]
    assert route(record, "GapClosed") == ["dst_archive"]


def test_disabled_destinations_are_in_no_field_and_none_enabled_is_no_record() -> None:
    assert build_routes([D("dst_a", enabled=False), D("dst_b", enabled=False, event_types=("Msg",))]) == {}
    assert build_routes([]) == {}
    assert route({}, "Msg") == []


def test_ids_are_oldest_first_and_a_post_typed_star_reads_the_field_once() -> None:
    record = build_routes([D("dst_b", created_at=2), D("dst_a", created_at=2), D("dst_c", created_at=1)])
    assert record == {"*": "dst_c dst_a dst_b"}
    assert route(record, "*") == ["dst_c", "dst_a", "dst_b"]
