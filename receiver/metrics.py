"""Prometheus metrics, served as text at ``GET /metrics``.

The numbers live in Redis (``svcgw.counters`` records them, ``svcgw.views.metrics`` reads them
back); this module renders each shard's snapshot, summed, with ``prometheus_client``.

Who may scrape: with ``SVCGW_METRICS_TOKEN`` set, a request carrying
``Authorization: Bearer <token>`` (compared in constant time; anything else
is 401); without it, only clients on a loopback address (403 for the rest).
Queue depths and tenant counts are not for the public internet. A refusal
is raised (``svcgw.errors.PlainRefusal``, answered by the app as text).

With several shards, each shard's snapshot is read (at once) and the
counts are summed (:func:`merge`); each shard counts only its own instances,
whose liveness it holds, so each is counted once. Each shard's queue depth and dead
letters are shown again with a ``shard`` label, and ``svcgw_shard_up`` says
which answered. A shard that does not answer leaves its numbers out of the
sums; shard 0 not answering (the service's own data) fails the scrape (503).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from receiver import plaincodes as plain_codes
from svcgw.counters import COUNTERS, KINDED, LATENCY_BUCKETS, kinded_series
from svcgw.errors import STORAGE_ERRORS, PlainRefusal
from svcgw.views.metrics import snapshot

from .services import Services

__all__ = ["merge", "metrics_endpoint", "render"]

_SUMMED_MAPS = ("counters", "latency", "queue", "instances")
_SUMMED = ("dead", "probe_errors", "failing_destinations", "probing_destinations")

log = logging.getLogger("svcgw.metrics")


class _Snapshot(Collector):
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def collect(self) -> Iterator[Metric]:
        counters: dict[str, float] = self.data["counters"]
        for metric, (help_text, label) in COUNTERS.items():
            if metric in KINDED:
                # The delivery counters, by kind too (svcgw.counters.KINDS).
                labels = [label, "kind"] if label else ["kind"]
                family = CounterMetricFamily(f"svcgw_{metric}", help_text, labels=labels)
                for values, value in sorted(kinded_series(metric, label is not None, counters).items()):
                    family.add_metric(list(values), value)
                yield family
                continue
            family = CounterMetricFamily(f"svcgw_{metric}", help_text, labels=[label] if label else None)
            if label is None:
                family.add_metric([], counters.get(metric, 0.0))
            else:
                prefix = metric + "|"
                for name, value in sorted(counters.items()):
                    if name.startswith(prefix):
                        family.add_metric([name[len(prefix) :]], value)
            yield family

        latency: dict[str, float] = self.data["latency"]
        buckets: list[tuple[str, float]] = []
        running = 0.0
        for bound in LATENCY_BUCKETS:
            running += latency.get(repr(bound), 0.0)
            buckets.append((repr(bound), running))
        running += latency.get("+Inf", 0.0)
        buckets.append(("+Inf", running))
        yield HistogramMetricFamily(
            "svcgw_delivery_latency_seconds",
            "Seconds from receipt of a post to the 2xx that delivered it (retries included).",
            buckets=buckets,
            sum_value=latency.get("sum", 0.0),
        )

        depth = GaugeMetricFamily("svcgw_queue_depth", "Deliveries waiting, by state.", labels=["state"])
        for state, value in self.data["queue"].items():
            depth.add_metric([state], value)
        yield depth
        yield GaugeMetricFamily("svcgw_dead_letters", "Dead letters held now (replayable).", value=self.data["dead"])
        instances = GaugeMetricFamily("svcgw_instances", "Registered instances, by liveness status.", labels=["status"])
        for status, count in sorted(self.data["instances"].items()):
            instances.add_metric([status], count)
        yield instances
        yield GaugeMetricFamily(
            "svcgw_instance_probe_errors",
            "Instances whose last probe could not decide their state.",
            value=self.data["probe_errors"],
        )
        yield GaugeMetricFamily(
            "svcgw_failing_destinations",
            "Destinations (an account's callback address origins, counted per account) whose every attempt has failed "
            "for SVCGW_FAILING_AFTER seconds.",
            value=self.data.get("failing_destinations", 0),
        )
        yield GaugeMetricFamily(
            "svcgw_probing_destinations",
            "Destinations whose attempts time out, and so get fewer attempts at a time than their caps until they "
            "answer (a destination on several shards counts on each).",
            value=self.data.get("probing_destinations", 0),
        )
        shards: list[dict[str, Any] | None] | None = self.data.get("shards")
        if shards is not None:
            yield from _by_shard(shards)


def _by_shard(shards: Sequence[dict[str, Any] | None]) -> Iterator[Metric]:
    up = GaugeMetricFamily("svcgw_shard_up", "Whether the shard's Redis answered this scrape.", labels=["shard"])
    depth = GaugeMetricFamily(
        "svcgw_shard_queue_depth", "Deliveries waiting on each shard, by state.", labels=["shard", "state"]
    )
    dead = GaugeMetricFamily("svcgw_shard_dead_letters", "Dead letters held on each shard.", labels=["shard"])
    for index, data in enumerate(shards):
        up.add_metric([str(index)], 0 if data is None else 1)
        if data is not None:
            for state, value in data["queue"].items():
                depth.add_metric([str(index), state], value)
            dead.add_metric([str(index)], data["dead"])
    yield from (up, depth, dead)


def merge(snapshots: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """The snapshots of every shard (None: it did not answer) as one: every count summed, each shard kept."""
    merged: dict[str, Any] = {part: {} for part in _SUMMED_MAPS} | dict.fromkeys(_SUMMED, 0)
    for data in snapshots:
        if data is None:
            continue
        for part in _SUMMED_MAPS:
            for name, value in data[part].items():
                merged[part][name] = merged[part].get(name, 0) + value
        for part in _SUMMED:
            merged[part] += data.get(part, 0)
    if len(snapshots) > 1:
        merged["shards"] = list(snapshots)
    return merged


def render(data: dict[str, Any]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(data))
    return generate_latest(registry)


def _check_scraper(request: Request, token: str | None) -> None:
    """Refuse (``PlainRefusal``) a request that may not scrape."""
    if token is not None:
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
            return
        raise PlainRefusal(plain_codes.METRICS_TOKEN_REQUIRED, headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
    host = request.client.host if request.client else ""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass  # not an address (a Unix socket's peer): not loopback
    raise PlainRefusal(plain_codes.METRICS_NOT_LOCAL)


async def metrics_endpoint(request: Request) -> Response:
    services: Services = request.app.state.services
    _check_scraper(request, services.settings.metrics_token)
    settings = services.settings
    clients = services.shards
    read = await asyncio.gather(
        *(
            snapshot(client, keys, settings.queue_name, settings, shard=index)
            for index, (client, keys) in enumerate(clients)
        ),
        return_exceptions=True,
    )
    for index, answer in enumerate(read):
        if isinstance(answer, BaseException) and not isinstance(answer, STORAGE_ERRORS):
            raise answer
        if isinstance(answer, STORAGE_ERRORS):
            log.warning("metrics of shard %d not read: %s", index, type(answer).__name__)
    if isinstance(read[0], BaseException):
        raise PlainRefusal(plain_codes.METRICS_UNAVAILABLE)  # shard 0, the service's own data: no scrape without it
    data = merge([None if isinstance(answer, BaseException) else answer for answer in read])
    return Response(render(data), media_type="text/plain; version=0.0.4; charset=utf-8")
