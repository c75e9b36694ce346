"""Every Redis key name the service uses, for one shard: :class:`KeySpace`.

A shard's names carry exactly one hash tag each, so that every script and transaction of the
service touches keys of one slot:

* on one Redis, a Sentinel group or each of several deployments (:data:`PLAIN`), a key that
  belongs to one instance carries the instance's tag, ``svcgw:log:{<appid>}``, and every other
  key none: RQ's names are exactly RQ's, so rq-dashboard, ``rq info`` and ``rq requeue`` work;
* on a Redis Cluster, shard ``i``'s every name starts with its tag ``{s<i>}`` and carries no
  other: ``{s3}svcgw:log:<appid>``, ``{s3}rq:job:<id>``. The stock Cluster client sends each
  command to the master of the tag's slot; resharding moves the slot, never the service's data.

RQ's own names (its queue, job hashes and registries) come from RQ's classes
(:mod:`svcgw.storage.rqformat`), with the tag in front on a Cluster.
"""

from __future__ import annotations

from svcgw import deliveryid
from svcgw.storage.rqformat import RqNames

__all__ = ["PLAIN", "KeySpace"]


class KeySpace:
    """The key names of one shard: ``KeySpace()`` on one Redis, ``KeySpace("{s3}")`` for a Cluster's shard 3.

    Attributes name the keys of which a shard has one; methods, those of an account, an instance,
    a delivery. Shard 0 also holds what belongs to the whole service (accounts, API keys, logins,
    sessions, the instance registry): its names are asked of shard 0's space.
    """

    __slots__ = (
        "accounts",
        "breakers",
        "demo",
        "failing_origins",
        "instances",
        "layout",
        "metrics_counters",
        "metrics_instances",
        "metrics_latency",
        "prefix",
        "probe_schedule",
        "rq",
        "shard_instances",
        "signin_failures",
        "stranded",
        "tag",
    )

    def __init__(self, tag: str = "") -> None:
        if tag and not (tag.startswith("{") and tag.endswith("}") and "}" not in tag[1:-1]):
            raise ValueError(f"a shard's tag is one {{…}}, not {tag!r}")
        self.tag = tag
        self.prefix = f"{tag}svcgw:"
        self.rq = RqNames(tag)
        p = self.prefix
        self.accounts = p + "accounts"  # set of account ids
        # Prefix of the console's sign-in failure windows, per login, device or client address: one
        # sorted set of attempts per window, ``<prefix>:<kind>:<identity>:<amount>-<seconds>``
        # (receiver.console.failures).
        self.signin_failures = p + "signin-failures"
        self.instances = p + "instances"  # set of every registered appid
        # Hash: an account's destination (a callback address's origin, svcgw.delivery.failingorigins) whose
        # attempts have all failed lately: "<account> <origin>" -> "first failure:last failure:flagged (0 or 1)".
        self.failing_origins = p + "failing"
        # Hash: a destination (as above) whose attempts time out, and so gets fewer attempts in flight
        # than its caps allow -> "limit:since:at:word" (svcgw.delivery.breaker).
        self.breakers = p + "probing"
        # Hash written once per shard (HSETNX): ``version``, ``since`` (unix seconds), ``dedup``
        # (``hexpire`` or ``buckets``): the layout every process reads and writes; ``tags`` (unix
        # seconds) once the per-instance keys of before carry their ``{appid}`` tag, ``one_tag``
        # once every name of a Cluster's shard carries its shard's tag alone (svcgw.storage.renames).
        self.layout = p + "layout"
        self.demo = p + "demo"  # hash: account, key_id, key (sealed), appid (``svcgw up --demo``)
        self.probe_schedule = p + "probe:schedule"  # sorted set: appid scored by next probe time
        # Hash: a delivery a worker held without ever finishing its attempt, handed back -> its
        # ``attempts`` then; kept until it is attempted or finished (svcgw.delivery.stranded).
        self.stranded = p + "stranded"
        # Hash of counters shared by every process: field ``<metric>``, or ``<metric>|<label value>``
        # for a metric with one label; a delivery counter of a further destination's delivery ends in
        # ``|destination`` (svcgw.counters.KINDED).
        self.metrics_counters = p + "metrics:counters"
        # Hash of the ingest-to-delivery latency histogram: field ``<upper bound>`` per bucket (not
        # cumulative), plus ``count`` and ``sum``.
        self.metrics_latency = p + "metrics:latency"
        # Hash of instance counts kept in step with every status change: field ``status|<liveness
        # status>``, ``probe_errors``, ``built_at`` (when it was first computed from the instances;
        # svcgw.views.metrics.rebuild_instance_counts) and ``shard`` (the shard whose instances it counts:
        # each shard counts its own).
        self.metrics_instances = p + "metrics:instances"
        # Hash on shard 0: field = a shard's index, value = instances placed there since shards were
        # counted. Written with the instance's registration (svcgw.registry.instances), read by placement
        # in the same round trip as the owner check; instances older than the count are shard 0's
        # (svcgw.shards.placement.instance_counts).
        self.shard_instances = p + "shards:instances"

    def __repr__(self) -> str:
        return f"KeySpace({self.tag!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeySpace) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)

    def _own(self, appid: str) -> str:
        """The instance's part of a name of its own: its tag ``{<appid>}``, or the appid under the shard's."""
        return appid if self.tag else f"{{{appid}}}"

    # --- accounts and API keys -------------------------------------------------
    def account(self, account_id: str) -> str:
        """Hash: name, devices (quota), valid_until, created_at; login, password (argon2id hash),
        session_epoch (console sessions made before its value are ended) and password_epoch (the
        session_epoch the password was set at: its version, which device cookies carry) when the
        account signs in with a password (svcgw.registry.credentials)."""
        return f"{self.prefix}account:{account_id}"

    def account_instances(self, account_id: str) -> str:
        """Set of appids owned by the account."""
        return f"{self.prefix}account:{account_id}:instances"

    def account_keys(self, account_id: str) -> str:
        """Set of API key ids of the account."""
        return f"{self.prefix}account:{account_id}:keys"

    def account_denied(self, account_id: str) -> str:
        """Set of controlled operations (``module/action``) the operator denied the account
        (``svcgw accounts deny``)."""
        return f"{self.prefix}account:{account_id}:denied"

    def account_own_denied(self, account_id: str) -> str:
        """Set of controlled operations the account denied itself in the console; the gateway refuses both sets."""
        return f"{self.prefix}account:{account_id}:denied:own"

    def device_reservations(self, account_id: str) -> str:
        """Sorted set: quota slots held by device creations in flight, scored by expiry."""
        return f"{self.prefix}account:{account_id}:reservations"

    def rate_window(self, account_id: str, limit: str) -> str:
        """List of call timestamps of one account under one limit (``amount/seconds``), newest first."""
        return f"{self.prefix}rate:{account_id}:{limit}"

    def api_key(self, key_id: str) -> str:
        """Hash: account, hash (sha256 of the key), prefix, label, created_at, last_used, revoked_at."""
        return f"{self.prefix}apikey:{key_id}"

    def api_key_lookup(self, key_hash: str) -> str:
        """String: key id, addressed by the sha256 of the presented key."""
        return f"{self.prefix}apikey-hash:{key_hash}"

    def login(self, normalised: str) -> str:
        """String: the account id whose console login this is (svcgw.registry.credentials.normalise_login)."""
        return f"{self.prefix}login:{normalised}"

    def invitation(self, token_hash: str) -> str:
        """String with a TTL: the account id an invitation is for, named by the sha256 of its token."""
        return f"{self.prefix}invitation:{token_hash}"

    # --- instances and callback configuration ----------------------------------
    def instance(self, appid: str) -> str:
        """Hash: account, created_at, receiver_hash, status fields (see liveness).

        The registry's (shard 0's), and the copy the instance's shard reads (svcgw.registry.copies):
        configuration, not traffic, so it carries no instance tag.
        """
        return f"{self.prefix}instance:{appid}"

    def receiver_lookup(self, token_hash: str) -> str:
        """String: appid, addressed by the sha256 of the receiver URL's token."""
        return f"{self.prefix}receiver:{token_hash}"

    def callback_account(self, account_id: str) -> str:
        """Hash: url, secret, token (encrypted), updated_at: the account default."""
        return f"{self.prefix}callback:account:{account_id}"

    def callback_instance(self, appid: str) -> str:
        """Hash: url, secret, token (encrypted), updated_at: the instance's own."""
        return f"{self.prefix}callback:instance:{appid}"

    # --- further destinations (svcgw.registry.destinations, docs/destinations.md) -----
    def destination(self, destination_id: str) -> str:
        """Hash of one further destination: scope (``account`` or ``instance``), account, appid (an instance's
        only), label, url, secret (sealed), token (sealed; absent when none), event_types (comma-separated;
        empty: every type), rate (deliveries per second; empty: no limit), enabled (``1`` or ``0``),
        created_at, updated_at.

        The registry's, and the copy the shards that deliver for its scope read (svcgw.registry.copies).
        """
        return f"{self.prefix}destination:{destination_id}"

    def destinations_account(self, account_id: str) -> str:
        """Set of the ids of the account's own further destinations (those for all its instances)."""
        return f"{self.prefix}destinations:account:{account_id}"

    def destinations_instance(self, appid: str) -> str:
        """Set of the ids of the instance's own further destinations."""
        return f"{self.prefix}destinations:instance:{appid}"

    def routes_account(self, account_id: str) -> str:
        """Hash: the routing record of the account's further destinations (svcgw.callbacks.routes), copied to
        every shard."""
        return f"{self.prefix}routes:account:{account_id}"

    def routes_instance(self, appid: str) -> str:
        """Hash: the routing record of the instance's own further destinations (svcgw.callbacks.routes), copied
        to the instance's shard."""
        return f"{self.prefix}routes:instance:{appid}"

    def destination_deliveries(self, destination_id: str) -> str:
        """Stream: the deliveries of one further destination on this shard, an entry per delivery (Redis's time,
        field ``d``: the primary's id for a delivery named by its post, from which its own follows, else its
        ``dlv_`` id); written by the ingest script with the delivery, ``MINID``-trimmed to the log's
        retention and expired with it (docs/destinations.md). An account's destination has one on each
        shard its instances are on: its readers merge them."""
        return f"{self.prefix}destination-index:{destination_id}"

    # --- ingest: callback log and de-duplication --------------------------------
    def callback_log(self, appid: str) -> str:
        """Stream of posts as received: body (compressed when that pays, svcgw.intake.calllog), received_at,
        accepted, duplicates.

        Also the index of the instance's deliveries (svcgw.delivery.listing): a post's entry id names its
        delivery (svcgw.deliveryid); an entry whose delivery has a ``dlv_`` id (a service event's, or
        one written by an earlier version) names it in a ``delivery`` field.
        """
        return f"{self.prefix}log:{self._own(appid)}"

    def dedup_container(self, appid: str) -> str:
        """Hash of the event ids in the de-duplication window, where fields expire one by one (svcgw.intake.dedup).

        Field: 16 raw bytes of the event id's SHA-256 (``svcgw.intake.envelope.RawEvent.digest``), value ``1``;
        each field expires after the window (``HEXPIRE``: Redis >= 7.4, Valkey >= 9), the key after the
        last one.
        """
        return f"{self.prefix}dd:{self._own(appid)}"

    def dedup_bucket(self, appid: str, bucket: int) -> str:
        """Hash of the event ids first seen in window number ``bucket`` (``floor(now / window)``), for servers
        without per-field expiry (svcgw.intake.dedup): fields as :meth:`dedup_container`'s; the key expires at
        the end of the next window."""
        return f"{self.prefix}dd:{self._own(appid)}:{bucket}"

    def dedup(self, appid: str, event_key: str) -> str:
        """String ``1`` with a TTL: the de-duplication key of layout 1, one per event id (only its presence is read).

        Nothing writes it any more; the ingest script looks for it (``EXISTS``) for one window after the
        upgrade to layout 2 (svcgw.storage.layoutversion), when the last ones expire. Layout 1 knew no Cluster.
        """
        return f"{self.prefix}dedup:{appid}:{event_key}"

    # --- deliveries --------------------------------------------------------------
    def outcomes(self, appid: str) -> str:
        """Stream: the bare outcome of each delivery delivered within a minute of its post (svcgw.delivery.outcomes).

        Fields ``l`` (the post's log entry id), ``d`` (for a further destination's delivery, the destination
        id's 16 hex digits; none for the primary's), ``o`` (the attempts), ``i`` (event ids, when the post
        had duplicates); trimmed and expired like the callback log.
        """
        return f"{self.prefix}out:{self._own(appid)}"

    def late_outcomes(self, appid: str, bucket: int) -> str:
        """Hash: log entry id (``_<16 hex>`` after it for a further destination's delivery) -> bare outcome of a
        delivery delivered later than that, per log retention."""
        return f"{self.prefix}late:{self._own(appid)}:{bucket}"

    def delivery(self, delivery_id: str) -> str:
        """Hash of the delivery's fields: appid, account, event_type, body, state, attempts, ...

        Attempt records are its fields ``a1`` .. ``a<attempts>`` (svcgw.delivery.attemptrecords).

        A delivery named by its post (svcgw.deliveryid) has one hash, RQ's job hash
        (``rq.job``), which holds its fields besides RQ's: appid, account, event_type,
        body, and ``dup`` (the post's duplicates) when there were any; ``state``, ``attempts``
        and ``failures`` once attempted (none reads as queued, 0, 0), the time received is its id's.
        It is deleted once delivered (its bare outcome is kept: :meth:`outcomes`).

        So does a post's delivery to a further destination named by the post and the destination
        (``<appid>-<ms>-<seq>_<16 hex>``, svcgw.deliveryid.parse_destination; no ``destination``
        field: the id names it); once delivered, its bare outcome is kept under the post's entry id
        and the destination's.

        A ``dlv_`` delivery (service events; earlier versions; a further destination's of an appid
        of the older form) has ``svcgw:delivery:<id>`` of its own, with ``state``, ``received_at``
        and ``events`` from the start; once delivered it is kept until its expiry, its body emptied
        and ``ids`` holding its event ids.
        """
        if deliveryid.parse_named(delivery_id) is not None:
            return self.rq.job(delivery_id)
        return f"{self.prefix}delivery:{delivery_id}"

    def delivery_attempts(self, delivery_id: str) -> str:
        """List of JSON attempt records, oldest first, as earlier versions kept them (svcgw.delivery.attemptrecords).

        Read and expired for deliveries attempted before an upgrade; nothing writes it now.
        """
        return f"{self.prefix}delivery:{delivery_id}:attempts"

    def inflight(self, queue_name: str) -> str:
        """Sorted set of job ids claimed by a worker, scored by lease expiry."""
        return f"{self.prefix}inflight:{queue_name}"

    def parked(self, destination: str) -> str:
        """Sorted set: the jobs held back for a destination being probed (svcgw.delivery.breaker), scored by
        when each is due in the scheduled registry; what lets them be brought forward when it answers again."""
        return f"{self.prefix}parked:{destination}"

    def destination_pace(self, destination_id: str) -> str:
        """Hash: the rate limit's record of one further destination (svcgw.delivery.pacing): ``t``, the
        theoretical arrival time of its next delivery (GCRA, Unix seconds), and ``h``, the last time a job
        over its rate was handed back for, so that a backlog comes back one interval apart. Written by the
        claim (``queue_read.lua``) on the shard that delivers; expires soon after both have passed."""
        return f"{self.prefix}pace:{destination_id}"

    def dead_letters_by_appid(self, appid: str) -> str:
        """Set of the instance's dead-letter delivery ids."""
        return f"{self.prefix}dead:{self._own(appid)}"

    # --- the order of service events (svcgw.delivery.queueing, svcgw/storage/lua/chain.lua) ---------
    def service_events(self, appid: str) -> str:
        """List of the instance's service-event delivery ids not yet delivered or dead, oldest first.

        Only the first is queued, claimed or retrying; the others wait, deferred.
        """
        return f"{self.prefix}instance:{self._own(appid)}:service-events"

    def service_event_seq(self, appid: str) -> str:
        """Integer: the last ``seq`` given to a service event of the instance (never reset)."""
        return f"{self.prefix}instance:{self._own(appid)}:seq"

    # --- console -----------------------------------------------------------------
    def console_session(self, id_digest: str) -> str:
        """Hash with a TTL: account, key_id ('' for a password), epoch (the account's session epoch), csrf,
        created_at, flash; named by the sha256 of the session id."""
        return f"{self.prefix}console:session:{id_digest}"

    def console_login_attempt(self, account_id: str, attempt_id: str) -> str:
        """Hash with a TTL: one QR login the console runs for an account (receiver.console.qrflow).

        The account is part of the name, so another account's attempt id names nothing.
        """
        return f"{self.prefix}console:qr:{account_id}:{attempt_id}"


# The names on one Redis, a Sentinel group, or each of several deployments.
PLAIN = KeySpace()
