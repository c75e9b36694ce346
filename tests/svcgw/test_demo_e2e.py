"""``svcgw up --demo`` end to end: simulator traffic arrives signed at the address given in long/start."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis
import redis.exceptions

from svcgw.callbacks.signing import verify
from tests.support import start_up_demo, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_up_demo_delivers_simulator_traffic_signed(env: dict[str, str], tmp_path: Path) -> None:
    demo = start_up_demo(env)
    up, up_env, port, sim_port, sim = demo.process, demo.env, demo.port, demo.sim_port, demo.sim
    try:
        received = demo.wait_for_msg(timeout=60)
        output = up.output()
        appid = re.search(r"appid\s+(we_\w+)", output)
        exported = re.search(r'export SVCGW_REDIS_URL="redis://:\$\(cat (\S+)\)@127\.0\.0\.1:(\d+)/0"', output)
        assert appid and exported, output
        # The embedded Redis asks for a password, kept in a file of the state dir and never printed.
        password_file = Path(exported[1])
        password = password_file.read_text().strip()
        assert len(password) >= 32 and password not in output
        assert password_file.stat().st_mode & 0o077 == 0
        redis_port = int(exported[2])
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(port=redis_port).ping()
        redis_url = f"redis://:{password}@127.0.0.1:{redis_port}/0"
        assert f"long/start registered {sim}/_sim/sink" in output
        assert f"svcgw callback show --appid {appid[1]}" in output

        # Onboarding in the browser is explained, the simulator's QR codes wait for the phone,
        # and rq-dashboard is on with the credentials printed (and kept owner-only).
        output = wait_for(lambda: "Monitoring: rq-dashboard" in up.output() and up.output(), what="the walk-through")
        assert f"{sim}/_sim/qr" in output
        # It starts at the demo account's invitation: a link that opens the page to choose a password.
        invitation = re.search(rf"http://127\.0\.0\.1:{port}/console/invitation/\S+", output)
        assert invitation and "demo@example.com" in output, output
        page = httpx.get(invitation[0], timeout=10)
        assert page.status_code == 200 and "demo@example.com" in page.text
        assert httpx.get(f"{sim}/_sim/config", timeout=5).json()["qr_auto"] is False
        dashboard = re.search(r"user\s+(\S+)\n\s+password\s+(\S+)", output)
        assert dashboard, output
        user, secret = dashboard[1], dashboard[2]
        assert (tmp_path / "dashboard" / "password").read_text().strip() == secret
        assert (tmp_path / "dashboard" / "password").stat().st_mode & 0o077 == 0
        assert httpx.get(f"http://127.0.0.1:{port}/rq/", timeout=10).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/rq/", auth=(user, secret), timeout=10).status_code == 200
        assert output.count(secret) == 1  # printed once, in no log line

        shown = subprocess.run(
            [sys.executable, "-m", "cli", "callback", "show", "--appid", appid[1], "--json"],
            env=dict(up_env, SVCGW_REDIS_URL=redis_url),
            capture_output=True,
            check=True,
        )
        config = json.loads(shown.stdout)
        assert config["url"] == f"{sim}/_sim/sink"
        first = received[0]
        assert re.fullmatch(r"[0-9a-f]{64}", first["X-Svc-Signature"])
        assert first["X-Svc-Delivery-Id"]
        assert verify(
            config["secret"], first["X-Svc-Timestamp"], first["body"].encode("utf-8"), first["X-Svc-Signature"]
        )
    finally:
        assert up.proc is not None
        up.proc.terminate()
        try:
            up.proc.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
            raise AssertionError(f"up did not exit within 30s:\n{up.output()}") from None
    assert not _answers(redis_port), "the embedded Redis is still running"
    assert not _answers(sim_port) and not _answers(port)
