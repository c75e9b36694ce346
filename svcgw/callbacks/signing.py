"""Callback signatures and the signed header set every callback carries.

The signature is lowercase hex HMAC-SHA256 over ``timestamp + "." + body``.
The key is the UTF-8 bytes of the signing secret as shown to the customer
(no base64 or hex decoding); the message is the ASCII timestamp, one ``.``,
and the raw body bytes exactly as sent.

:func:`signed_headers` builds the headers of a callback POST, for a
delivery attempt (``worker.sending``) and for the console's test POST
(``svcgw.callbacks.testpost``) alike.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

__all__ = ["USER_AGENT", "sign", "signed_headers", "verify"]

USER_AGENT = "svcgw-callback/0.1"


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    signer = _keyed(secret).copy()
    signer.update(str(timestamp).encode("ascii") + b"." + body)
    return signer.hexdigest()


# A worker signs every attempt with one of a few secrets: each one's key schedule is made once and copied.
@functools.lru_cache(maxsize=1024)
def _keyed(secret: str) -> hmac.HMAC:
    return hmac.new(secret.encode("utf-8"), digestmod=hashlib.sha256)


def verify(secret: str, timestamp: int | str, body: bytes, signature: str) -> bool:
    """Constant-time check of ``signature``; the age of the timestamp is the caller's policy."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature.strip().lower())


def signed_headers(
    secret: str,
    body: bytes,
    timestamp: int,
    *,
    event_type: str,
    token: str | None = None,
    delivery_id: str | None = None,
    attempt: int | None = None,
    destination: str | None = None,
) -> dict[str, str]:
    """The headers of one callback POST of ``body``, signed with ``secret`` at ``timestamp``.

    ``X-Svc-Delivery-Id`` and ``X-Svc-Attempt`` only when given (a test POST
    has neither); ``X-Svc-Destination`` only for a delivery to a further
    destination (its ``dst_…`` id; the primary address's deliveries have none);
    ``Authorization: Bearer`` only for a non-empty ``token``.
    """
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Svc-Timestamp": str(timestamp),
        "X-Svc-Signature": sign(secret, timestamp, body),
    }
    if delivery_id is not None:
        headers["X-Svc-Delivery-Id"] = delivery_id
    if attempt is not None:
        headers["X-Svc-Attempt"] = str(attempt)
    headers["X-Svc-Event-Type"] = event_type
    if destination:
        headers["X-Svc-Destination"] = destination
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
