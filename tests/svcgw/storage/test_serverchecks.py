"""The Redis settings that lose data or break the service, judged from what a server says of itself."""

from __future__ import annotations

from typing import Any

from svcgw.storage.serverchecks import ADVICE, BREAKS, LOSES_DATA, UNCHECKED, Finding, ServerFacts, check_server

GOOD_CONFIG = {
    "maxmemory": "1073741824",
    "maxmemory-policy": "noeviction",
    "appendonly": "yes",
    "appendfsync": "everysec",
    "save": "3600 1",
    "hash-max-listpack-value": "2048",
    "stream-node-max-bytes": "16384",
}
GOOD_INFO: dict[str, Any] = {"redis_version": "7.4.1", "maxmemory": 1073741824, "maxmemory_policy": "noeviction"}


def _check(config: dict[str, str] | None = None, info: dict[str, Any] | None = None, **kw: Any) -> list[Finding]:
    required = kw.pop("persistence_required", False)
    facts = ServerFacts({**GOOD_CONFIG, **(config or {})}, {**GOOD_INFO, **(info or {})}, **kw)
    return check_server(facts, persistence_required=required)


def _by_setting(findings: list[Finding]) -> dict[str, str]:
    return {finding.setting: finding.severity for finding in findings}


def test_a_server_with_the_services_settings_has_no_findings() -> None:
    assert _check() == []
    assert _check(persistence_required=True) == []


def test_an_eviction_policy_with_maxmemory_set_loses_data() -> None:
    for policy in ("allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl", "allkeys-lfu"):
        (finding,) = _check({"maxmemory-policy": policy})
        assert (finding.setting, finding.severity, finding.harmful) == ("maxmemory-policy", LOSES_DATA, True)
        assert policy in finding.problem and "acknowledged events" in finding.problem
        assert "CONFIG SET maxmemory-policy noeviction" in finding.fix


def test_an_eviction_policy_without_maxmemory_is_advice() -> None:
    (finding,) = _check({"maxmemory": "0", "maxmemory-policy": "allkeys-lru"})
    assert finding.severity == ADVICE and not finding.harmful


def test_no_aof_loses_data_only_where_the_deployment_requires_persistence() -> None:
    (required,) = _check({"appendonly": "no", "save": ""}, persistence_required=True)
    assert (required.setting, required.severity) == ("appendonly", LOSES_DATA)
    assert "no RDB snapshots either" in required.problem and "SVCGW_REDIS_PERSISTENCE" in required.problem
    (optional,) = _check({"appendonly": "no"})
    assert optional.severity == ADVICE
    (fsync,) = _check({"appendfsync": "no"}, persistence_required=True)
    assert (fsync.setting, fsync.severity) == ("appendfsync", ADVICE)


def test_a_server_too_old_breaks_the_service() -> None:
    (old,) = _check(info={"redis_version": "6.0.16"})
    assert (old.setting, old.severity) == ("redis_version", BREAKS) and "MINID" in old.problem
    assert _check(info={"redis_version": "6.2.0"}) == []
    # Valkey says redis_version 7.2.4 whatever its own: its own version decides.
    assert _check(info={"server_name": "valkey", "valkey_version": "8.0.1", "redis_version": "7.2.4"}) == []


def test_data_laid_out_for_field_expiry_on_a_server_without_it_breaks_the_service() -> None:
    layout = {"version": "2", "since": "0", "dedup": "hexpire"}
    (finding,) = _check(info={"redis_version": "7.2.4"}, layout=layout)
    assert finding.severity == BREAKS and "HEXPIRE" in finding.problem
    assert _check(info={"redis_version": "7.4.0"}, layout=layout) == []
    assert _check(info={"redis_version": "7.0.15"}, layout={**layout, "dedup": "buckets"}) == []


def test_the_size_settings_left_at_redis_defaults_are_advice() -> None:
    found = _check({"hash-max-listpack-value": "64", "stream-node-max-bytes": "4096"})
    assert _by_setting(found) == {"hash-max-listpack-value": ADVICE, "stream-node-max-bytes": ADVICE}


def test_config_refused_is_said_and_info_still_finds_eviction() -> None:
    """A managed Redis refusing CONFIG: unchecked, not a crash; INFO still shows the eviction policy."""
    facts = ServerFacts(
        {},
        {"redis_version": "7.2.0", "maxmemory": 100, "maxmemory_policy": "allkeys-lru", "aof_enabled": 0},
        config_refused="unknown command 'CONFIG'",
    )
    found = check_server(facts, persistence_required=True)
    assert [(f.setting, f.severity) for f in found] == [
        ("maxmemory-policy", LOSES_DATA),
        ("appendonly", LOSES_DATA),
        ("CONFIG", UNCHECKED),
    ]
    assert "unknown command 'CONFIG'" in found[-1].problem and not found[-1].harmful


def test_nothing_readable_is_unchecked_never_fine() -> None:
    facts = ServerFacts(config_refused="NOPERM", info_refused="NOPERM")
    found = check_server(facts, persistence_required=True)
    assert [(f.setting, f.severity) for f in found] == [("CONFIG", UNCHECKED), ("INFO", UNCHECKED)]
    assert "not known either" in found[0].problem


def test_findings_are_worst_first() -> None:
    found = _check(
        {"maxmemory-policy": "allkeys-lru", "stream-node-max-bytes": "4096"},
        info={"redis_version": "6.0.0"},
    )
    assert [f.severity for f in found] == [LOSES_DATA, BREAKS, ADVICE]
