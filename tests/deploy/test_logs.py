"""A worker's log: one JSON object per line, a record per attempt, and never a secret."""

from __future__ import annotations

import os
import pty
import secrets
import select
import subprocess
import sys
import time

import orjson
import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.deploy.load import Load, event_ids, missing
from tests.support import Process, Sink, start_server, wait_for

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow

ATTEMPT_FIELDS = {"time", "level", "appid", "delivery_id", "attempt", "outcome", "duration_ms"}


def test_worker_logs_are_json_records_without_tokens_or_secrets(
    env: dict[str, str], settings: Settings, sink: Sink, redis: Redis
) -> None:
    bearer = "tok_" + secrets.token_hex(16)
    good = provision(settings, url=sink.url, bearer=bearer)
    failing = Sink(status=500).start()
    bad = provision(settings, url=failing.url, bearer=bearer)
    server, base = start_server(env)
    worker = Process(["worker"], env, "worker").start()
    try:
        with Load([good.receiver_url(base)], prefix="ok", limit=20) as delivered:
            wait_for(lambda: delivered.acked() == 20, timeout=20, what="posts to the good destination")
        with Load([bad.receiver_url(base)], prefix="bad", limit=2) as dead:
            wait_for(lambda: dead.acked() == 2, timeout=20, what="posts to the failing destination")
        wait_for(missing(delivered.acknowledged, lambda: event_ids(sink.posts())), timeout=20,
                 what="deliveries")  # fmt: skip
        wait_for(lambda: redis.scard(keys.dead_letters_by_appid(bad.appid)) == 2, timeout=30,
                 what="two dead letters")  # fmt: skip
    finally:
        worker.stop()
        server.stop()
        failing.stop()
    assert sink.posts()[0].headers["authorization"] == f"Bearer {bearer}"  # the token was in use

    lines = [line for line in worker.output().splitlines() if line.strip()]
    records = [orjson.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "message"} <= set(r) for r in records)
    attempts = [r for r in records if "delivery_id" in r]
    assert attempts and all(ATTEMPT_FIELDS <= set(r) for r in attempts)
    assert {r["outcome"] for r in attempts} >= {"delivered", "retry", "dead"}
    assert {r["appid"] for r in attempts} == {good.appid, bad.appid}

    encryption_key = env["SVCGW_ENCRYPTION_KEYS"]
    for process in (worker, server):
        text = process.output()
        for secret in (bearer, encryption_key, good.receiver_token, bad.receiver_token):
            assert secret not in text, f"{process.name} logged a secret"


def test_logs_are_readable_lines_on_a_terminal(env: dict[str, str]) -> None:
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "cli", "worker"], env=env, stdin=subprocess.DEVNULL,
                               stdout=follower, stderr=follower)  # fmt: skip
    os.close(follower)
    output = b""
    try:
        deadline = time.monotonic() + 20
        while b"\n" not in output and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                output += os.read(leader, 4096)
    finally:
        process.terminate()
        process.wait(timeout=20)
        os.close(leader)
    first = output.split(b"\n")[0].strip()
    assert first and not first.startswith(b"{"), output
    assert b" INFO " in first
