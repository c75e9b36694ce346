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


def test_an_empty_secret_is_never_a_key() -> None:
    # What a customer gets from ``os.environ.get("SECRET", "")`` with the variable unset: a forger
    # signs with the empty key, and that must not pass.
    forged = signed("")
    for nothing in ("", b"", None, [], ["", b"", None], " \n", b"\t\r\n"):
        assert check(BODY, forged, secrets=nothing, now=NOW) == NO_SECRET, nothing
    with pytest.raises(SignatureError) as info:
        verify(BODY, forged, secrets="", now=NOW)
    assert info.value.reason == NO_SECRET
    # Beside a real secret, an empty one is skipped, not tried.
    assert check(BODY, forged, secrets=["", "whsec_a"], now=NOW) == NO_MATCH
    assert check(BODY, signed("whsec_a"), secrets=["", "whsec_a"], now=NOW) is None


def test_a_bytes_secret_is_the_key_itself() -> None:
    headers = signed("whsec_a")
    assert check(BODY, headers, secrets=b"whsec_a", now=NOW) is None
    assert check(BODY, headers, secrets=bytearray(b"whsec_a"), now=NOW) is None
    assert check(BODY, headers, secrets=[b"old", "whsec_a"], now=NOW) is None
    assert check(BODY, headers, secrets=[b"other"], now=NOW) == NO_MATCH
    assert sign(b"whsec_a", NOW, BODY) == headers["X-Svc-Signature"]


def test_a_secret_of_another_type_is_refused_with_a_clear_message() -> None:
    for wrong in (123, [123], ["s", 4.5], {"s": 1}):
        with pytest.raises(TypeError, match="secret"):
            check(BODY, signed("s"), secrets=wrong, now=NOW)


def test_a_timestamp_longer_than_any_real_one_is_malformed() -> None:
    # 13 digits and more: not Unix seconds (12 digits last until the year 33658).
    for stamp in ("1" * 13, "0" * 13, "9" * 5000, "9" * 5_000_000):
        headers = {**signed("s"), "X-Svc-Timestamp": stamp}
        for tolerance in (300, None):
            assert check(BODY, headers, secrets="s", now=NOW, tolerance=tolerance) == BAD_TIMESTAMP
        with pytest.raises(SignatureError) as info:
            verify(BODY, headers, secrets="s", now=NOW)
        assert info.value.reason == BAD_TIMESTAMP
    assert check(BODY, signed("s"), secrets="s", timestamp=10**5000, now=NOW) == BAD_TIMESTAMP
    assert check(BODY, signed("s"), secrets="s", timestamp=-NOW, now=NOW) == BAD_TIMESTAMP
    # Twelve digits are still a timestamp: its signature is checked as any other.
    far = 999_999_999_999
    assert check(BODY, signed("s", far), secrets="s", now=NOW, tolerance=None) is None
    assert check(BODY, signed("s", far), secrets="s", now=NOW) == TOO_OLD


def test_a_tolerance_that_is_not_a_finite_number_is_refused() -> None:
    headers = signed("s", NOW - 10**6)
    for wrong in (float("nan"), float("inf"), float("-inf"), -1):
        with pytest.raises(ValueError, match="tolerance") as info:
            check(BODY, headers, secrets="s", now=NOW, tolerance=wrong)
        assert not isinstance(info.value, SignatureError)
    for wrong_type in ("300", True, [300]):
        with pytest.raises(TypeError, match="tolerance"):
            verify(BODY, headers, secrets="s", now=NOW, tolerance=wrong_type)
    with pytest.raises(ValueError, match="now"):
        check(BODY, headers, secrets="s", now=float("nan"))
    assert check(BODY, signed("s"), secrets="s", now=NOW, tolerance=0) is None
    assert check(BODY, signed("s"), secrets="s", now=NOW, tolerance=0.5) is None
