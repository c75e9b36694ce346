"""The console JSON API's request and answer types.

The request types parse the API's bodies (``receiver.console.requests``)
and, with the answer types, make its part of ``/openapi.json``
(``receiver.console.routes``). A field an answer may leave out is typed
``... | UnsetType``: optional in the document.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from svcgw.callbacks.destinationrules import MAX_LABEL_LENGTH as MAX_DESTINATION_LABEL
from svcgw.registry.store import MAX_LABEL_LENGTH

MAX_LOGIN_FIELD = 512  # longer is no login (254 at most): cut before it is counted
MAX_KEY_FIELD = 512  # longer is no API key this service issued
MAX_FIELD = 2048  # a field of a QR login's steps (address, proxy, code)

Login = Annotated[str, Meta(max_length=MAX_LOGIN_FIELD)]
ApiKeyText = Annotated[str, Meta(max_length=MAX_KEY_FIELD)]
Password = Annotated[str, Meta(max_length=1024)]
InvitationToken = Annotated[str, Meta(max_length=256)]
StepField = Annotated[str, Meta(max_length=MAX_FIELD)]
Url = Annotated[str, Meta(max_length=4096, description="empty removes the address and its token")]
BearerToken = Annotated[str, Meta(max_length=1024, description="blank keeps the stored token (same origin)")]
Label = Annotated[str, Meta(max_length=MAX_LABEL_LENGTH)]
StartAddress = Annotated[StepField, Meta(description="long/start's address; empty: the account default")]
Strings = list[str]
DeliveryState = Literal["pending", "retrying", "delivered", "dead"]
NextAttempt = Annotated[
    float | None, Meta(description="when the next attempt is due; null when none is scheduled (pending: at once)")
]


# --- requests ---------------------------------------------------------------------------------
class SignInWithPassword(msgspec.Struct):
    """Sign in with a login and its password."""

    login: Login
    password: Password


class SignInWithKey(msgspec.Struct):
    """Sign in with an API key of the account."""

    api_key: ApiKeyText


class InvitationRequest(msgspec.Struct):
    """An invitation's token, and the password it sets."""

    token: InvitationToken
    password: Password


class PasswordRequest(msgspec.Struct):
    """The current password, and the new one."""

    current_password: Password
    new_password: Password


class CallbackRequest(msgspec.Struct):
    """A callback address to save, and what becomes of its Bearer token."""

    url: Url
    bearer_token: BearerToken | None = None
    bearer: Annotated[bool | None, Meta(description="false deletes the token")] = None
    keep_token: (
        Annotated[
            bool,
            Meta(description="true keeps the stored token for an address on a new origin; else it is deleted"),
        ]
        | UnsetType
    ) = UNSET


class ReplayRequest(msgspec.Struct):
    """Exactly one of ids and appid; with since, appid is optional (every instance of the account) and ids are not allowed."""  # noqa: E501

    ids: Strings | UnsetType = UNSET
    appid: Annotated[str, Meta(max_length=200)] | None = None
    since: (
        Annotated[
            str, Meta(max_length=32, description="a duration such as 30m, 2h or 1d: only dead letters that died since")
        ]
        | None
    ) = None


class OperationsRequest(msgspec.Struct):
    """Operations, as module/action."""

    operations: Strings


class NewKeyRequest(msgspec.Struct):
    """The new key's label."""

    label: Label | None = None


class LoginOptions(msgspec.Struct):
    """Where the new instance's events go, and the proxy of its login."""

    callback_url: StartAddress | None = None
    proxy: Annotated[StepField, Meta(description="for getQr, checkQr, submitQrCode; remembered")] | None = None


class CodeRequest(msgspec.Struct):
    """The six-digit code sent to the phone."""

    code: StepField | None = None


class ReloginRequest(msgspec.Struct):
    """The proxy of the login, if one is needed."""

    proxy: StepField | None = None


class StartRequest(msgspec.Struct):
    """The address long/start gives the capability layer; empty: the instance's own, or the account default."""

    callback_url: StepField | None = None


