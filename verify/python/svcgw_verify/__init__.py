"""Verify the signature of an svcgw callback: standard library only.

svcgw signs every callback POST with ``X-Svc-Signature``: lowercase hex
HMAC-SHA256, keyed with the UTF-8 signing secret, over the ``X-Svc-Timestamp``
value, one ``.``, and the raw body bytes exactly as received. Verify those
bytes before parsing them.

    from svcgw_verify import SignatureError, verify

    try:
        verify(raw_body, request_headers, secrets=["whsec_new", "whsec_old"], tolerance=300)
    except SignatureError as exc:
        return 401, exc.reason

``secrets`` takes several, so a rotation needs no downtime: accept the new
and the old secret until the old one is retired. ``tolerance`` is the age
(either way) a timestamp may have, in seconds; retries come up to hours
after the first attempt with a fresh timestamp each, so a few minutes is
usual. ``None`` turns the check off.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping

__all__ = [
    "BAD_TIMESTAMP",
    "NO_MATCH",
    "NO_SECRET",
    "NO_SIGNATURE",
    "NO_TIMESTAMP",
    "TOO_OLD",
    "SignatureError",
    "check",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "X-Svc-Signature"
TIMESTAMP_HEADER = "X-Svc-Timestamp"

# The reasons a check fails, stable strings a caller can log or branch on.
NO_SIGNATURE = "missing_signature"
NO_TIMESTAMP = "missing_timestamp"
BAD_TIMESTAMP = "malformed_timestamp"
TOO_OLD = "timestamp_outside_tolerance"
NO_SECRET = "no_secret"  # noqa: S105 (a reason, not a secret)
NO_MATCH = "signature_mismatch"

_MESSAGES = {
    NO_SIGNATURE: "the X-Svc-Signature header is missing",
    NO_TIMESTAMP: "the X-Svc-Timestamp header is missing",
    BAD_TIMESTAMP: "X-Svc-Timestamp is not a whole number of Unix seconds",
    TOO_OLD: "X-Svc-Timestamp is further from now than the tolerance allows",
    NO_SECRET: "no signing secret was given",
    NO_MATCH: "the signature matches none of the secrets",
}


class SignatureError(ValueError):
    """The callback is not signed by any of the secrets; ``reason`` says why (one of the constants)."""

    def __init__(self, reason: str) -> None:
        super().__init__(_MESSAGES.get(reason, reason))
        self.reason = reason


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The signature svcgw sends for ``body`` at ``timestamp`` (lowercase hex)."""
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if headers is None:
        return None
    value = headers.get(name)
    if value is None:
        wanted = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == wanted), None)
    return value


def check(
    body: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    secrets: str | Iterable[str],
    tolerance: float | None = 300,
    signature: str | None = None,
    timestamp: str | int | None = None,
    now: float | None = None,
) -> str | None:
    """``None`` when ``body`` is signed by one of ``secrets``, else the reason it is not.

    The signature and timestamp come from ``headers`` (any mapping, names in
    any case) unless given as ``signature`` and ``timestamp``. Every secret
    is tried, each compared in constant time.
    """
    given = _header(headers, SIGNATURE_HEADER) if signature is None else signature
    stamp = _header(headers, TIMESTAMP_HEADER) if timestamp is None else str(timestamp)
    if not given:
        return NO_SIGNATURE
    if stamp is None or not stamp.strip():
        return NO_TIMESTAMP
    stamp = stamp.strip()
    if not stamp.isascii() or not stamp.isdigit():
        return BAD_TIMESTAMP
    if tolerance is not None and abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        return TOO_OLD
    keys = [secrets] if isinstance(secrets, str) else [s for s in secrets if s]
    if not keys:
        return NO_SECRET
    presented = given.strip().lower().encode("ascii", "replace")
    matched = False
    for secret in keys:
        # Every secret is compared, so the time taken does not tell which one matched.
        matched |= hmac.compare_digest(sign(secret, stamp, body).encode("ascii"), presented)
    return None if matched else NO_MATCH


def verify(
    body: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    secrets: str | Iterable[str],
    tolerance: float | None = 300,
    signature: str | None = None,
    timestamp: str | int | None = None,
    now: float | None = None,
) -> None:
    """Return when ``body`` is signed by one of ``secrets``; raise :class:`SignatureError` otherwise."""
    reason = check(
        body, headers, secrets=secrets, tolerance=tolerance, signature=signature, timestamp=timestamp, now=now
    )
    if reason is not None:
        raise SignatureError(reason)
