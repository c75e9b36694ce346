"""The capability-layer client: answers and the errors it converts."""

from __future__ import annotations

import asyncio
import time

import pytest

from svcgw.upstream import Answer, Upstream, UpstreamUnreachable, UpstreamUnusable, parse_envelope
from tests.support import Sink


def _answer(raw: bytes) -> Answer:
    return Answer(raw, parse_envelope(raw))


def test_upstream_errors_are_converted(sink: Sink) -> None:
    base = sink.url.removesuffix("/hook")

    async def call(timeout: float = 5.0) -> Answer:
        upstream = Upstream(base, timeout=timeout)
        try:
            return await upstream.call("long", "check", b'{"appid":"x"}')
        finally:
            await upstream.aclose()

    with pytest.raises(UpstreamUnusable, match="no integer code"):
        asyncio.run(call())  # the sink answers {"ok": true}
    sink.set(status=500)
    with pytest.raises(UpstreamUnusable, match="HTTP 500"):
        asyncio.run(call())
    sink.set(status=200, delay=1.0)
    started = time.monotonic()
    with pytest.raises(UpstreamUnreachable, match="timed out"):
        asyncio.run(call(timeout=0.2))
    assert time.monotonic() - started < 1.0
    assert sink.posts()[0].path == "/svc/api/long/check"


def test_upstream_unreachable() -> None:
    async def call() -> Answer:
        upstream = Upstream("http://127.0.0.1:9")
        try:
            return await upstream.call("long", "check", b"{}")
        finally:
            await upstream.aclose()

    with pytest.raises(UpstreamUnreachable):
        asyncio.run(call())


@pytest.mark.parametrize("raw", [b"", b"<html>", b"[]", b'{"code":"0"}', b'{"code":true}', b'{"message":"ok"}'])
def test_unusable_envelopes(raw: bytes) -> None:
    with pytest.raises(UpstreamUnusable):
        parse_envelope(raw)


def test_envelope_with_huge_integers_is_usable() -> None:
    answer = _answer(b'{"code":0,"data":{"uin":1688850000000000000123456}}')
    assert answer.ok and answer.data == {"uin": 1688850000000000000123456}
