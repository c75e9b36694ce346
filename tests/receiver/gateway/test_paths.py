"""The path guard: which raw paths under the gateway's trees are ambiguous."""

from __future__ import annotations

import pytest

from receiver.gateway.paths import path_problem


@pytest.mark.parametrize(
    "path",
    [
        b"/svc/api/message/sendText/",
        b"/svc/api//message/sendText",
        b"//svc/api/message/sendText",
        b"/svc//api/message/sendText",
        b"/svc/./api/message/sendText",
        b"/svc/x/../api/message/sendText",
        b"/svc/api/message/%2e",
        b"/svc/api/message/%2E%2e",
        b"/svc/api/message%2fsendText/x",
        b"/svc/api/message%2FsendText",
        b"/svc/api/message/send%2eText",
        b"/svc/api",
        b"/svc/api/",
        b"/svc/api/message",
        b"/svc/api/a/b/c",
        b"/svc/instances/set-callback/",
        b"/svc/instances/./set-callback",
    ],
)
def test_ambiguous_paths(path: bytes) -> None:
    assert path_problem(path) is not None


@pytest.mark.parametrize(
    "path",
    [
        b"/svc/api/message/sendText",
        b"/svc/api/message/sendText?x=/../",
        b"/svc/api/message/send%54ext",
        b"/svc/instances/set-callback",
        b"/svc/receiver/we_x/token/",  # not the gateway's to judge
        b"/healthz/",
        b"/",
    ],
)
def test_unambiguous_or_unguarded_paths(path: bytes) -> None:
    assert path_problem(path) is None
