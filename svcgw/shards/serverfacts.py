"""Each shard's Redis settings, read and judged: the I/O edge of :mod:`svcgw.storage.serverchecks`.

A shard's server is asked ``CONFIG GET *`` (one pattern: older servers take
no list of names), ``INFO`` and its layout marker, on the server that holds
the shard's keys (``svcgw.storage.servers.on_shard_server``; a Cluster's master
of the shard's slot). A managed Redis may refuse ``CONFIG``: the answer
then is a finding that says the settings could not be checked, with what
``INFO`` tells of them, never a failure. A shard that does not answer at all
is reported as such (``ShardReport.error``), not as a finding.

``serve`` and ``worker`` log the findings but advice at start (:func:`log_reports`);
``/readyz`` reports the harmful ones, read again at most every
:data:`RECHECK_SECONDS` (:class:`SettingsWatch`); ``svcgw doctor`` prints them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisClusterException, RedisError, ResponseError

from svcgw.shards.clients import ShardRedis
from svcgw.storage.serverchecks import CONFIG_NAMES, Finding, ServerFacts, check_server
from svcgw.storage.servers import on_shard_server

__all__ = ["RECHECK_SECONDS", "SettingsWatch", "ShardReport", "check_shards", "log_reports", "read_facts"]

# /readyz reads the settings again after this many seconds: a CONFIG SET shows within it.
RECHECK_SECONDS = 30.0

_UNREACHABLE = (RedisError, RedisClusterException, OSError, TimeoutError)


@dataclass(frozen=True)
class ShardReport:
    """One shard's findings, or why its server could not be asked (``error``: it did not answer)."""

    shard: int
    findings: tuple[Finding, ...] = ()
    error: str | None = None

    @property
    def harmful(self) -> tuple[Finding, ...]:
        return tuple(finding for finding in self.findings if finding.harmful)

    def document(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "findings": [finding.document() for finding in self.findings],
            "error": self.error,
        }


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _refusal(exc: ResponseError) -> str:
    """Redis's words for a refused command, short (they name the command, never a secret)."""
    return _text(str(exc))[:160] or type(exc).__name__


async def read_facts(shard: ShardRedis) -> ServerFacts:
    """What the shard's server says of itself; a refused command is noted, a server down raises."""
    redis, keys = shard
    config: dict[str, str] = {}
    info: Mapping[str, Any] = {}
    config_refused = info_refused = None
    try:
        answer = await on_shard_server(redis, keys, "CONFIG GET", "*")
        found = {_text(name): _text(value) for name, value in dict(answer).items()}
        config = {name: found[name] for name in CONFIG_NAMES if name in found}
    except ResponseError as exc:
        config_refused = _refusal(exc)
    try:
        info = dict(await on_shard_server(redis, keys, "INFO"))
    except ResponseError as exc:
        info_refused = _refusal(exc)
    layout = {_text(name): _text(value) for name, value in (await redis.hgetall(keys.layout)).items()}
    return ServerFacts(config, info, layout, config_refused=config_refused, info_refused=info_refused)


async def _report(index: int, shard: ShardRedis, persistence_required: bool, timeout: float) -> ShardReport:
    try:
        async with asyncio.timeout(timeout):
            facts = await read_facts(shard)
    except _UNREACHABLE as exc:
        return ShardReport(index, error=type(exc).__name__)
    return ShardReport(index, tuple(check_server(facts, persistence_required=persistence_required)))


async def check_shards(
    shards: Sequence[ShardRedis], *, persistence_required: bool, timeout: float
) -> list[ShardReport]:
    """Every shard's report, in index order, the shards read at once, each under ``timeout``."""
    return list(
        await asyncio.gather(
            *(_report(index, shard, persistence_required, timeout) for index, shard in enumerate(shards))
        )
    )


def log_reports(reports: Sequence[ShardReport], log: logging.Logger) -> None:
    """A warning per finding that can lose data, break the service or was not checked (advice: ``svcgw doctor``)."""
    for report in reports:
        for finding in report.findings:
            if finding.severity == "advice":
                continue
            log.warning(
                "Redis of shard %d (%s): %s. Fix: %s",
                report.shard,
                finding.severity,
                finding.problem,
                finding.fix,
                extra={"shard": report.shard},
            )


class SettingsWatch:
    """The shards' reports, read again when older than ``max_age`` (``/readyz``), one reading at a time."""

    def __init__(
        self, shards: Sequence[ShardRedis], *, persistence_required: bool, max_age: float = RECHECK_SECONDS
    ) -> None:
        self.shards = shards
        self.persistence_required = persistence_required
        self.max_age = max_age
        self._reports: list[ShardReport] | None = None
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    def remember(self, reports: list[ShardReport]) -> None:
        """Reports read elsewhere (the server's start), kept as the current ones."""
        self._reports, self._read_at = reports, time.monotonic()

    async def reports(self, timeout: float) -> list[ShardReport]:
        async with self._lock:
            if self._reports is None or time.monotonic() - self._read_at >= self.max_age:
                reports = await check_shards(
                    self.shards, persistence_required=self.persistence_required, timeout=timeout
                )
                # A shard that did not answer keeps what it last said: its outage is /readyz's own report.
                if self._reports is not None:
                    reports = [
                        old if new.error is not None else new for old, new in zip(self._reports, reports, strict=True)
                    ]
                self.remember(reports)
            assert self._reports is not None
            return self._reports
