"""Settings read from the environment: the ceiling of a host across accounts (SVCGW_HOST_CONCURRENCY)."""

from __future__ import annotations

import pytest

from svcgw.config.settings import HOST_CEILING_LEAST, HOST_CEILING_SHARES, Settings, SettingsError


def test_a_hosts_ceiling_is_by_default_several_accounts_caps() -> None:
    assert Settings.from_env({}).host_ceiling == HOST_CEILING_SHARES * 16
    assert Settings.from_env({"SVCGW_DESTINATION_CONCURRENCY": "5"}).host_ceiling == HOST_CEILING_SHARES * 5
    assert Settings.from_env({"SVCGW_HOST_CONCURRENCY": "100"}).host_ceiling == 100


@pytest.mark.parametrize("value", ["31", "0", "many"])
def test_a_hosts_ceiling_that_one_account_could_fill_is_refused_at_start(value: str) -> None:
    # One account holds at most its own cap on a host: a ceiling under two of them would be its to fill.
    with pytest.raises(SettingsError, match="SVCGW_HOST_CONCURRENCY"):
        Settings.from_env({"SVCGW_HOST_CONCURRENCY": value})
    assert Settings.from_env({"SVCGW_HOST_CONCURRENCY": str(HOST_CEILING_LEAST * 16)}).host_ceiling == 32
