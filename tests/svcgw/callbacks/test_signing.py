from __future__ import annotations

import pytest

from svcgw.callbacks.signing import USER_AGENT, sign, signed_headers, verify

# Vectors computed with `openssl dgst -sha256 -hmac <secret>` over "<timestamp>.<body>".
VECTORS = [
    ("whsec_test", 1700000000, b'{"appid":"we_abc","events":[]}',
     "47e526ab5540a3c6f323435fa715c572aa58e63bf8f65e2da8186a36172db3e1"),
    ("ключ", 1, b"", "93331b89525570b595d81c04fc45d03585611fa62dd2deced1840a983fd5f4a5"),
]  # fmt: skip


@pytest.mark.parametrize(("secret", "timestamp", "body", "expected"), VECTORS)
def test_sign_matches_fixed_vectors(secret: str, timestamp: int, body: bytes, expected: str) -> None:
    assert sign(secret, timestamp, body) == expected
    assert sign(secret, str(timestamp), body) == expected


def test_verify_accepts_the_signature_and_uppercase_hex() -> None:
    secret, timestamp, body, expected = VECTORS[0]
    assert verify(secret, timestamp, body, expected)
    assert verify(secret, timestamp, body, expected.upper())


@pytest.mark.parametrize(
    "change",
    [
        lambda s, t, b: (s + "x", t, b),
        lambda s, t, b: (s, t + 1, b),
        lambda s, t, b: (s, t, b + b" "),
    ],
)
def test_verify_rejects_any_change(change) -> None:  # type: ignore[no-untyped-def]
    secret, timestamp, body, expected = VECTORS[0]
    changed_secret, changed_timestamp, changed_body = change(secret, timestamp, body)
    assert not verify(changed_secret, changed_timestamp, changed_body, expected)


def test_secret_is_used_as_utf8_bytes_not_decoded() -> None:
    # A secret that looks like hex or base64 is still used as its literal bytes.
    assert sign("deadbeef", 1, b"x") != sign(bytes.fromhex("deadbeef").decode("latin-1"), 1, b"x")


def test_signed_headers_of_a_delivery() -> None:
    body = b'{"events":[]}'
    headers = signed_headers("whsec_k", body, 1700000000, event_type="Msg", token="tok", delivery_id="dlv_1", attempt=2)
    assert headers == {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Svc-Timestamp": "1700000000",
        "X-Svc-Signature": sign("whsec_k", 1700000000, body),
        "X-Svc-Delivery-Id": "dlv_1",
        "X-Svc-Attempt": "2",
        "X-Svc-Event-Type": "Msg",
        "Authorization": "Bearer tok",
    }


def test_signed_headers_leave_out_what_is_not_given() -> None:
    headers = signed_headers("whsec_k", b"", 1, event_type="SvcCallbackTest", token="")
    assert set(headers) == {"Content-Type", "User-Agent", "X-Svc-Timestamp", "X-Svc-Signature", "X-Svc-Event-Type"}
    assert verify("whsec_k", headers["X-Svc-Timestamp"], b"", headers["X-Svc-Signature"])


def test_a_further_destinations_delivery_names_it_and_the_primarys_does_not() -> None:
    body = b'{"events":[]}'
    further = signed_headers("whsec_d", body, 5, event_type="Msg", delivery_id="dlv_2", attempt=1,
                             destination="dst_0123456789abcdef")  # fmt: skip
    primary = signed_headers("whsec_d", body, 5, event_type="Msg", delivery_id="dlv_2", attempt=1)
    assert further == {**primary, "X-Svc-Destination": "dst_0123456789abcdef"}
    assert "X-Svc-Destination" not in signed_headers("whsec_d", body, 5, event_type="Msg", destination="")