EventTypes = Annotated[
    Strings,
    Meta(description="event types it takes, such as Msg or InstanceOffline (case-sensitive); empty: every type"),
]
Rate = Annotated[
    float | None, Meta(description="deliveries per second, more than 0 and at most 1000; null: no limit")
]
DestinationLabel = Annotated[str, Meta(max_length=MAX_DESTINATION_LABEL, description="a name for people")]
DestinationUrl = Annotated[str, Meta(max_length=4096, description="public http(s) address that accepts POST")]
DestinationToken = Annotated[str, Meta(max_length=1024, description="sent as Authorization: Bearer; stored encrypted")]


class DestinationRequest(msgspec.Struct, kw_only=True):
    """A new further destination. Saving it sends it one SvcCallbackTest POST."""

    url: DestinationUrl
    label: DestinationLabel | None = None
    event_types: EventTypes | None = None
    rate: Rate = None
    enabled: bool = True
    bearer_token: DestinationToken | None = None


class DestinationUpdate(msgspec.Struct, kw_only=True):
    """What to change of a further destination; a field left out keeps its value."""

    url: DestinationUrl | UnsetType = UNSET
    label: DestinationLabel | UnsetType = UNSET
    event_types: EventTypes | UnsetType = UNSET
    rate: Rate | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    bearer_token: (
        Annotated[DestinationToken, Meta(description="a new token; blank keeps the stored one (same origin)")]
        | UnsetType
        | None
    ) = UNSET
    bearer: Annotated[bool | None, Meta(description="false deletes the token")] | UnsetType = UNSET
    keep_token: (
        Annotated[bool, Meta(description="true keeps the token for a url on a new origin; else it is deleted")]
        | UnsetType
    ) = UNSET


# --- answers ------------------------------------------------------------------------------------
class SignedIn(msgspec.Struct):
    """Who is signed in, and the CSRF token (null for a call made with an API key)."""

    account: str | UnsetType = UNSET
    csrf_token: str | UnsetType | None = UNSET


class SignedOut(msgspec.Struct):
    """The session ended (every session of the account, with every_session)."""

    signed_out: Literal[True] | UnsetType = UNSET
    every_session: Literal[True] | UnsetType = UNSET


class PasswordChanged(msgspec.Struct):
    """The password is changed; every other session ended."""

    changed: Literal[True] | UnsetType = UNSET
    other_sessions_ended: bool | UnsetType = UNSET


class ConsoleCallback(msgspec.Struct):
    """A callback configuration. The Bearer token itself is never returned."""

    scope: Literal["account", "instance"] | UnsetType = UNSET
    appid: str | UnsetType | None = UNSET
    url: str | UnsetType | None = UNSET
    secret: Annotated[str | None, Meta(description="signing secret for X-Svc-Signature")] | UnsetType = UNSET
    bearer: Annotated[bool, Meta(description="whether a Bearer token is set")] | UnsetType = UNSET


class ConsoleTest(msgspec.Struct):
    """The SvcCallbackTest POST's outcome; ok means only that the address answered 2xx."""

    ok: bool | UnsetType = UNSET
    event_id: str | UnsetType = UNSET
    status: int | UnsetType | None = UNSET
    error: str | UnsetType | None = UNSET
    duration_ms: float | UnsetType = UNSET
    response: str | UnsetType = UNSET


class SavedCallback(msgspec.Struct):
    """The saved configuration, and its test (null when no test was sent)."""

    callback: ConsoleCallback | UnsetType = UNSET
    test: ConsoleTest | UnsetType | None = UNSET


class ConsoleInstance(msgspec.Struct):
    """One instance of the account."""

    appid: str | UnsetType = UNSET
    status: Annotated[str, Meta(description="online, offline, stopped, logged_out or not_started")] | UnsetType = UNSET
    reason: str | UnsetType | None = UNSET
    action_required: str | UnsetType | None = UNSET
    forward_url: str | UnsetType | None = UNSET
    forward_source: Literal["instance", "account", None] | UnsetType = UNSET
    last_event_at: Annotated[float | None, Meta(description="Unix seconds of the last post received")] | UnsetType = (
        UNSET
    )


class ConsoleLogEntry(msgspec.Struct):
    """One post of the callback log."""

    id: str | UnsetType = UNSET
    received_at: float | UnsetType = UNSET
    body: Annotated[str | None, Meta(description="exactly as received")] | UnsetType = UNSET
    accepted: int | UnsetType = UNSET
    duplicates: int | UnsetType = UNSET
    delivery_id: str | UnsetType | None = UNSET
    state: Annotated[str | None, Meta(description="queued, retrying, delivered, dead")] | UnsetType = UNSET


