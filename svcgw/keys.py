"""Every Redis key name the service uses, in one place.

Every key that belongs to one instance and to its traffic (its log, de-duplication window,
outcomes, dead index, service-event list and seq) carries the instance's shard tag ``{<appid>}``,
so that every script touches keys of one instance's slot (docs/redis-layout.md, "Names and shard
tags"); :func:`untagged_instance_keys` spells the names of before, for the upgrade (svcgw.retag).

RQ's own keys (``rq:queue:<name>``, ``rq:job:<id>``, ``rq:failed:<name>``,
``rq:scheduled:<name>``) are named by RQ; the functions at the bottom spell
them out only because the ingest and delivery scripts touch them directly,
and they must agree with RQ to the letter.
"""

from __future__ import annotations

from . import deliveryid

PREFIX = "svcgw:"

# --- accounts and API keys -------------------------------------------------
ACCOUNTS = PREFIX + "accounts"  # set of account ids


def account(account_id: str) -> str:
    """Hash: name, devices (quota), valid_until, created_at; login, password (argon2id hash),
    session_epoch (console sessions made before its value are ended) and password_epoch (the
    session_epoch the password was set at: its version, which device cookies carry) when the
    account signs in with a password (svcgw.credentials)."""
    return f"{PREFIX}account:{account_id}"


def account_instances(account_id: str) -> str:
    """Set of appids owned by the account."""
    return f"{PREFIX}account:{account_id}:instances"


def account_keys(account_id: str) -> str:
    """Set of API key ids of the account."""
    return f"{PREFIX}account:{account_id}:keys"


def account_denied(account_id: str) -> str:
    """Set of controlled operations (``module/action``) the operator denied the account (``svcgw accounts deny``)."""
    return f"{PREFIX}account:{account_id}:denied"


def account_own_denied(account_id: str) -> str:
    """Set of controlled operations the account denied itself in the console; the gateway refuses both sets."""
    return f"{PREFIX}account:{account_id}:denied:own"


def device_reservations(account_id: str) -> str:
    """Sorted set: quota slots held by device creations in flight, scored by expiry."""
    return f"{PREFIX}account:{account_id}:reservations"


def rate_window(account_id: str, limit: str) -> str:
    """List of call timestamps of one account under one limit (``amount/seconds``), newest first."""
    return f"{PREFIX}rate:{account_id}:{limit}"


def api_key(key_id: str) -> str:
    """Hash: account, hash (sha256 of the key), prefix, label, created_at, last_used, revoked_at."""
    return f"{PREFIX}apikey:{key_id}"


def api_key_lookup(key_hash: str) -> str:
    """String: key id, addressed by the sha256 of the presented key."""
    return f"{PREFIX}apikey-hash:{key_hash}"


def login(normalised: str) -> str:
    """String: the account id whose console login this is (svcgw.credentials.normalise_login)."""
    return f"{PREFIX}login:{normalised}"


def invitation(token_hash: str) -> str:
    """String with a TTL: the account id an invitation is for, named by the sha256 of its token."""
    return f"{PREFIX}invitation:{token_hash}"


# Prefix of the console's sign-in failure windows, per login, device or client address: one sorted
# set of attempts per window, ``<prefix>:<kind>:<identity>:<amount>-<seconds>`` (receiver.console.failures).
SIGNIN_FAILURES = PREFIX + "signin-failures"


# --- instances and callback configuration ----------------------------------
INSTANCES = PREFIX + "instances"  # set of every registered appid


def instance(appid: str) -> str:
    """Hash: account, created_at, receiver_hash, status fields (see liveness)."""
    return f"{PREFIX}instance:{appid}"


def receiver_lookup(token_hash: str) -> str:
    """String: appid, addressed by the sha256 of the receiver URL's token."""
    return f"{PREFIX}receiver:{token_hash}"


def callback_account(account_id: str) -> str:
    """Hash: url, secret, token (encrypted), updated_at: the account default."""
    return f"{PREFIX}callback:account:{account_id}"


def callback_instance(appid: str) -> str:
    """Hash: url, secret, token (encrypted), updated_at: the instance's own."""
    return f"{PREFIX}callback:instance:{appid}"


# --- ingest: callback log and de-duplication --------------------------------
def callback_log(appid: str) -> str:
    """Stream of posts as received: body (compressed when that pays, svcgw.calllog), received_at, accepted, duplicates.

    Also the index of the instance's deliveries (svcgw.deliverylist): a post's entry id names its
    delivery (svcgw.deliveryid); an entry whose delivery has a ``dlv_`` id (a service event's, or
    one written by an earlier version) names it in a ``delivery`` field. ``{appid}`` is the
    instance's shard tag, as on every key of one instance.
    """
    return f"{PREFIX}log:{{{appid}}}"


