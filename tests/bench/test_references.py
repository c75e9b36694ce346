"""The references a run's ratios divide by."""

from __future__ import annotations

from tests.bench.scenarios import median_sample


def _sample(per_s: float, failed: int = 0) -> dict[str, float | int]:
    return {"requests": int(per_s * 1.5), "per_s": per_s, "failed": failed, "cpu_us_per_request": 1e6 / per_s}


def test_the_aiohttp_loop_is_its_median_sample_with_every_sample_and_failure_kept() -> None:
    reference = median_sample([_sample(4061.0), _sample(5496.0), _sample(4400.0, failed=1)])
    assert reference["per_s"] == 4400.0
    assert reference["cpu_us_per_request"] == 1e6 / 4400.0
    assert reference["samples_per_s"] == [4061.0, 5496.0, 4400.0]
    # A failed request in any sample is a failed reference: the targets on it are not met.
    assert reference["failed"] == 1
    assert reference["requests"] == int(4061.0 * 1.5) + int(5496.0 * 1.5) + int(4400.0 * 1.5)
    assert median_sample([_sample(100.0)])["per_s"] == 100.0