class LogPage(msgspec.Struct):
    """A page of the callback log."""

    entries: list[ConsoleLogEntry] | UnsetType = UNSET
    next_before: Annotated[str | None, Meta(description="pass as before for the next page")] | UnsetType = UNSET


class DeadLetterPage(msgspec.Struct):
    """A page of dead letters."""

    dead_letters: list[dict[str, Any]] | UnsetType = UNSET
    total: int | UnsetType = UNSET
    limit: int | UnsetType = UNSET
    offset: int | UnsetType = UNSET


class Replayed(msgspec.Struct):
    """What became of each dead letter, and how many were replayed."""

    results: list[dict[str, Any]] | UnsetType = UNSET
    replayed: int | UnsetType = UNSET


class ConsoleAttempt(msgspec.Struct):
    """One attempt of a delivery."""

    attempt: int | UnsetType = UNSET
    at: float | UnsetType | None = UNSET
    ok: bool | UnsetType = UNSET
    status: int | UnsetType | None = UNSET
    error: str | UnsetType | None = UNSET
    duration_ms: float | UnsetType | None = UNSET
    response: Annotated[str, Meta(description="the first 1 KB of the answer's body")] | UnsetType = UNSET
    destination: str | UnsetType | None = UNSET


class ConsoleDelivery(msgspec.Struct):
    """One delivery, with every attempt."""

    id: str | UnsetType = UNSET
    appid: str | UnsetType = UNSET
    event_type: str | UnsetType = UNSET
    event_ids: Strings | UnsetType = UNSET
    state: DeliveryState | UnsetType = UNSET
    received_at: float | UnsetType | None = UNSET
    next_attempt_at: NextAttempt | UnsetType = UNSET
    delivered_at: float | UnsetType | None = UNSET
    dead_at: float | UnsetType | None = UNSET
    destination: (
        Annotated[
            str | None, Meta(description="the further destination (dst_...) it goes to; null: the primary address")
        ]
        | UnsetType
    ) = UNSET
    attempts: list[ConsoleAttempt] | UnsetType = UNSET


class DeliveryPage(msgspec.Struct):
    """A page of deliveries (an instance's, or a further destination's)."""

    deliveries: list[ConsoleDelivery] | UnsetType = UNSET
    next_before: (
        Annotated[str | None, Meta(description="pass as before for the next (older) page; null at the end")] | UnsetType
    ) = UNSET


class FailingOrigin(msgspec.Struct):
    """A destination whose every attempt has failed for a while."""

    destination: Annotated[str, Meta(description="scheme://host:port")] | UnsetType = UNSET
    failing_since: float | UnsetType = UNSET
    last_failure: float | UnsetType = UNSET
    appids: Strings | UnsetType = UNSET


class Failing(msgspec.Struct):
    """The failing destinations."""

    failing: list[FailingOrigin] | UnsetType = UNSET


class ProbingDestination(msgspec.Struct):
    """A destination whose attempts time out: it gets fewer attempts at a time until it answers."""

    destination: Annotated[str, Meta(description="scheme://host:port")] | UnsetType = UNSET
    probing_since: float | UnsetType = UNSET
    attempts_in_flight: (
        Annotated[int, Meta(description="attempts at a time per worker process, fewer than its caps")] | UnsetType
    ) = UNSET
    answering: Annotated[bool, Meta(description="it answers again and is opening back up")] | UnsetType = UNSET
    last_change: float | UnsetType = UNSET
    appids: Strings | UnsetType = UNSET
    destinations: (
        Annotated[Strings, Meta(description="the further destinations (dst_…) at this address")] | UnsetType
    ) = UNSET


class Probing(msgspec.Struct):
    """The destinations being probed."""

    probing: list[ProbingDestination] | UnsetType = UNSET


