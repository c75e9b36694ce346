"""The demo data that ``svcgw up --demo`` creates: made once, usable with the admin commands."""

from __future__ import annotations

from svcgw.settings import Settings
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

    text = render_demo(renewed, settings)
    receiver = f"{settings.public_url}/svc/receiver/{renewed.appid}/{renewed.receiver_token}"
    assert receiver in text and renewed.key in text
    assert f"svcgw callback set --appid {renewed.appid} --url" in text and "curl" in text
