"""The retry scenario's reading of first attempts: attempt records, and bare outcomes once delivered."""

from __future__ import annotations

import time

from redis import Redis

from svcgw.config.settings import Settings
from tests.bench.scenarios import first_attempts
from tests.conftest import provision
from tests.svcgw.delivery.test_listing import deliver_now, fail_once, post


def test_first_attempts_from_records_and_from_bare_outcomes(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    before = time.time()
    retrying = post(settings, tenant, "f1")
    fail_once(settings, retrying, tenant.appid)
    delivered = post(settings, tenant, "f2")
    deliver_now(settings, delivered, tenant.appid)
    started = first_attempts(redis, [retrying, delivered, "dlv_000000000000000000000000"])
    assert len(started) == 2 and all(before - 1 <= at <= time.time() + 1 for at in started)
