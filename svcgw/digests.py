"""Digests of high-entropy secrets, the names they are looked up by.

API keys, receiver tokens, invitation tokens and console session ids are kept only as their
SHA-256 digests: a secret of 128 bits or more needs no slow hash, and one round of SHA-256 is
cheap enough for every gateway call and receiver post.
"""

from __future__ import annotations

import hashlib

__all__ = ["digest"]


def digest(secret: str) -> str:
    """The lowercase hex SHA-256 of ``secret``'s UTF-8 bytes."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