def dedup_container(appid: str) -> str:
    """Hash of the event ids in the de-duplication window, where fields expire one by one (svcgw.dedup).

    Field: 16 raw bytes of the event id's SHA-256 (``svcgw.envelope.RawEvent.digest``), value ``1``;
    each field expires after the window (``HEXPIRE``: Redis >= 7.4, Valkey >= 9), the key after the
    last one. The ``{appid}`` tag keeps every key of one instance in one hash slot.
    """
    return f"{PREFIX}dd:{{{appid}}}"


def dedup_bucket(appid: str, bucket: int) -> str:
    """Hash of the event ids first seen in window number ``bucket`` (``floor(now / window)``), for servers
    without per-field expiry (svcgw.dedup): fields as :func:`dedup_container`'s; the key expires at
    the end of the next window."""
    return f"{PREFIX}dd:{{{appid}}}:{bucket}"


def dedup(appid: str, event_key: str) -> str:
    """String ``1`` with a TTL: the de-duplication key of layout 1, one per event id (only its presence is read).

    Nothing writes it any more; the ingest script looks for it (``EXISTS``) for one window after the
    upgrade to layout 2 (svcgw.layout), when the last ones expire.
    """
    return f"{PREFIX}dedup:{appid}:{event_key}"


# --- deliveries --------------------------------------------------------------
def outcomes(appid: str) -> str:
    """Stream: the bare outcome of each delivery delivered within a minute of its post (svcgw.bareoutcome).

    Fields ``l`` (the post's log entry id), ``o`` (the attempts), ``i`` (event ids, when the post had
    duplicates); trimmed and expired like the callback log. ``{appid}`` is the instance's shard tag.
    """
    return f"{PREFIX}out:{{{appid}}}"


def late_outcomes(appid: str, bucket: int) -> str:
    """Hash: log entry id -> bare outcome of a delivery delivered later than that, per log retention."""
    return f"{PREFIX}late:{{{appid}}}:{bucket}"


def delivery(delivery_id: str) -> str:
    """Hash of the delivery's fields: appid, account, event_type, body, state, attempts, ...

    Attempt records are its fields ``a1`` .. ``a<attempts>`` (svcgw.attemptrecords).

    A delivery named by its post (svcgw.deliveryid) has one hash, RQ's job hash
    (:func:`rq_job`), which holds its fields besides RQ's: appid, account, event_type,
    body, and ``dup`` (the post's duplicates) when there were any; ``state``, ``attempts``
    and ``failures`` once attempted (none reads as queued, 0, 0), the time received is its id's.
    It is deleted once delivered (its bare outcome is kept: :func:`outcomes`).

    A ``dlv_`` delivery (service events; earlier versions) has ``svcgw:delivery:<id>`` of
    its own, with ``state``, ``received_at`` and ``events`` from the start; once delivered it
    is kept until its expiry, its body emptied and ``ids`` holding its event ids.
    """
    if deliveryid.parse(delivery_id) is not None:
        return rq_job(delivery_id)
    return f"{PREFIX}delivery:{delivery_id}"


def delivery_attempts(delivery_id: str) -> str:
    """List of JSON attempt records, oldest first, as earlier versions kept them (svcgw.attemptrecords).

    Read and expired for deliveries attempted before an upgrade; nothing writes it now.
    """
    return f"{PREFIX}delivery:{delivery_id}:attempts"


# Hash: a destination (a callback address's origin, svcgw.failing) whose attempts have all
# failed lately -> "first failure:last failure:flagged (0 or 1)".
FAILING_DESTINATIONS = PREFIX + "failing"


def inflight(queue_name: str) -> str:
    """Sorted set of job ids claimed by a worker, scored by lease expiry."""
    return f"{PREFIX}inflight:{queue_name}"


def dead_letters_by_appid(appid: str) -> str:
    """Set of dead-letter delivery ids of one instance (tagged ``{appid}``)."""
    return f"{PREFIX}dead:{{{appid}}}"


# --- the order of service events (svcgw.deliveries, svcgw/lua/chain.lua) ---------
def service_events(appid: str) -> str:
    """List of the instance's service-event delivery ids not yet delivered or dead, oldest first.

    Only the first is queued, claimed or retrying; the others wait, deferred. Tagged ``{appid}``
    (the instance's own hash, :func:`instance`, belongs to the registry and is not).
    """
    return f"{PREFIX}instance:{{{appid}}}:service-events"