class Denied(msgspec.Struct):
    """The operations denied to the account."""

    denied: (
        Annotated[Strings, Meta(description="every operation the gateway refuses the account (both lists)")] | UnsetType
    ) = UNSET
    own: Annotated[Strings, Meta(description="the account's own list, which deny and allow change")] | UnsetType = UNSET
    by_operator: (
        Annotated[Strings, Meta(description="the operator's list (svcgw accounts deny), read-only here")] | UnsetType
    ) = UNSET


class ConsoleApiKey(msgspec.Struct, kw_only=True):
    """One of the account's API keys: never the key itself, except once in the answer that creates it."""

    id: str | UnsetType = UNSET
    label: str | UnsetType = UNSET
    prefix: Annotated[str, Meta(description="the key's first characters")] | UnsetType = UNSET
    created_at: float | UnsetType = UNSET
    last_used: Annotated[float | None, Meta(description="Unix seconds of the last gateway call")] | UnsetType = UNSET
    revoked: bool | UnsetType = UNSET
    revoked_at: float | UnsetType | None = UNSET


class ConsoleNewKey(ConsoleApiKey, kw_only=True):
    """A new API key, with the key itself, shown this once."""

    key: str | UnsetType = UNSET


class KeyList(msgspec.Struct):
    """The account's keys: in use first, then revoked."""

    keys: list[ConsoleApiKey] | UnsetType = UNSET


class ConsoleLogin(msgspec.Struct):
    """A QR login the console runs (kept 15 minutes)."""

    id: str | UnsetType = UNSET
    appid: str | UnsetType = UNSET
    stage: Literal["closing", "qr", "done", "failed"] | UnsetType = UNSET
    status: Annotated[int | None, Meta(description="the last checkQr status")] | UnsetType = UNSET
    words: Annotated[str | None, Meta(description="the status in words")] | UnsetType = UNSET
    needs_code: bool | UnsetType = UNSET
    cancelled: bool | UnsetType = UNSET
    image: Annotated[str, Meta(description="the QR image as a data: URL (PNG, JPEG or GIF)")] | UnsetType = UNSET
    refresh_interval: int | UnsetType = UNSET
    error: Annotated[str, Meta(description="the last refused step")] | UnsetType = UNSET
    created: Annotated[bool, Meta(description="the instance was created by this login")] | UnsetType = UNSET


class Relogin(msgspec.Struct):
    """Whether the instance is back, or else the QR login that brings it back."""

    recovered: bool | UnsetType = UNSET
    login: ConsoleLogin | UnsetType | None = UNSET


class LayerRefused(msgspec.Struct):
    """A step the capability layer refused: HTTP 200, its code (never 0) and a message naming the operation."""

    code: int
    message: str
    data: None


class InstanceDone(msgspec.Struct):
    """The instance acted on."""

    appid: str | UnsetType = UNSET


class ConsoleDestination(msgspec.Struct, kw_only=True):
    """A further destination. The Bearer token is never returned, only whether one is set; the signing secret
    only for one destination (not in a list)."""

    id: str | UnsetType = UNSET
    scope: Literal["account", "instance"] | UnsetType = UNSET
    account: str | UnsetType = UNSET
    appid: str | UnsetType | None = UNSET
    label: str | UnsetType = UNSET
    url: str | UnsetType = UNSET
    secret: Annotated[str | None, Meta(description="its own signing secret for X-Svc-Signature")] | UnsetType = UNSET
    bearer: Annotated[bool, Meta(description="whether a Bearer token is set")] | UnsetType = UNSET
    event_types: Strings | UnsetType = UNSET
    rate: Rate | UnsetType = UNSET
    enabled: bool | UnsetType = UNSET
    created_at: float | UnsetType = UNSET
    updated_at: float | UnsetType = UNSET
    failing_since: (
        Annotated[float | None, Meta(description="every attempt to its origin has failed since; null: not failing")]
        | UnsetType
    ) = UNSET


class DestinationList(msgspec.Struct):
    """A scope's further destinations, oldest first; for an instance, also its account's (which it takes too)."""

    destinations: list[ConsoleDestination] | UnsetType = UNSET
    account_destinations: list[ConsoleDestination] | UnsetType = UNSET


class SavedDestination(msgspec.Struct):
    """The saved destination, and its SvcCallbackTest POST (null when no test was sent)."""

    destination: ConsoleDestination | UnsetType = UNSET
    test: ConsoleTest | UnsetType | None = UNSET
