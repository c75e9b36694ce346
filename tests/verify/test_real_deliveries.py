"""Both signature libraries verify what the service really sends: a delivery captured at a loopback sink."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from svcgw_verify import NO_MATCH, check, verify

from svcgw.config.settings import Settings
from tests.conftest import provision
from tests.support import Process, Sink, wait_for
from tests.verify.conftest import NODE_LIB
from tests.worker.test_pipeline import secret_of

pytestmark = pytest.mark.slow

NODE_CHECK = """
const fs = require('node:fs');
const lib = require(process.argv[1]);
const capture = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const body = Buffer.from(capture.body, 'base64');
const good = lib.check(body, capture.headers, { secrets: ['whsec_retired', capture.secret], tolerance: 300 });
const bad = lib.check(body, capture.headers, { secrets: ['whsec_retired'], tolerance: 300 });
process.stdout.write(JSON.stringify({ good, bad }));
"""


def test_a_real_delivery_verifies_with_the_python_and_the_node_library(
    settings: Settings, server: str, worker: Process, sink: Sink, tmp_path: Path
) -> None:
    tenant = provision(settings, url=sink.url)
    post = b'{"event_type":"Msg","events":[{"id":7000000000000000001,"text":"\\u4f60 hello"}]}'
    assert httpx.post(tenant.receiver_url(server), content=post, timeout=10).status_code == 200
    (received,) = wait_for(sink.posts, timeout=20, what="the delivery")
    secret = secret_of(settings, tenant)

    verify(received.body, received.headers, secrets=["whsec_retired", secret], tolerance=300)
    assert check(received.body, received.headers, secrets="whsec_retired") == NO_MATCH
    assert check(received.body + b"\n", received.headers, secrets=secret) == NO_MATCH

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JavaScript library was not checked against this delivery")
    capture = tmp_path / "capture.json"
    capture.write_text(
        json.dumps({"headers": received.headers, "body": base64.b64encode(received.body).decode(), "secret": secret})
    )
    answer = subprocess.run(
        [node, "-e", NODE_CHECK, str(NODE_LIB), str(capture)], capture_output=True, text=True, timeout=30
    )
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == {"good": None, "bad": "signature_mismatch"}
