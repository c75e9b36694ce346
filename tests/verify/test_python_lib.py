"""verify/python (svcgw_verify): the checks, each failure's reason, rotation and tolerance."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from svcgw_verify import (
    BAD_TIMESTAMP,
    NO_MATCH,
    NO_SECRET,
    NO_SIGNATURE,
    NO_TIMESTAMP,
    TOO_OLD,
    SignatureError,
    check,
    sign,
    verify,
)

BODY = b'{"appid":"we_1","event_type":"Msg","events":[{"id":7000000000000000001}]}'
NOW = 1_800_000_000


def signed(secret: str, timestamp: int = NOW, body: bytes = BODY) -> dict[str, str]:
    # From the definition, not from the library under test.
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Svc-Signature": mac, "X-Svc-Timestamp": str(timestamp)}


def test_a_valid_signature_passes_whatever_the_header_case() -> None:
    headers = signed("whsec_a")
    assert check(BODY, headers, secrets="whsec_a", now=NOW) is None
    lower = {k.lower(): v.upper() if k.endswith("Signature") else v for k, v in headers.items()}
    verify(BODY, lower, secrets=["whsec_a"], now=NOW)
    assert sign("whsec_a", NOW, BODY) == headers["X-Svc-Signature"]


def test_any_secret_of_the_list_verifies_for_rotation() -> None:
    assert check(BODY, signed("old"), secrets=["new", "old"], now=NOW) is None
    assert check(BODY, signed("other"), secrets=["new", "old"], now=NOW) == NO_MATCH


def test_a_changed_body_or_timestamp_fails() -> None:
    headers = signed("s")
    assert check(BODY + b" ", headers, secrets="s", now=NOW) == NO_MATCH
    assert check(BODY, {**headers, "X-Svc-Timestamp": str(NOW + 1)}, secrets="s", now=NOW) == NO_MATCH


def test_the_tolerance_is_the_callers() -> None:
    old = signed("s", NOW - 600)
    assert check(BODY, old, secrets="s", now=NOW) == TOO_OLD
    assert check(BODY, old, secrets="s", now=NOW, tolerance=900) is None
    assert check(BODY, old, secrets="s", now=NOW, tolerance=None) is None
    assert check(BODY, signed("s", NOW + 600), secrets="s", now=NOW) == TOO_OLD


def test_missing_or_malformed_parts_have_their_own_reason() -> None:
    headers = signed("s")
    assert check(BODY, {"X-Svc-Timestamp": str(NOW)}, secrets="s", now=NOW) == NO_SIGNATURE
    assert check(BODY, {"X-Svc-Signature": "ab"}, secrets="s", now=NOW) == NO_TIMESTAMP
    assert check(BODY, {**headers, "X-Svc-Timestamp": "1e9"}, secrets="s", now=NOW) == BAD_TIMESTAMP
    assert check(BODY, {**headers, "X-Svc-Timestamp": "١٢٣"}, secrets="s", now=NOW) == BAD_TIMESTAMP
    assert check(BODY, headers, secrets=[], now=NOW) == NO_SECRET
    assert check(BODY, {**headers, "X-Svc-Signature": "é"}, secrets="s", now=NOW) == NO_MATCH


def test_verify_raises_with_the_reason_and_explicit_values_work() -> None:
    with pytest.raises(SignatureError, match="none of the secrets") as info:
        verify(BODY, signed("x"), secrets="s", now=NOW)
    assert info.value.reason == NO_MATCH
    headers = signed("s")
    verify(BODY, secrets="s", now=NOW, signature=headers["X-Svc-Signature"], timestamp=NOW)


def test_the_headers_of_http_server_are_read_as_they_are() -> None:
    from http.client import HTTPMessage

    message = HTTPMessage()
    for name, value in signed("s").items():
        message[name.lower()] = value
    verify(BODY, message, secrets="s", now=NOW)
