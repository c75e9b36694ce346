"""The demo data that ``svcgw up --demo`` creates: made once, usable with the admin commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace
from tests.cli.commands import ok
from tests.deploy.redis_fleet import RedisClusterFleet, cluster_fixture


def test_demo_data_is_created_once_and_usable(env: dict[str, str], settings: Settings) -> None:
    from cli.demo import ensure_demo, render_demo

    first = ensure_demo(settings)
    again = ensure_demo(settings)
    assert (again.account, again.key_id, again.key, again.appid) == (
        first.account,
        first.key_id,
        first.key,
        first.appid,
    )
    assert len(first.appid) == 18 and first.appid.startswith("we_")
    assert ok(env, "instances", "show", first.appid)["account"] == first.account

    ok(env, "keys", "revoke", first.key_id)
    renewed = ensure_demo(settings)
    assert renewed.key != first.key and renewed.appid == first.appid

    # The account signs in to the console as DEMO_LOGIN: an invitation link each start, until it has a password.
    assert first.login == renewed.login == "demo@example.com"
    assert first.invitation and renewed.invitation and first.invitation != renewed.invitation

    text = render_demo(renewed, settings)
    receiver = f"{settings.public_url}/svc/receiver/{renewed.appid}/{renewed.receiver_token}"
    assert receiver in text and renewed.key in text
    assert f"svcgw callback set --appid {renewed.appid} --url" in text and "curl" in text


def test_the_demo_turns_on_rq_dashboard_with_generated_credentials(env: dict[str, str], tmp_path: Path) -> None:
    from cli.demo import DASHBOARD_USER, demo_dashboard, render_onboarding

    up_env = {k: v for k, v in env.items() if not k.startswith("SVCGW_DASHBOARD_")}
    assert demo_dashboard(up_env, tmp_path) is True
    password = up_env["SVCGW_DASHBOARD_PASSWORD"]
    assert up_env["SVCGW_DASHBOARD_USER"] == DASHBOARD_USER and len(password) >= 32
    stored = tmp_path / "dashboard" / "password"
    assert stored.read_text().strip() == password and stored.stat().st_mode & 0o077 == 0
    again = {k: v for k, v in env.items() if not k.startswith("SVCGW_DASHBOARD_")}
    assert demo_dashboard(again, tmp_path) is True and again["SVCGW_DASHBOARD_PASSWORD"] == password  # kept

    settings = Settings.from_env(dict(up_env, SVCGW_UPSTREAM_URL="http://127.0.0.1:8090"))
    text = render_onboarding(settings, dashboard_generated=True)
    assert f"{settings.public_url}/console/" in text and f"{settings.public_url}/rq/" in text
    assert password in text and DASHBOARD_USER in text
    for action in ("scan", "confirm", "cancel", "code"):
        assert f'"action":"{action}"' in text, action
    assert "http://127.0.0.1:8090/_sim/qr" in text and "http://127.0.0.1:8090/_sim/sink" in text

    # The operator's own credentials are used as they are, and never printed.
    own = dict(env, SVCGW_DASHBOARD_USER="ops", SVCGW_DASHBOARD_PASSWORD="s3cret-of-the-operator")
    assert demo_dashboard(own, tmp_path) is False and own["SVCGW_DASHBOARD_PASSWORD"] == "s3cret-of-the-operator"
    text = render_onboarding(Settings.from_env(own), dashboard_generated=False)
    assert "s3cret-of-the-operator" not in text and "SVCGW_DASHBOARD_PASSWORD" in text


def test_the_demo_walkthrough_starts_at_an_invitation_that_signs_in(env: dict[str, str], settings: Settings) -> None:
    from cli.demo import ensure_demo, render_onboarding
    from svcgw.registry import passwords
    from svcgw.registry.credentials import Credentials
    from svcgw.registry.invitations import Invitations
    from svcgw.registry.store import Store
    from tests.conftest import with_store

    demo = ensure_demo(settings)
    assert demo.invitation is not None
    text = render_onboarding(settings, dashboard_generated=False, demo=demo)
    assert f"{settings.public_url}/console/invitation/{demo.invitation}" in text and "demo@example.com" in text

    async def accept(store: Store) -> str | None:
        account = await Invitations(store.redis, keys).redeem(demo.invitation or "")
        if account is not None:
            await Credentials(store.redis, keys).set_password(account, passwords.hash_password("demo password 123"))
        return account

    assert with_store(settings, accept) == demo.account
    # With a password chosen, no more links: the walk-through says to sign in with it.
    again = ensure_demo(settings)
    assert again.invitation is None and again.account == demo.account
    text = render_onboarding(settings, dashboard_generated=False, demo=again)
    assert "/console/invitation/" not in text and "sign in as demo@example.com with your password" in text


cluster = cluster_fixture("module")


def test_the_demo_data_is_prepared_on_a_cluster_and_the_commands_see_it(
    env: dict[str, str], cluster: RedisClusterFleet
) -> None:
    from cli.demo import ensure_demo, render_demo

    cluster_env = {k: v for k, v in env.items() if k != "SVCGW_REDIS_URL"}
    cluster_env.update(SVCGW_REDIS_SHARDS=cluster.setting, SVCGW_CLUSTER_SHARDS="4")
    settings = Settings.from_env(cluster_env)
    first = ensure_demo(settings)
    again = ensure_demo(settings)
    assert (again.account, again.key, again.appid) == (first.account, first.key, first.appid)
    assert ok(cluster_env, "instances", "show", first.appid)["account"] == first.account
    # Kept under shard 0's tag, where everything of the whole service is.
    seed = cluster.nodes[0]
    client = RedisCluster(host=seed.host, port=seed.port, decode_responses=True)
    try:
        assert client.hget(KeySpace("{s0}").demo, "appid") == first.appid
    finally:
        client.close()
    # What it prints for the commands names the Cluster, not a Redis URL.
    text = render_demo(first, settings)
    assert f"export SVCGW_REDIS_SHARDS={cluster.setting}" in text and "export SVCGW_CLUSTER_SHARDS=4" in text
    assert "SVCGW_REDIS_URL" not in text


@pytest.mark.parametrize(
    ("shards", "lines"),
    [
        ("redis://127.0.0.1:7101/0 redis://127.0.0.1:7102/0 redis://127.0.0.1:7103/1",
         ["export SVCGW_REDIS_SHARDS='redis://127.0.0.1:7101/0 redis://127.0.0.1:7102/0 redis://127.0.0.1:7103/1'"]),
        ("cluster://127.0.0.1:7000,127.0.0.1:7001",
         ["export SVCGW_REDIS_SHARDS=cluster://127.0.0.1:7000,127.0.0.1:7001", "export SVCGW_CLUSTER_SHARDS=16"]),
        ("redis://:hunter2@127.0.0.1:7101/0 redis://127.0.0.1:7102/0",
         ["export SVCGW_REDIS_SHARDS=...   # every shard, as the service has them (with their passwords)"]),
    ],
)  # fmt: skip
def test_on_shards_the_demo_prints_the_settings_that_name_every_shard(
    shards: str, lines: list[str], tmp_path: Path
) -> None:
    from cli.demo import Demo, render_demo

    settings = Settings.from_env({"SVCGW_REDIS_SHARDS": shards, "SVCGW_STATE_DIR": str(tmp_path)})
    demo = Demo(account="acc_1", key_id="key_1", key="svc_k", appid="we_demo", receiver_token="tok")
    text = render_demo(demo, settings)
    assert all(f"  {line}\n" in text for line in lines), text
    assert "SVCGW_REDIS_URL" not in text and "hunter2" not in text
