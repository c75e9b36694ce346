"""What the /rq policy allows for rq-dashboard's scripts stays under /rq: the console and /docs keep theirs."""

from __future__ import annotations

import warnings

from starlette.exceptions import StarletteDeprecationWarning

from receiver.app import create_app
from svcgw.config.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

USER, PASSWORD = "operator", "dashboard-pass-123"


def test_only_the_dashboard_may_compile_strings_and_only_behind_its_credentials(env: dict[str, str]) -> None:
    settings = Settings.from_env(dict(env, SVCGW_DASHBOARD_USER=USER, SVCGW_DASHBOARD_PASSWORD=PASSWORD))
    with TestClient(create_app(settings), follow_redirects=False) as client:
        dashboard = client.get("/rq/", auth=(USER, PASSWORD))
        others = {
            "console sign-in": client.get("/console/login"),
            "docs": client.get("/docs"),
        }
    assert dashboard.status_code == 200
    script_src = next(part for part in dashboard.headers["content-security-policy"].split(";") if "script-src" in part)
    assert "'unsafe-eval'" in script_src and "'nonce-" in script_src and "'unsafe-inline'" not in script_src
    for name, answer in others.items():
        policy = answer.headers.get("content-security-policy", "")
        assert policy and "unsafe-eval" not in policy, (name, answer.status_code, policy)
