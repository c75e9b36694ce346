"""/metrics: Prometheus text whose counters move when events flow, shared by every process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from receiver.metrics import merge, render
from svcgw.config.settings import Settings, SettingsError
from svcgw.counters import LATENCY_BUCKETS, attempt_commands, ingest_commands
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.support import Sink, ThreadedWorker, wait_for


def scrape(server: str) -> dict[str, float]:
    answer = httpx.get(server + "/metrics", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def test_counters_move_when_events_flow(
    settings: Settings, server: str, worker: ThreadedWorker, sink: Sink, redis: Redis
) -> None:
    tenant = provision(settings, url=sink.url)
    before = scrape(server)
    assert before["svcgw_events_received_total"] == 0
    assert before["svcgw_queue_depth{state=queued}"] == 0
    assert before["svcgw_instances{status=not_started}"] == 1

    url = tenant.receiver_url(server)
    httpx.post(url, content=b'{"event_type":"Msg","events":[{"id":"m1"},{"id":"m2"}]}', timeout=10).raise_for_status()
    httpx.post(url, content=b'{"event_type":"Msg","events":[{"id":"m2"},{"id":"m3"}]}', timeout=10).raise_for_status()
    wait_for(lambda: len(sink.posts()) == 2, timeout=20, what="two deliveries")

    def settled() -> dict[str, float] | None:
        values = scrape(server)
        # Both roles write their counters twice a second.
        settled = values.get("svcgw_deliveries_total{kind=primary,outcome=delivered}") == 2
        return values if settled and values.get("svcgw_posts_received_total") == 2 else None

    after = wait_for(settled, timeout=10, interval=0.1, what="the delivery counters")
    assert after["svcgw_posts_received_total"] == 2
    assert after["svcgw_events_received_total"] == 4
    assert after["svcgw_duplicates_dropped_total"] == 1
    assert after["svcgw_delivery_attempts_total{kind=primary,outcome=delivered}"] == 2
    assert after["svcgw_delivery_latency_seconds_count"] == 2
    assert after["svcgw_delivery_latency_seconds_bucket{le=+Inf}"] == 2
    assert 0 < after["svcgw_delivery_latency_seconds_sum"] < 60
    assert after["svcgw_queue_depth{state=queued}"] == 0
    assert after["svcgw_dead_letters"] == 0

    # A failing destination: attempts counted as retries, then one dead letter.
    sink.set(status=500)
    httpx.post(url, content=b'{"event_type":"Msg","events":[{"id":"m4"}]}', timeout=10).raise_for_status()
    final = wait_for(
        lambda: (v := scrape(server)).get("svcgw_deliveries_total{kind=primary,outcome=dead}") == 1 and v,
        timeout=30,
        interval=0.1,
        what="a dead letter counted",
    )
    assert final["svcgw_dead_letters"] == 1
    assert final["svcgw_delivery_attempts_total{kind=primary,outcome=retry}"] == len(settings.retry_schedule)
    assert final["svcgw_delivery_attempts_total{kind=primary,outcome=dead}"] == 1
    assert final["svcgw_deliveries_total{kind=primary,outcome=dead}"] == 1
    assert final["svcgw_dead_letters_total{kind=primary}"] == 1
    assert redis.hlen(keys.metrics_counters) > 0


def test_rendering_is_cumulative_and_labelled() -> None:
    counters: dict[str, float] = {}
    latency: dict[str, float] = {}
    for command, key, field, amount in [
        *ingest_commands(keys, 3, 1),
        *attempt_commands(keys, "delivered", received_at=100.0, now=100.07),
        *attempt_commands(keys, "delivered", received_at=100.0, now=400.0),
        *attempt_commands(keys, "retry", received_at=100.0),
        *attempt_commands(keys, "retry", received_at=100.0, kind="destination"),
        *attempt_commands(keys, "dead", received_at=100.0, kind="destination"),
    ]:
        target = counters if key == keys.metrics_counters else latency
        target[field] = target.get(field, 0) + amount
        assert command in ("HINCRBY", "HINCRBYFLOAT")
    text = render(
        {
            "counters": counters,
            "latency": latency,
            "queue": {"queued": 4, "inflight": 1, "scheduled": 2},
            "dead": 0,
            "instances": {"online": 2, "offline": 1},
            "probe_errors": 1,
        }
    ).decode()
    assert "svcgw_events_received_total 4.0" in text
    # The delivery counters by kind: the primary address's series named as before kinds were counted.
    assert counters["delivery_attempts|retry"] == 1 and counters["delivery_attempts|retry|destination"] == 1
    assert 'svcgw_delivery_attempts_total{kind="primary",outcome="retry"} 1.0' in text
    assert 'svcgw_delivery_attempts_total{kind="destination",outcome="retry"} 1.0' in text
    assert 'svcgw_delivery_attempts_total{kind="destination",outcome="dead"} 1.0' in text
    assert 'svcgw_deliveries_total{kind="primary",outcome="delivered"} 2.0' in text
    assert 'svcgw_deliveries_total{kind="destination",outcome="dead"} 1.0' in text
    assert 'svcgw_dead_letters_total{kind="primary"} 0.0' in text
    assert 'svcgw_dead_letters_total{kind="destination"} 1.0' in text
    assert 'svcgw_delivery_latency_seconds_bucket{le="0.1"} 1.0' in text
    assert 'svcgw_delivery_latency_seconds_bucket{le="600.0"} 2.0' in text
    assert 'svcgw_delivery_latency_seconds_bucket{le="+Inf"} 2.0' in text
    assert 'svcgw_queue_depth{state="scheduled"} 2.0' in text
    assert 'svcgw_instances{status="offline"} 1.0' in text
    assert len(LATENCY_BUCKETS) == len(set(LATENCY_BUCKETS))


def test_scraping_needs_the_token_or_a_loopback_client(settings: Settings) -> None:
    from dataclasses import replace

    from starlette.testclient import TestClient

    from receiver.app import create_app

    # TestClient's peer is "testclient", not a loopback address.
    with TestClient(create_app(settings)) as client:
        refused = client.get("/metrics")
        assert refused.status_code == 403 and "SVCGW_METRICS_TOKEN" in refused.text
    token = "m" * 32
    with TestClient(create_app(replace(settings, metrics_token=token))) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer " + "x" * 32}).status_code == 401
        answer = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200 and "svcgw_posts_received_total" in answer.text
        assert token not in answer.text


def test_the_metrics_token_is_a_secret_setting() -> None:
    with pytest.raises(SettingsError, match="SVCGW_METRICS_TOKEN must be at least 16"):
        Settings.from_env({"SVCGW_METRICS_TOKEN": "short"})
    settings = Settings.from_env({"SVCGW_METRICS_TOKEN": "t" * 20})
    assert settings.metrics_token == "t" * 20 and "t" * 20 not in repr(settings)


def test_the_shards_snapshots_are_summed_and_each_shard_is_shown_by_its_label() -> None:
    def shard(queued: int, dead: int, online: int) -> dict[str, Any]:
        return {
            "counters": {"posts_received": 2.0}, "latency": {"0.1": 1.0, "sum": 0.05},
            "queue": {"queued": queued, "inflight": 0, "scheduled": 1}, "dead": dead,
            "instances": {"online": online}, "probe_errors": 0, "failing_destinations": 1,
            "probing_destinations": 2,
        }  # fmt: skip

    one = shard(3, 1, 5)
    assert merge([one]) == one  # one shard: exactly its snapshot, no shard label
    merged = merge([shard(3, 1, 5), None, shard(4, 2, 6)])
    assert merged["queue"] == {"queued": 7, "inflight": 0, "scheduled": 2} and merged["dead"] == 3
    assert merged["counters"] == {"posts_received": 4.0} and merged["instances"] == {"online": 11}
    text = render(merged).decode()
    assert 'svcgw_shard_up{shard="1"} 0.0' in text and 'svcgw_shard_dead_letters{shard="2"} 2.0' in text
    assert 'svcgw_shard_queue_depth{shard="0",state="queued"} 3.0' in text
    assert "svcgw_dead_letters 3.0" in text
    assert "svcgw_probing_destinations 4.0" in text
