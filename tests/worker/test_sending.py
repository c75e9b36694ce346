"""An attempt signed with the stored signing secret: sealed, or in clear from before; unopenable fails it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from cryptography.fernet import Fernet

from svcgw.callbacks.outbound import Response
from svcgw.callbacks.signing import verify
from svcgw.delivery.attempt import (
    ANSWER_BODY_BYTES,
    Attempt,
    Openings,
    Prepared,
    decide,
    prepare_claimed,
    prepared_leniently,
)
from svcgw.delivery.queue import Claimed
from svcgw.vault import TokenVault
from worker.sending import redacted, send

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


def test_openings_open_the_same_mappings_once_and_other_mappings_by_what_they_hold() -> None:
    class Counting(TokenVault):
        opened = 0

        def open(self, sealed: str | bytes) -> str:
            Counting.opened += 1
            return super().open(sealed)

    vault = Counting([Fernet.generate_key().decode()])
    openings = Openings(vault)
    own = {"url": "http://127.0.0.1:9/hook", "secret": SECRET, "token": vault.seal("t1")}
    first = openings.of(own, {})
    assert openings.of(own, {}) == first and Counting.opened == 1
    # Other mappings holding the same: still opened once. Another token: opened, and that one told.
    assert openings.of(dict(own), {}) == first and Counting.opened == 1
    other = dict(own, token=vault.seal("t2"))
    assert openings.of(other, {})[1] == "t2" and Counting.opened == 2
    assert openings.of(own, {})[1] == "t1"


def test_an_attempt_record_keeps_the_first_kilobyte_of_the_answer() -> None:
    for answer in ("x" * 3000, "é" * 1000, "€" * 400):
        kept = json.loads(Attempt(ok=False, at=1.0, duration=0.1, status=500, response=answer).record(1))["response"]
        assert len(kept.encode()) <= ANSWER_BODY_BYTES and answer.startswith(kept)
        assert len(kept.encode()) > ANSWER_BODY_BYTES - 3  # no more than half a character lost
    assert json.loads(Attempt(ok=True, at=1.0, duration=0.1, response="short").record(1))["response"] == "short"


# --- further destinations (docs/destinations.md) ------------------------------------------
def destination_claimed(config: dict[str, str]) -> Claimed:
    """A further destination's job as the claim returns it: the destination's hash under a callback hash's names."""
    job = claimed(SECRET)
    return Claimed("dlv_2", {**job.fields, "destination": b"dst_0123456789abcdef"}, config, {"url": "http://x/no"})


def test_a_further_destinations_delivery_is_signed_with_its_secret_and_token_and_names_it() -> None:
    config = {"url": "http://127.0.0.1:9/further", "secret": VAULT.seal("whsec_further"), "token": VAULT.seal("tk")}
    prepared = prepare_claimed(destination_claimed(config), VAULT)
    assert prepared is not None and prepared.kind == "destination" and not prepared.removed
    result = asyncio.run(send(client := Recorder(), prepared))
    ((url, body, headers),) = client.posts
    assert result.ok and url == "http://127.0.0.1:9/further"  # never the account default
    assert headers["X-Svc-Destination"] == "dst_0123456789abcdef" and headers["Authorization"] == "Bearer tk"
    assert verify("whsec_further", headers["X-Svc-Timestamp"], body, headers["X-Svc-Signature"])
    assert json.loads(result.record(1))["dst"] == "dst_0123456789abcdef"


def test_the_primarys_attempt_and_record_are_as_they_were() -> None:
    prepared = prepare_claimed(claimed(SECRET), VAULT)
    assert prepared is not None and prepared.kind == "primary"
    result = asyncio.run(send(client := Recorder(), prepared))
    ((_url, _body, headers),) = client.posts
    assert "X-Svc-Destination" not in headers and "dst" not in json.loads(result.record(1))


def test_a_removed_destinations_delivery_fails_without_a_request_and_is_dead_at_once() -> None:
    prepared = prepare_claimed(destination_claimed({}), VAULT)
    assert prepared is not None and prepared.removed
    ok, error, client = attempt(prepared)
    assert not ok and error == "the destination dst_0123456789abcdef was removed" and client.posts == []
    failed = Attempt(ok=False, at=1.0, duration=0.0, error=error)
    assert decide(prepared, failed, (1.0, 2.0)) == ("dead", None)
    # An attempt that failed otherwise (not prepared: read leniently) is retried as any other.
    lenient = prepared_leniently(destination_claimed({}))
    assert lenient.destination_id == "dst_0123456789abcdef" and not lenient.removed
    assert decide(lenient, failed, (1.0, 2.0)) == ("retry", 1.0)


def test_an_address_is_recorded_without_credentials_or_query() -> None:
    assert redacted("https://user:pw@Example.com:8443/hook?token=s3cret#x") == "https://example.com:8443/hook"
    assert redacted("http://[::1]:8080/a?b=c") == "http://[::1]:8080/a"
    # Remembered per address: asked again, the same text.
    assert redacted("https://user:pw@Example.com:8443/hook?token=s3cret#x") == "https://example.com:8443/hook"
