"""The receiver's error codes, where the capability layer posts events.

Each code is the negated HTTP status (``-400``, ``-404``, ``-413``, ``-422``,
``-429``), except a storage failure, ``-50002`` with 503, so that the sender
posts again. :func:`receiver_kind` maps a status to its row;
``receiver.endpoint.receive`` says which error gets which row, and
``receiver.http.refusal_response`` renders it as ``{code, message, data: null}``.
"""

from __future__ import annotations

from svcgw.errors import ErrorKind

__all__ = [
    "RECEIVER_BAD_BODY",
    "RECEIVER_KINDS",
    "RECEIVER_LIMITED",
    "RECEIVER_NOT_ENVELOPE",
    "RECEIVER_NOT_FOUND",
    "RECEIVER_TOO_LARGE",
    "RECEIVER_UNAVAILABLE",
    "receiver_kind",
]

# The receiver's answers; most carry a message of their own (the reason a post is refused).
RECEIVER_BAD_BODY = ErrorKind(-400, 400, "the body is not a JSON object")
RECEIVER_NOT_FOUND = ErrorKind(-404, 404, "no such receiver")
RECEIVER_TOO_LARGE = ErrorKind(-413, 413, "the body is too large")
RECEIVER_NOT_ENVELOPE = ErrorKind(-422, 422, "the body is not an envelope")
RECEIVER_UNAVAILABLE = ErrorKind(-50002, 503, "storage temporarily unavailable, retry later")
RECEIVER_LIMITED = ErrorKind(
    -429, 429, "too many posts to receivers that do not exist from this address; retry after the time in Retry-After"
)

RECEIVER_KINDS: tuple[ErrorKind, ...] = (
    RECEIVER_BAD_BODY,
    RECEIVER_NOT_FOUND,
    RECEIVER_TOO_LARGE,
    RECEIVER_NOT_ENVELOPE,
    RECEIVER_UNAVAILABLE,
    RECEIVER_LIMITED,
)

_RECEIVER_BY_STATUS = {kind.status: kind for kind in RECEIVER_KINDS if kind.code == -kind.status}


def receiver_kind(status: int) -> ErrorKind:
    """The receiver's row for a refused post with this HTTP status (code ``-status``)."""
    return _RECEIVER_BY_STATUS.get(status) or ErrorKind(-status, status, "bad request")
