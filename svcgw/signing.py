"""Callback signatures: lowercase hex HMAC-SHA256 over ``timestamp + "." + body``.

The key is the UTF-8 bytes of the signing secret as shown to the customer
(no base64 or hex decoding); the message is the ASCII timestamp, one ``.``,
and the raw body bytes exactly as sent.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["sign", "verify"]


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def verify(secret: str, timestamp: int | str, body: bytes, signature: str) -> bool:
    """Constant-time check of ``signature``; the age of the timestamp is the caller's policy."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature.strip().lower())
