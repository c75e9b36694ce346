"""The benchmark's short mode runs to the end and prints its JSON line; no figure is judged here.

The short run cannot do the work the targets name: its verdict says it is not judged, and it exits 0
whatever its targets (tests/bench/test_verdict.py judges synthetic figures instead).
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from tests.bench.services import REPO

EXPECTED = {
    "ingest": {"fixed_p99_ms", "fixed_rate", "saturation_per_s", "saturation_p50_ms", "commands_per_post",
               "bytes_per_event_logged", "fixed_posts_due", "fixed_ok", "acknowledged", "stored"},
    "e2e": {"deliveries_per_s", "commands_per_delivery", "queued", "delivered"},
    "sustained": {"posted_per_s", "delivered_per_s"},
    "latency": {"p50_ms", "p99_ms", "posts_due", "posted", "delivered", "rate"},
    "latency_light": {"p50_ms", "p99_ms", "posts_due", "posted", "delivered", "rate"},
    "slow": {"deliveries_per_s", "rss_mb", "expected", "delivered", "worker_cpu_us"},
    "isolation": {"healthy_per_s", "control_per_s", "vs_control", "healthy_delivered", "control_delivered",
                  "vs_control_rounds", "control_per_s_rounds", "healthy_per_s_rounds", "control_cpu_us_rounds",
                  "healthy_cpu_us_rounds", "hanging_attempts_rounds", "healthy_expected_rounds", "seconds_rounds"},
    "accounts": {"healthy_per_s", "control_per_s", "vs_control", "healthy_delivered", "control_delivered",
                 "healthy_expected", "vs_control_rounds", "control_per_s_rounds", "healthy_per_s_rounds",
                 "control_cpu_us_rounds", "healthy_cpu_us_rounds", "hanging_attempts_rounds",
                 "healthy_expected_rounds", "seconds_rounds"},
    "retry": {"lateness_p50_s", "lateness_p99_s", "lateness_max_s", "promoted_within_s", "attempted", "due_at_once",
              "attempts_per_s"},
    "reference": {"aiohttp_loop_c50", "rq_simpleworker_x2", "rq_forking_worker"},
    "redis": {"commands_per_delivery", "commands_per_post", "bytes_per_event_logged"},
    "ratios": {"ingest_vs_aiohttp", "ingest_p99_vs_saturation_p50", "e2e_vs_simpleworker", "e2e_vs_aiohttp",
               "latency_p50_vs_light", "latency_p99_vs_light", "slow_vs_e2e", "isolation", "retry_vs_e2e"},
    "setup": {"appendfsync", "load_generator", "machine", "elapsed_s", "elapsed_by_step_s"},
    "memory": {"small", "msg"},
}  # fmt: skip
MEMORY = {"payload_bytes", "logged_bytes_per_event", "delivered_bytes_per_event", "dead_letter_bytes",
          "commands_per_event", "breakdown"}  # fmt: skip


@pytest.mark.slow
# About a minute alone; three times that when other suites share the two cores. Bounded either way.
@pytest.mark.timeout(300)
def test_short_benchmark_prints_every_figure() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVCGW_")}
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench", "--short"], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    figures = orjson.loads(lines[-1])
    assert lines[-2].startswith("verdict: not judged (short run")
    counted = [name for name, target in figures["targets"].items() if target["judged"]]
    assert figures["verdict"]["judged"] is False and figures["verdict"]["targets"] == len(counted)
    assert "e2e_vs_aiohttp" in figures["targets"] and "e2e_vs_aiohttp" not in counted  # reported only
    for section, names in EXPECTED.items():
        assert names <= set(figures[section]), section
    assert {
        "ingest_vs_aiohttp",
        "e2e_vs_aiohttp",
        "latency_p99_vs_light",
        "commands_per_delivery",
        "retry_vs_e2e",
    } <= set(figures["targets"])
    # Every ratio a target judges is worked out from figures of this run (a short run's are numbers too).
    assert all(isinstance(v, float) for v in figures["ratios"].values()), figures["ratios"]
    ingest = figures["ingest"]
    assert ingest["fixed_rate"] == pytest.approx(max(ingest["saturation_per_s"] * 0.2, 50), abs=0.1)
    assert figures["latency_light"]["rate"] < figures["latency"]["rate"]
    # Each step's time is printed and kept; together they are nearly the whole run.
    steps = figures["setup"]["elapsed_by_step_s"]
    assert {"ingest", "isolation", "gateway", "memory"} <= set(steps)
    assert sum(steps.values()) == pytest.approx(figures["setup"]["elapsed_s"], rel=0.1)
    assert "    gateway: " in done.stderr
    assert all({"value", "target", "met", "why"} <= set(v) for v in figures["targets"].values())
    assert all(isinstance(v["met"], bool) for v in figures["targets"].values())
    assert figures["setup"]["mode"] == "short"
    for section in ("isolation", "accounts"):
        pairs = figures[section]
        # Every run delivered something, so its CPU per healthy delivery is a positive figure.
        assert all(cpu > 0 for cpu in pairs["control_cpu_us_rounds"] + pairs["healthy_cpu_us_rounds"]), section
        assert all(isinstance(n, int) and n >= 0 for n in pairs["hanging_attempts_rounds"]), section
    for payload in figures["memory"].values():
        assert MEMORY <= set(payload) and {"logged", "delivered", "dead"} <= set(payload["breakdown"])
        # With 1 and 2 further destinations: what each adds to an event, logged and after delivery.
        assert set(payload["destinations"]) == {"1", "2"}
        for fanned in payload["destinations"].values():
            assert fanned["logged_bytes_per_destination"] > 0 and "delivered_bytes_per_destination" in fanned
        assert payload["delivered_bytes_per_event"] > 0 and payload["dead_letter_bytes"] > 0
        assert sum(payload["breakdown"]["delivered"].values()) == payload["delivered_bytes_per_event"]
    assert {"memory_small_delivered", "memory_msg_logged", "memory_msg_commands"} <= set(figures["targets"])
    gateway = figures["gateway"]
    assert {"c50_w1_per_s", "c50_w2_per_s", "c1_added_p50_ms", "round_trips_per_call", "rss_after_mb"} <= set(
        gateway["after"]
    )
    assert {"fast_c50_per_s", "sim_c50_per_s"} <= set(gateway["upstream"]) and gateway["setup"]["failed_calls"] == 0
    assert {"gateway_w1_vs_direct", "gateway_sim_w1_vs_sim_direct", "gateway_round_trips",
            "gateway_added_p50_vs_sim"} <= set(figures["targets"])  # fmt: skip
    assert {"added_p50_vs_sim_p50", "added_p99_vs_sim_p99"} <= set(gateway["ratios"])


def test_every_http_worker_is_counted_once_it_listens() -> None:
    """The bench loads a server only once each of its HTTP workers listens (services.wait_for_listeners)."""
    import socket

    from tests.bench.services import listeners
    from tests.support import free_port

    assert listeners([os.getpid()], free_port()) == 0
    first, second = socket.socket(), socket.socket()
    try:
        for sock in (first, second):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        first.bind(("127.0.0.1", 0))
        port = first.getsockname()[1]
        second.bind(("127.0.0.1", port))
        first.listen()
        assert listeners([os.getpid()], port) == 1
        second.listen()  # one process, however many of its sockets listen
        assert listeners([os.getpid(), 1], port) == 1
    finally:
        first.close()
        second.close()
    assert listeners([os.getpid()], port) == 0
