"""An attempt signed with the stored signing secret: sealed, or in clear from before; unopenable fails it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from cryptography.fernet import Fernet

from svcgw.callbacks.outbound import Response
from svcgw.callbacks.signing import verify
from svcgw.vault import TokenVault
from worker.delivery import ANSWER_BODY_BYTES, Attempt, Prepared, prepare_claimed, send
from worker.queue import Claimed

SECRET = "whsec_" + "s" * 43
BODY = b'{"event_type":"Msg","events":[{"id":"1"}]}'
VAULT = TokenVault([Fernet.generate_key().decode()])


class Recorder:
    """A ``Sender`` that answers 200 and keeps what it was asked to send."""

    timeout = 5.0

    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes, dict[str, str]]] = []

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        self.posts.append((url, body, dict(headers)))
        return Response(200, "ok")

    async def aclose(self) -> None:
        pass


def claimed(secret: str) -> Claimed:
    fields: dict[str, bytes | None] = {
        "appid": b"we_a",
        "account": b"acc_a",
        "event_type": b"Msg",
        "body": BODY,
        "failures": b"0",
        "state": b"queued",
        "attempts": b"0",
        "received_at": b"1700000000",
    }
    return Claimed("dlv_1", fields, {"url": "http://127.0.0.1:9/hook", "secret": secret}, {})


def attempt(prepared: Prepared) -> tuple[bool, str | None, Recorder]:
    client = Recorder()
    result = asyncio.run(send(client, prepared))
    return result.ok, result.error, client


def test_a_sealed_secret_signs_in_clear() -> None:
    prepared = prepare_claimed(claimed(VAULT.seal(SECRET)), VAULT)
    assert prepared is not None
    ok, _error, client = attempt(prepared)
    ((_url, body, headers),) = client.posts
    assert ok and body == BODY
    assert verify(SECRET, headers["X-Svc-Timestamp"], body, headers["X-Svc-Signature"])


def test_a_secret_stored_in_clear_before_still_signs() -> None:
    prepared = prepare_claimed(claimed(SECRET), VAULT)
    assert prepared is not None
    ok, _error, client = attempt(prepared)
    ((_url, body, headers),) = client.posts
    assert ok and verify(SECRET, headers["X-Svc-Timestamp"], body, headers["X-Svc-Signature"])


def test_a_secret_no_key_opens_fails_the_attempt_and_sends_nothing() -> None:
    other = TokenVault([Fernet.generate_key().decode()])
    prepared = prepare_claimed(claimed(other.seal(SECRET)), VAULT)
    assert prepared is not None and "s" * 43 not in repr(prepared)
    ok, error, client = attempt(prepared)
    assert not ok and error == "the signing secret cannot be decrypted with the configured keys"
    assert client.posts == []


def test_an_attempt_record_keeps_the_first_kilobyte_of_the_answer() -> None:
    for answer in ("x" * 3000, "é" * 1000, "€" * 400):
        kept = json.loads(Attempt(ok=False, at=1.0, duration=0.1, status=500, response=answer).record(1))["response"]
        assert len(kept.encode()) <= ANSWER_BODY_BYTES and answer.startswith(kept)
        assert len(kept.encode()) > ANSWER_BODY_BYTES - 3  # no more than half a character lost
    assert json.loads(Attempt(ok=True, at=1.0, duration=0.1, response="short").record(1))["response"] == "short"
