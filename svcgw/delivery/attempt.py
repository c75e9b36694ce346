"""One delivery attempt: prepared from what the claim read, recorded, and decided.

* ``prepare`` turns the delivery and its destination, as read *now*, into a
  :class:`Prepared` attempt, so a changed address, a rotated secret or a new
  token applies to every retry. A delivery to a further destination
  (docs/destinations.md) goes to that destination's address, signed with its
  own secret, with its own token and the header ``X-Svc-Recipient``; one
  whose destination was removed fails at once, without a request, and is a
  dead letter at its first failure (a replay of it fails the same way). The signing secret and the Bearer token are
  opened with the vault here; one that cannot be opened fails the attempt
  when it is sent, with a message saying so, and nothing is sent. The engine reads both in its claim script
  (:meth:`svcgw.delivery.queue.DeliveryQueue.claim_batch`) and calls
  :func:`prepare_claimed`;
* the worker sends it (:func:`worker.sending.send`), which makes an :class:`Attempt` of
  whatever happened, never raising;
* ``decide`` maps an attempt to the queue's next step with the retry policy.
  It is pure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import orjson

from svcgw import deliveryid
from svcgw.callbacks.recipients import Recipient, choose_recipient, open_secret
from svcgw.delivery.retry import next_delay
from svcgw.vault import TokenVault, VaultError

from .queue import Claimed

__all__ = [
    "ANSWER_BODY_BYTES",
    "Attempt",
    "Openings",
    "Prepared",
    "decide",
    "prepare_claimed",
    "prepared_leniently",
    "removed_error",
    "unexpected",
]


# Not frozen, as the engine's other records of a delivery (svcgw.delivery.queue.Finish,
# svcgw.delivery.claim.Claimed): a frozen dataclass sets each field through object.__setattr__, several
# times the cost, and the engine makes a few per delivery. None is changed once made.
@dataclass(slots=True)
class Prepared:
    delivery_id: str
    appid: str
    account: str
    event_type: str
    body: bytes
    failures: int
    attempts: int
    received_at: float
    replay: bool
    destination: Recipient | None  # its secret in clear
    token: str | None = field(default=None, repr=False)
    secret_unreadable: bool = False  # the stored signing secret cannot be opened with the configured keys
    destination_id: str = ""  # the further destination (``dst_…``) it goes to; '' for the primary address
    removed: bool = False  # its further destination was removed: it has nowhere to go, now or later
    duplicates: bool = False  # its post had duplicates (the hash's ``dup``): its bare outcome keeps its event ids

    @property
    def kind(self) -> str:
        """``primary`` or ``destination`` (a further one), as ``/metrics`` labels it (svcgw.counters)."""
        return "destination" if self.destination_id else "primary"


# The first bytes of an answer's body kept in an attempt record (svcgw.delivery.listing shows them).
ANSWER_BODY_BYTES = 1024


def first_kilobyte(text: str) -> str:
    """At most :data:`ANSWER_BODY_BYTES` of ``text`` as UTF-8, never ending in half a character."""
    raw = text.encode("utf-8")
    if len(raw) <= ANSWER_BODY_BYTES:
        return text
    return raw[:ANSWER_BODY_BYTES].decode("utf-8", "ignore")


@dataclass(slots=True)
class Attempt:
    ok: bool
    at: float
    duration: float
    status: int | None = None
    error: str | None = None
    response: str = ""
    destination: str | None = None
    timed_out: bool = False  # no answer within the delivery timeout (svcgw.delivery.breaker)
    dst: str | None = None  # the further destination's id; None for the primary address

    def record(self, number: int) -> bytes:
        record: dict[str, object] = {
            "attempt": number,
            "at": round(self.at, 3),
            "ok": self.ok,
            "status": self.status,
            "error": self.error,
            "duration_ms": round(self.duration * 1000, 1),
            "destination": self.destination,
            "response": first_kilobyte(self.response),
        }
        if self.dst:
            record["dst"] = self.dst  # only a further destination's: the primary's records are as they were
        return orjson.dumps(record)


def _text(value: bytes | None) -> str:
    return value.decode("utf-8") if value else ""


def prepare_claimed(claimed: Claimed, vault: TokenVault | Openings) -> Prepared | None:
    """The attempt for a job claimed with its data; None if the delivery no longer exists."""
    openings = vault if isinstance(vault, Openings) else Openings(vault)
    return _prepared(
        claimed.delivery_id, claimed.fields, claimed.own, claimed.default, openings, claimed.destination_id
    )


# A callback configuration opened: its destination with the secret in clear ('' when it cannot be opened, then
# ``secret_unreadable``), its token in clear ('' when it cannot be opened).
Opened = tuple[Recipient | None, str | None, bool]


class Openings:
    """The callback configurations opened lately with ``vault``, by what is stored (address, sealed secret and token).

    Every job of an instance comes with the same configuration: choosing its destination and opening
    its secret and token is done once a while, not for every attempt. An entry lasts ``seconds``
    (a replaced secret is read anew with the next claim anyway: it is another key here); one that
    could not be opened is not kept, as :class:`svcgw.vault.RememberingVault` keeps no failure.
    """

    def __init__(self, vault: TokenVault, *, seconds: float = 60.0, limit: int = 4096) -> None:
        self.vault = vault
        self._seconds = seconds
        self._limit = limit
        self._kept: dict[tuple[str | None, ...], tuple[Opened, float]] = {}
        # The same, by the mappings themselves: a claim hands every job of an instance the same (read-only)
        # dicts (svcgw.delivery.claim), so most attempts find theirs without reading a field. Each entry holds
        # its mappings, so that their ids are not another's while it is kept.
        self._by_identity: dict[tuple[int, int], tuple[Mapping[str, str], Mapping[str, str], Opened, float]] = {}

    def of(self, own: Mapping[str, str], default: Mapping[str, str]) -> Opened:
        now = time.monotonic()
        same = self._by_identity.get((id(own), id(default)))
        if same is not None and same[0] is own and same[1] is default and same[3] > now:
            return same[2]
        key = (own.get("url"), own.get("secret"), own.get("token"),
               default.get("url"), default.get("secret"), default.get("token"))  # fmt: skip
        kept = self._kept.get(key)
        if kept is not None and kept[1] > now:
            opened, until = kept
        else:
            opened, until = _opened(choose_recipient(own, default), self.vault), now + self._seconds
            if opened[1] == "" or opened[2]:
                return opened
            if len(self._kept) >= self._limit:
                self._kept.clear()  # rare: a worker past this many configurations opens each once more
            self._kept[key] = (opened, until)
        if len(self._by_identity) >= self._limit:
            self._by_identity.clear()
        self._by_identity[id(own), id(default)] = (own, default, opened, until)
        return opened


def _opened(destination: Recipient | None, vault: TokenVault) -> Opened:
    if destination is None:
        return None, None, False
    token = None
    if destination.sealed_token:
        try:
            token = vault.open(destination.sealed_token)
        except VaultError:
            # Sending without the configured token would be refused anyway;
            # fail the attempt loudly instead (see send()).
            token = ""
    try:
        secret, secret_unreadable = open_secret(vault, destination.secret), False
    except VaultError:
        # A signature the receiver cannot check is worse than none: fail instead (see send()).
        secret, secret_unreadable = "", True
    return Recipient(destination.url, secret, destination.sealed_token, destination.source), token, secret_unreadable


# The account's configuration a further destination's delivery goes without; one, so that Openings knows it.
_NONE: Mapping[str, str] = MappingProxyType({})


def _prepared(
    delivery_id: str,
    data: Mapping[str, bytes | None],
    own: Mapping[str, str],
    default: Mapping[str, str],
    openings: Openings,
    destination_id: str = "",
) -> Prepared | None:
    # A delivered delivery keeps its event ids, not its body (svcgw.delivery.queue.Finish.event_ids):
    # a copy of it claimed again (a lease ran out meanwhile) has nothing left to send.
    if not data["appid"] or not data["body"]:
        return None
    # A further destination's hash has a callback hash's field names; it never inherits the account's.
    destination, token, secret_unreadable = openings.of(own, _NONE if destination_id else default)
    return Prepared(
        delivery_id=delivery_id,
        appid=_text(data["appid"]),
        account=_text(data["account"]),
        event_type=_text(data["event_type"]),
        body=data["body"] or b"",
        failures=int(data["failures"] or 0),
        attempts=int(data["attempts"] or 0),
        # A delivery named by its post has its time in its id (svcgw.deliveryid), no field.
        received_at=float(data["received_at"] or 0) or deliveryid.received_at(delivery_id) or 0.0,
        # A dead letter taken up again (``svcgw dlq replay`` or ``rq requeue``)
        # gets one fresh attempt.
        replay=_text(data["state"]) == "dead",
        destination=destination,
        token=token,
        secret_unreadable=secret_unreadable,
        destination_id=destination_id,
        removed=bool(destination_id) and destination is None,
        duplicates=(data.get("dup") or b"0") != b"0",
    )


def _field(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value else ""


def _number(value: bytes | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def prepared_leniently(job: Claimed) -> Prepared:
    """What is known of a claimed job whose attempt could not even be prepared, read leniently."""
    return Prepared(
        delivery_id=job.delivery_id,
        appid=_field(job.fields.get("appid")),
        account=_field(job.fields.get("account")),
        event_type=_field(job.fields.get("event_type")),
        body=b"",
        failures=_number(job.fields.get("failures")),
        attempts=_number(job.fields.get("attempts")),
        received_at=0.0,
        replay=_field(job.fields.get("state")) == "dead",
        destination=None,
        destination_id=job.destination_id,
    )


def removed_error(destination_id: str) -> str:
    """The error of an attempt whose further destination was removed."""
    return f"the destination {destination_id} was removed"


def unexpected(exc: BaseException) -> str:
    """An unexpected exception as an attempt's error text: its type and the first line of its message."""
    lines = str(exc).splitlines()
    detail = lines[0][:300] if lines else ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


Step = Literal["delivered", "retry", "dead"]


def decide(prepared: Prepared, attempt: Attempt, schedule: tuple[float, ...]) -> tuple[Step, float | None]:
    """The next step and, for a retry, its delay in seconds."""
    if attempt.ok:
        return "delivered", None
    if prepared.replay or prepared.removed:
        # A removed destination will not come back: retrying it would only wait to fail again.
        return "dead", None
    delay = next_delay(schedule, prepared.failures + 1)
    if delay is None:
        return "dead", None
    return "retry", delay
