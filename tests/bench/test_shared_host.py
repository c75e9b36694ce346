"""The shared-host benchmark's reading of the attacker's requests, and its judging."""

from __future__ import annotations

from tests.bench import verdict
from tests.bench.shared_host import TARGETS, _most_within


def test_requests_within_the_time_each_is_held_were_in_flight_at_once() -> None:
    assert _most_within([], 1.0) == 0
    assert _most_within([0.0, 0.1, 0.2, 1.3], 1.0) == 3


def test_the_victims_ratio_to_its_rate_alone_is_judged_and_a_loss_fails_it() -> None:
    figures = {"after": {"hang": {"vs_control": 0.95, "undelivered": 0},
                         "slow": {"vs_control": 0.97, "undelivered": 2}}}  # fmt: skip
    judged = {j.name: j for j in verdict.judge(figures, TARGETS)}
    assert judged["shared_host_hang_vs_control"].met
    assert not judged["shared_host_slow_vs_control"].met and "undelivered" in judged["shared_host_slow_vs_control"].why
    figures["after"]["hang"]["vs_control"] = 0.85
    assert not {j.name: j for j in verdict.judge(figures, TARGETS)}["shared_host_hang_vs_control"].met
