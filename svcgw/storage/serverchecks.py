"""What is wrong with a Redis server's settings for this service: facts in, findings out, pure.

A Redis that evicts keys under memory pressure drops acknowledged posts,
pending deliveries and dead letters without a word; one without persistence
forgets them when it restarts; one too old refuses the commands every post
uses. :func:`check_server` turns what a server said of itself
(:class:`ServerFacts`: its ``CONFIG GET`` and ``INFO`` answers, and the
shard's layout marker) into :class:`Finding` s, each with what is wrong and
how to fix it. ``svcgw.shards.serverfacts`` reads the facts; the servers and
workers log the findings at start, ``/readyz`` reports the harmful ones, and
``svcgw doctor`` prints them all.

Severities, from the worst:

``loses-data``
    acknowledged data can be lost: an eviction policy other than
    ``noeviction`` while ``maxmemory`` is set; no AOF where the deployment
    says it needs persistence (``SVCGW_REDIS_PERSISTENCE=required``).
``breaks``
    the service cannot work on it: a Redis older than 6.2 (``XADD ...
    MINID``, used by every stored post), or a shard whose data was laid out
    for per-field expiry (``HEXPIRE``) now on a server without it.
``unchecked``
    a setting could not be read (a managed Redis refusing ``CONFIG``): said
    so, not guessed.
``advice``
    costs memory or durability the operator may have chosen: no AOF when
    persistence is not required, ``appendfsync no``, the size settings of
    :mod:`.serverconfig` left at Redis's defaults, an eviction policy that
    would evict once ``maxmemory`` is set.

Only ``loses-data`` and ``breaks`` are :attr:`Finding.harmful`: they make
``/readyz`` degraded and ``svcgw doctor`` exit non-zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .layoutversion import HEXPIRE, Server
from .serverconfig import SETTINGS

__all__ = [
    "ADVICE",
    "BREAKS",
    "CONFIG_NAMES",
    "LOSES_DATA",
    "UNCHECKED",
    "Finding",
    "ServerFacts",
    "check_server",
]

LOSES_DATA = "loses-data"
BREAKS = "breaks"
UNCHECKED = "unchecked"
ADVICE = "advice"
_ORDER = (LOSES_DATA, BREAKS, UNCHECKED, ADVICE)

# What CONFIG GET is asked for; INFO answers the first three too, when CONFIG is refused.
CONFIG_NAMES = ("maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save", *SETTINGS)

# XADD ... MINID, which every stored post runs (svcgw/storage/lua), came with Redis 6.2.
MINIMUM_REDIS = (6, 2)

_PERSIST = (
    "CONFIG SET appendonly yes, then CONFIG REWRITE (or `appendonly yes` and `appendfsync everysec` in redis.conf)"
)


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a server: the setting, how bad, what happens, and how to fix it."""

    setting: str
    severity: str
    problem: str
    fix: str

    @property
    def harmful(self) -> bool:
        return self.severity in (LOSES_DATA, BREAKS)

    def document(self) -> dict[str, Any]:
        return {**asdict(self), "harmful": self.harmful}


@dataclass(frozen=True)
class ServerFacts:
    """What a server said of itself.

    ``config``: the ``CONFIG GET`` answers by name (empty when refused, with
    ``config_refused`` saying why); ``info``: the ``INFO`` fields (empty when
    refused, with ``info_refused``); ``layout``: the shard's layout marker
    (``svcgw.storage.layoutversion``), empty when not written yet.
    """

    config: Mapping[str, str] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)
    layout: Mapping[str, str] = field(default_factory=dict)
    config_refused: str | None = None
    info_refused: str | None = None


def check_server(facts: ServerFacts, *, persistence_required: bool) -> list[Finding]:
    """The findings of one server, worst first (see the module docstring)."""
    settings = _settings(facts)
    findings = [
        *_eviction(settings),
        *_persistence(settings, persistence_required),
        *_version(facts),
        *_sizes(facts.config),
        *_unread(facts, settings),
    ]
    return sorted(findings, key=lambda finding: _ORDER.index(finding.severity))


def _settings(facts: ServerFacts) -> dict[str, str]:
    """The settings by their CONFIG names: CONFIG's answers, else what INFO says of them."""
    found: dict[str, str] = {}
    info = facts.info
    if "maxmemory" in info:
        found["maxmemory"] = str(info["maxmemory"])
    if "maxmemory_policy" in info:
        found["maxmemory-policy"] = str(info["maxmemory_policy"])
    if "aof_enabled" in info:
        found["appendonly"] = "yes" if str(info["aof_enabled"]) == "1" else "no"
    found.update({name: str(value) for name, value in facts.config.items()})
    return found


