"""The receiver's error rows: the negated HTTP status, and storage trouble as -50002 with 503."""

from __future__ import annotations

from receiver.endpoint import codes


def test_a_status_has_the_row_whose_code_is_its_negation() -> None:
    assert codes.receiver_kind(413) is codes.RECEIVER_TOO_LARGE
    assert codes.receiver_kind(422) is codes.RECEIVER_NOT_ENVELOPE
    assert (codes.receiver_kind(418).code, codes.receiver_kind(418).status) == (-418, 418)
    assert (codes.RECEIVER_UNAVAILABLE.code, codes.RECEIVER_UNAVAILABLE.status) == (-50002, 503)
