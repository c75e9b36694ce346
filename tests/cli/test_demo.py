"""The demo data that ``svcgw up --demo`` creates: made once, usable with the admin commands."""

from __future__ import annotations

from pathlib import Path

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.cli.commands import ok


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
