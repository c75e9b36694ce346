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
and the old secret until the old one is retired. A secret is text (its UTF-8
bytes are the key) or bytes (the key itself). An empty secret, or one of
only spaces and line breaks, is never a key: ``secrets=os.environ.get("SECRET", "")``
with the variable unset fails every check with ``no_secret`` instead of
accepting what anyone signs with the empty key. ``tolerance`` is the age
(either way) a timestamp may have, in seconds: a finite number, 0 or more;
retries come up to hours after the first attempt with a fresh timestamp
each, so a few minutes is usual. ``None`` turns the check off.

What a request can get wrong is a reason (``check``) or a
:class:`SignatureError` (``verify``), never another exception: a timestamp
of more than :data:`MAX_TIMESTAMP_DIGITS` digits, however long, is
``malformed_timestamp``. What the caller gets wrong raises at once, on
every call: ``TypeError`` for a secret that is neither text nor bytes, or a
tolerance that is not a number; ``ValueError`` for a tolerance (or ``now``)
that is not finite, or a negative tolerance.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Iterable, Mapping
from typing import Union

__all__ = [
    "BAD_TIMESTAMP",
    "MAX_TIMESTAMP_DIGITS",
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

# An alias is evaluated on import, and ``str | bytes`` needs Python 3.10: this package supports 3.9.
Secret = Union[str, bytes, bytearray]  # noqa: UP007

SIGNATURE_HEADER = "X-Svc-Signature"
TIMESTAMP_HEADER = "X-Svc-Timestamp"
# Unix seconds have 10 digits until 2286 and 12 until the year 33658: a longer value is no timestamp
# (and Python refuses to read an integer of more than 4,300 digits at all).
MAX_TIMESTAMP_DIGITS = 12
# A secret of only these is no secret: a file or variable that holds nothing but a line break.
_BLANK = b" \t\n\r\x0b\x0c"

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


def sign(secret: Secret, timestamp: int | str, body: bytes) -> str:
    """The signature svcgw sends for ``body`` at ``timestamp`` (lowercase hex); ``secret`` text or bytes."""
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def _key(secret: object) -> bytes:
    if isinstance(secret, str):
        return secret.encode("utf-8")
    if isinstance(secret, (bytes, bytearray)):
        return bytes(secret)
    raise TypeError(f"a signing secret is text or bytes, not {type(secret).__name__}")


def _keys(secrets: Secret | Iterable[Secret | None] | None) -> list[bytes]:
    """The keys to try: every secret given, but the empty (or blank) ones, which are never keys."""
    if secrets is None:
        return []
    if isinstance(secrets, (str, bytes, bytearray)):
        given: list[object] = [secrets]
    elif isinstance(secrets, Iterable) and not isinstance(secrets, Mapping):
        given = list(secrets)
    else:
        raise TypeError(f"secrets is a signing secret or a list of them, not {type(secrets).__name__}")
    keys = [_key(secret) for secret in given if secret is not None]
    return [key for key in keys if key.strip(_BLANK)]


def _seconds(name: str, value: object) -> float:
    """``value`` as a finite number of seconds; ``TypeError`` or ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} is a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
    return value


def _timestamp(stamp: str | int | None) -> str | None:
    """The timestamp as its digits; '' when missing, None when malformed."""
    if stamp is None:
        return ""
    if isinstance(stamp, int) and not isinstance(stamp, bool):
        # Compared, never turned into text: an integer of 4,301 digits cannot be.
        return str(stamp) if 0 <= stamp < 10**MAX_TIMESTAMP_DIGITS else None
    text = str(stamp).strip()
    if not text:
        return ""
    if len(text) > MAX_TIMESTAMP_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return text


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
    secrets: Secret | Iterable[Secret | None] | None,
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
    # The caller's own arguments first: a mistake there is refused on every call, whatever arrives.
    keys = _keys(secrets)
    if tolerance is not None:
        tolerance = _seconds("tolerance", tolerance)
        if tolerance < 0:
            raise ValueError(f"tolerance must be 0 or more seconds (None: not checked), not {tolerance!r}")
    current = time.time() if now is None else _seconds("now", now)
    given = _header(headers, SIGNATURE_HEADER) if signature is None else signature
    stamp = _timestamp(_header(headers, TIMESTAMP_HEADER) if timestamp is None else timestamp)
    if not given:
        return NO_SIGNATURE
    if stamp == "":
        return NO_TIMESTAMP
    if stamp is None:
        return BAD_TIMESTAMP
    if tolerance is not None and abs(current - int(stamp)) > tolerance:
        return TOO_OLD
    if not keys:
        return NO_SECRET
    presented = given.strip().lower().encode("ascii", "replace")
    message = stamp.encode("ascii") + b"." + body
    matched = False
    for key in keys:
        # Every secret is compared, so the time taken does not tell which one matched.
        expected = hmac.new(key, message, hashlib.sha256).hexdigest().encode("ascii")
        matched |= hmac.compare_digest(expected, presented)
    return None if matched else NO_MATCH


def verify(
    body: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    secrets: Secret | Iterable[Secret | None] | None,
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