def service_event_seq(appid: str) -> str:
    """Integer: the last ``seq`` given to a service event of the instance (never reset; tagged ``{appid}``)."""
    return f"{PREFIX}instance:{{{appid}}}:seq"


# --- the same four before they carried the tag (svcgw.retag renames them once) -------------
# SCAN patterns that find them (a tagged name has ``{`` where the appid starts).
UNTAGGED_PATTERNS = (f"{PREFIX}log:[^{{]*", f"{PREFIX}dead:[^{{]*", f"{PREFIX}instance:[^{{]*:seq")


def tagged_instance_keys(appid: str) -> tuple[str, str, str, str]:
    """The instance's log, dead index, service-event list and seq: the keys :func:`untagged_instance_keys` became."""
    return callback_log(appid), dead_letters_by_appid(appid), service_events(appid), service_event_seq(appid)


def untagged_instance_keys(appid: str) -> tuple[str, str, str, str]:
    """The same four keys as versions before the shard tags named them (layout 2 until ``tags`` in the marker)."""
    return (f"{PREFIX}log:{appid}", f"{PREFIX}dead:{appid}",
            f"{PREFIX}instance:{appid}:service-events", f"{PREFIX}instance:{appid}:seq")  # fmt: skip


def untagged_appid(name: str) -> str | None:
    """The appid an untagged key of :data:`UNTAGGED_PATTERNS` belongs to; None for any other name."""
    for head, tail in ((f"{PREFIX}log:", ""), (f"{PREFIX}dead:", ""), (f"{PREFIX}instance:", ":seq")):
        if name.startswith(head) and name.endswith(tail):
            appid = name[len(head) : len(name) - len(tail)]
            if appid and "{" not in appid:
                return appid
    return None


# --- RQ's keys (owned by RQ; spelled here for our scripts) ------------------
RQ_QUEUES = "rq:queues"


def rq_queue(queue_name: str) -> str:
    return f"rq:queue:{queue_name}"


def rq_job(job_id: str) -> str:
    return f"rq:job:{job_id}"


def rq_failed(queue_name: str) -> str:
    return f"rq:failed:{queue_name}"


def rq_scheduled(queue_name: str) -> str:
    return f"rq:scheduled:{queue_name}"


def rq_deferred(queue_name: str) -> str:
    """RQ's deferred registry: service events waiting for an earlier one of their instance."""
    return f"rq:deferred:{queue_name}"


# --- the key layout (svcgw.layout) -------------------------------------------
# Hash written once per deployment (HSETNX): ``version``, ``since`` (unix seconds), ``dedup``
# (``hexpire`` or ``buckets``): the layout every process reads and writes; ``tags`` (unix
# seconds) once the per-instance keys of before carry their ``{appid}`` tag (svcgw.retag).
LAYOUT = PREFIX + "layout"


# --- demo (``svcgw up --demo``) ----------------------------------------------
DEMO = PREFIX + "demo"  # hash: account, key_id, key (sealed), appid


# --- liveness -----------------------------------------------------------------
PROBE_SCHEDULE = PREFIX + "probe:schedule"  # sorted set: appid scored by next probe time


# --- console and metrics (receiver.console, svcgw.metrics) ----------------
def console_session(id_digest: str) -> str:
    """Hash with a TTL: account, key_id ('' for a password), epoch (the account's session epoch), csrf,
    created_at, flash; named by the sha256 of the session id."""
    return f"{PREFIX}console:session:{id_digest}"


def console_login_attempt(account_id: str, attempt_id: str) -> str:
    """Hash with a TTL: one QR login the console runs for an account (receiver.console.qrflow).

    The account is part of the name, so another account's attempt id names nothing.
    """
    return f"{PREFIX}console:qr:{account_id}:{attempt_id}"


# Hash of counters shared by every process: field ``<metric>``, or
# ``<metric>|<label value>`` for a metric with one label (svcgw.metrics).
METRICS_COUNTERS = PREFIX + "metrics:counters"
# Hash of the ingest-to-delivery latency histogram: field ``<upper bound>``
# per bucket (not cumulative), plus ``count`` and ``sum``.
METRICS_LATENCY = PREFIX + "metrics:latency"
# Hash of instance counts kept in step with every status change: field
# ``status|<liveness status>``, ``probe_errors``, and ``built_at`` (when it was
# first computed from the instances; svcgw.metrics.rebuild_instance_counts).
METRICS_INSTANCES = PREFIX + "metrics:instances"