def _eviction(settings: Mapping[str, str]) -> list[Finding]:
    policy = settings.get("maxmemory-policy")
    if policy is None or policy == "noeviction":
        return []
    fix = "CONFIG SET maxmemory-policy noeviction, then CONFIG REWRITE (or `maxmemory-policy noeviction` in redis.conf)"
    limit = settings.get("maxmemory", "")
    if limit.isdigit() and int(limit) == 0:
        problem = (
            f"maxmemory-policy is {policy}: nothing is evicted while maxmemory is 0 (no limit), "
            "but once a limit is set Redis drops keys under memory pressure"
        )
        return [Finding("maxmemory-policy", ADVICE, problem, fix)]
    problem = (
        f"maxmemory-policy is {policy} with maxmemory {limit or 'set'}: under memory pressure Redis silently "
        "drops keys, acknowledged events, pending deliveries and dead letters among them "
        "(with noeviction a full Redis refuses writes instead, and posts are answered 503 and sent again)"
    )
    return [Finding("maxmemory-policy", LOSES_DATA, problem, fix)]


def _persistence(settings: Mapping[str, str], required: bool) -> list[Finding]:
    appendonly = settings.get("appendonly")
    if appendonly is None:
        return []
    if appendonly != "yes":
        snapshots = settings.get("save")
        if snapshots == "":
            kept = "nothing is saved: no RDB snapshots either"
        else:
            kept = "RDB snapshots, if any, keep only what the last one saved"
        problem = (
            f"appendonly is {appendonly}: acknowledged posts and pending deliveries are lost "
            f"when Redis restarts ({kept})"
        )
        if required:
            return [Finding("appendonly", LOSES_DATA, problem + "; SVCGW_REDIS_PERSISTENCE is required", _PERSIST)]
        return [Finding("appendonly", ADVICE, problem, _PERSIST + "; or accept it (SVCGW_REDIS_PERSISTENCE=optional)")]
    if settings.get("appendfsync") == "no":
        problem = (
            "appendfsync is no: the operating system decides when the AOF reaches the disk "
            "(about 30 s lost in a machine crash)"
        )
        fix = "CONFIG SET appendfsync everysec (or always), then CONFIG REWRITE"
        return [Finding("appendfsync", ADVICE, problem, fix)]
    return []


def _version(facts: ServerFacts) -> list[Finding]:
    if not facts.info:
        return []
    server = Server.from_info(facts.info)
    spelled = f"{server.name} {'.'.join(map(str, server.version))}"
    findings = []
    if server.name == "redis" and server.version < MINIMUM_REDIS:
        problem = f"{spelled} is older than Redis 6.2: it refuses XADD ... MINID, which every stored post runs"
        findings.append(
            Finding("redis_version", BREAKS, problem, "upgrade to Redis 7.4 or later (or Valkey 8 or later)")
        )
    if facts.layout.get("dedup") == HEXPIRE and not server.field_expiry:
        problem = (
            f"this shard's data was laid out for per-field expiry (HEXPIRE), which {spelled} does not have: "
            "every post to it is refused"
        )
        fix = "run Redis 7.4 or later (or Valkey 9 or later) for this shard, as the server that laid it out"
        findings.append(Finding("redis_version", BREAKS, problem, fix))
    return findings


def _sizes(config: Mapping[str, str]) -> list[Finding]:
    findings = []
    for name, wanted in SETTINGS.items():
        if name == "maxmemory-policy" or name not in config:
            continue
        value = config[name]
        if value.isdigit() and int(value) < int(wanted):
            problem = (
                f"{name} is {value}, not {wanted}: events take more memory "
                "(about a third more with both size settings at Redis's defaults)"
            )
            findings.append(Finding(name, ADVICE, problem, f"CONFIG SET {name} {wanted}, then CONFIG REWRITE"))
    return findings


def _unread(facts: ServerFacts, settings: Mapping[str, str]) -> list[Finding]:
    findings = []
    if facts.config_refused is not None:
        missing = [name for name in ("maxmemory-policy", "appendonly") if name not in settings]
        read = "read from INFO instead" if not missing else f"{' and '.join(missing)} not known either"
        problem = f"CONFIG GET was refused ({facts.config_refused}): the size settings were not checked; {read}"
        fix = "check these settings in the provider's console (docs/shards.md lists them), or allow CONFIG GET"
        findings.append(Finding("CONFIG", UNCHECKED, problem, fix))
    if facts.info_refused is not None:
        problem = f"INFO was refused ({facts.info_refused}): the server's version was not checked"
        findings.append(Finding("INFO", UNCHECKED, problem, "allow INFO to the service's Redis user"))
    return findings
