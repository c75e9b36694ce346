"""Settings: read once from the environment into one typed object.

Nothing else in the code base reads ``os.environ``; every role receives a
``Settings`` instance and passes it down. A bad value stops start-up with a
``SettingsError`` that names the variable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from svcgw.config.environment import EnvReader, Network, PortRanges, SettingsError
from svcgw.config.shards import Deployment, Shard, ShardLayout

__all__ = [
    "DEFAULT_DESTINATION_PORTS",
    "HOST_CEILING_LEAST",
    "HOST_CEILING_SHARES",
    "INTERNAL_SERVICE_PORTS",
    "PortRanges",
    "Settings",
    "SettingsError",
    "default_address_share",
    "derived_public_url",
]


DEFAULT_RETRY_SCHEDULE = (30.0, 120.0, 600.0, 1800.0, 7200.0, 21600.0)

# Well-known ports of internal services in the unprivileged range: a callback address is not a way
# to knock on a database, cache, queue or cluster control plane. Below 1024 only 80 and 443 are
# allowed anyway. An operator who needs one of these sets SVCGW_DESTINATION_PORTS.
INTERNAL_SERVICE_PORTS: Mapping[int, str] = {
    1433: "Microsoft SQL Server",
    1521: "Oracle",
    2049: "NFS",
    2181: "ZooKeeper",
    2375: "Docker API",
    2376: "Docker API (TLS)",
    2379: "etcd",
    2380: "etcd peers",
    3306: "MySQL",
    3389: "Remote Desktop",
    4369: "Erlang port mapper",
    5432: "PostgreSQL",
    5672: "AMQP",
    5984: "CouchDB",
    6379: "Redis",
    6443: "Kubernetes API",
    7000: "Cassandra",
    7001: "Cassandra (TLS)",
    8500: "Consul",
    9042: "Cassandra CQL",
    9092: "Kafka",
    9200: "Elasticsearch",
    9300: "Elasticsearch nodes",
    10250: "kubelet",
    11211: "memcached",
    15672: "RabbitMQ management",
    16379: "Redis Cluster bus",
    26379: "Redis Sentinel",
    27017: "MongoDB",
    27018: "MongoDB shards",
    27019: "MongoDB config servers",
}


def _without(ranges: PortRanges, denied: Iterable[int]) -> PortRanges:
    """``ranges`` with the ``denied`` ports cut out, in order."""
    result: list[tuple[int, int]] = []
    for low, high in ranges:
        start = low
        for port in sorted(p for p in set(denied) if low <= p <= high):
            if start < port:
                result.append((start, port - 1))
            start = port + 1
        if start <= high:
            result.append((start, high))
    return tuple(result)


# Web ports and the unprivileged range but for internal services' ports: a callback address is
# not a way to knock on a host's SSH, SMTP or database port.
DEFAULT_DESTINATION_PORTS: PortRanges = _without(((80, 80), (443, 443), (1024, 65535)), INTERNAL_SERVICE_PORTS)
# SVCGW_HOST_CONCURRENCY's default, and its least, in accounts' caps (SVCGW_DESTINATION_CONCURRENCY):
# one account whose endpoints on a host hang holds at most a quarter of its ceiling by default.
HOST_CEILING_SHARES = 4
HOST_CEILING_LEAST = 2


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None
    upstream_url: str | None = None
    public_url: str = "http://127.0.0.1:8080"
    host: str = "127.0.0.1"
    port: int = 8080
    state_dir: Path = Path(".svcgw")
    retry_schedule: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE
    delivery_timeout: float = 10.0
    probe_interval: float = 60.0
    rate_limit: str = "300/minute"
    allow_private_destinations: tuple[Network, ...] = ()
    # Kept out of repr so a settings dump never shows key material.
    encryption_keys: tuple[str, ...] = field(default=(), repr=False)
    log_retention: int = 86400
    # Seconds a receiver process keeps an instance's routing records (further destinations) before it
    # reads them again: a destination added is taken within it (svcgw.callbacks.routecache).
    routes_cache_seconds: float = 1.0
    dead_letter_retention: int = 30 * 86400
    lease_seconds: float = 30.0
    max_body_bytes: int = 1024 * 1024
    max_events_per_post: int = 1000
    delivery_concurrency: int = 1024
    destination_concurrency: int = 16
    # Attempts in flight to one destination per worker, every account's together (SVCGW_HOST_CONCURRENCY);
    # None: HOST_CEILING_SHARES times destination_concurrency (host_ceiling).
    host_concurrency: int | None = None
    queue_name: str = "svcgw"
    # Seconds a worker's RQ registration (rq:worker:<name>) outlives its last heartbeat.
    worker_ttl: float = 420.0
    http_workers: int = 1
    # Operators' credentials for rq-dashboard at /rq; without both, /rq is not mounted.
    dashboard_user: str | None = None
    dashboard_password: str | None = field(default=None, repr=False)
    # Redis found through Sentinel instead of SVCGW_REDIS_URL.
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    redis_sentinel_master: str = "mymaster"
    redis_sentinel_password: str | None = field(default=None, repr=False)
    redis_password: str | None = field(default=None, repr=False)
    redis_db: int = 0
    # SVCGW_REDIS_SHARDS; None: one shard. The fields above name shard 0's Redis (svcgw.config.shards).
    redis_shards: ShardLayout | None = None
    # Durable mode: an acknowledgement waits for this many replicas to hold the write.
    redis_wait_replicas: int = 0
    redis_wait_timeout: float = 1.0
    # The deployment needs its Redis to persist (AOF): without it, start-up warns, /readyz is
    # degraded and svcgw doctor fails (svcgw.storage.serverchecks).
    redis_persistence_required: bool = False
    redis_timeout: float = 5.0  # a host that never answers is then a shard down, not a request that hangs
    # The HTTP server's own limits (uvicorn): connections and tasks at once, idle keep-alive.
    http_limit_concurrency: int = 2048
    http_keepalive_timeout: float = 5.0
    # Bearer token of GET /metrics; without it, only loopback clients may scrape.
    metrics_token: str | None = field(default=None, repr=False)
    # Ports a callback address may use (checked when set and again at connect time).
    destination_ports: PortRanges = DEFAULT_DESTINATION_PORTS
    # Delivery requests of one account in flight per worker, so no account takes every slot.
    account_concurrency: int = 256
    # Gateway bodies: the largest of an ordinary operation, of an upload (cdn/upload*), and the
    # body bytes one account's calls may hold at once in one server process.
    gateway_max_body_bytes: int = 1024 * 1024
    upload_max_body_bytes: int = 32 * 1024 * 1024
    account_inflight_bytes: int = 64 * 1024 * 1024
    # The capability-layer client: seconds for a whole call, and for connecting.
    upstream_timeout: float = 30.0
    upstream_connect_timeout: float = 5.0
    # Seconds every attempt to a destination (a callback address's origin) must have failed
    # before it is flagged as failing (svcgw.delivery.failingorigins).
    failing_after: int = 900
    # Seconds a delivery to a disabled further destination waits in the scheduled registry before
    # its destination is looked at again (svcgw.delivery.claim): enabling it lets them go within that time.
    disabled_recheck_seconds: float = 30.0
    # Failed console sign-ins allowed per login and per client address (``limits`` notation);
    # over either, sign-in is refused without checking the password.
    signin_failures_per_login: str = "10/15minutes"
    signin_failures_per_address: str = "100/15minutes"
    # Peers whose X-Forwarded-For names the client (addresses or CIDRs, or '*'); by default none:
    # the peer is the client, and the header is ignored.
    trusted_proxies: tuple[str, ...] = ()
    # Bits of an IPv6 client address that name one client for every per-address limit (svcgw.clientkeys).
    ipv6_prefix: int = 56
    # Seconds a request's head may take to arrive, and its body may stall, before the server closes it.
    http_header_timeout: float = 10.0
    # A request body's deadline (mod_reqtimeout's body=20,MinRate=500): seconds after its head,
    # a second more for every http_body_min_rate bytes received (0: no more); past it, 408.
    http_body_timeout: float = 20.0
    http_body_min_rate: int = 500
    # Connections one client address may hold in one server process; None: an eighth of the cap.
    http_connections_per_address: int | None = None
    # Connections of each Redis client's pool (on a Cluster, of each node's), and the seconds a
    # command waits for one when all are in use before it fails as Redis unavailable.
    redis_max_connections: int = 100
    redis_pool_timeout: float = 5.0
    # Failed receiver tokens and API keys allowed per client address and server process (``limits``
    # notation); over them, that address's credentials not found valid lately are refused unchecked.
    receiver_failures_per_address: str = "600/minute"
    key_failures_per_address: str = "600/minute"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        reader = EnvReader(env)
        redis_url = reader.url("SVCGW_REDIS_URL", schemes=("redis", "rediss", "unix"))
        sentinels = reader.addresses("SVCGW_REDIS_SENTINELS")
        if redis_url and sentinels:
            raise SettingsError("set SVCGW_REDIS_URL or SVCGW_REDIS_SENTINELS, not both")
        layout = reader.layout(other_redis=bool(redis_url or sentinels))
        first = layout.deployments[0] if layout else None
        if first is not None:
            redis_url, sentinels = first.url, first.addresses if first.kind == "sentinel" else ()
        elif not sentinels:
            for name in ("SVCGW_REDIS_PASSWORD", "SVCGW_REDIS_DB", "SVCGW_REDIS_SENTINEL_PASSWORD"):
                if reader.present(name):
                    raise SettingsError(
                        f"{name} applies only with SVCGW_REDIS_SENTINELS; "
                        "with SVCGW_REDIS_URL, put the password and database in the URL"
                    )
        gateway_bodies = _gateway_bodies(reader)
        host = env.get("SVCGW_HOST", "127.0.0.1") or "127.0.0.1"
        port = reader.integer("SVCGW_PORT", 8080, minimum=0, maximum=65535)
        return cls(
            redis_url=redis_url,
            upstream_url=reader.url("SVCGW_UPSTREAM_URL", schemes=("http", "https")),
            public_url=reader.url("SVCGW_PUBLIC_URL", schemes=("http", "https")) or derived_public_url(host, port),
            host=host,
            port=port,
            state_dir=Path(env.get("SVCGW_STATE_DIR", ".svcgw") or ".svcgw"),
            retry_schedule=reader.schedule("SVCGW_RETRY_SCHEDULE", DEFAULT_RETRY_SCHEDULE),
            delivery_timeout=reader.number("SVCGW_DELIVERY_TIMEOUT", 10.0, minimum=0.01),
            probe_interval=reader.number("SVCGW_PROBE_INTERVAL", 60.0, minimum=0.05),
            rate_limit=reader.rate("SVCGW_RATE_LIMIT", "300/minute"),
            allow_private_destinations=reader.networks("SVCGW_ALLOW_PRIVATE_DESTINATIONS"),
            encryption_keys=reader.words("SVCGW_ENCRYPTION_KEYS"),
            log_retention=reader.integer("SVCGW_LOG_RETENTION", 86400, minimum=1),
            routes_cache_seconds=reader.number("SVCGW_ROUTES_CACHE_SECONDS", 1.0, minimum=0.0),
            dead_letter_retention=reader.integer("SVCGW_DEAD_LETTER_RETENTION", 30 * 86400, minimum=60),
            lease_seconds=reader.number("SVCGW_LEASE_SECONDS", 30.0, minimum=0.5),
            max_body_bytes=reader.integer("SVCGW_MAX_BODY_BYTES", 1024 * 1024, minimum=1024),
            max_events_per_post=reader.integer("SVCGW_MAX_EVENTS_PER_POST", 1000, minimum=1, maximum=100_000),
            delivery_concurrency=reader.integer("SVCGW_DELIVERY_CONCURRENCY", 1024, minimum=1, maximum=4096),
            destination_concurrency=reader.integer(
                "SVCGW_DESTINATION_CONCURRENCY", 16, minimum=1, maximum=1024
            ),
            host_concurrency=_host_ceiling(reader),
            queue_name=env.get("SVCGW_QUEUE", "svcgw") or "svcgw",
            worker_ttl=reader.number("SVCGW_WORKER_TTL", 420.0, minimum=1.0),
            http_workers=reader.integer("SVCGW_HTTP_WORKERS", 1, minimum=1, maximum=64),
            **reader.credentials("SVCGW_DASHBOARD_USER", "SVCGW_DASHBOARD_PASSWORD"),
            redis_sentinels=sentinels,
            redis_sentinel_master=first.master
            if first
            else env.get("SVCGW_REDIS_SENTINEL_MASTER", "").strip() or "mymaster",
            redis_sentinel_password=env.get("SVCGW_REDIS_SENTINEL_PASSWORD") or None,
            redis_password=first.password if first else env.get("SVCGW_REDIS_PASSWORD") or None,
            redis_db=first.db if first else reader.integer("SVCGW_REDIS_DB", 0, minimum=0),
            redis_shards=layout,
            redis_wait_replicas=reader.integer("SVCGW_REDIS_WAIT_REPLICAS", 0, minimum=0, maximum=64),
            redis_wait_timeout=reader.number("SVCGW_REDIS_WAIT_TIMEOUT", 1.0, minimum=0.001),
            redis_persistence_required=reader.choice("SVCGW_REDIS_PERSISTENCE", "optional", ("optional", "required"))
            == "required",
            redis_timeout=reader.number("SVCGW_REDIS_TIMEOUT", 5.0, minimum=0.1),
            http_limit_concurrency=reader.integer("SVCGW_HTTP_LIMIT_CONCURRENCY", 2048, minimum=1),
            http_keepalive_timeout=reader.number("SVCGW_HTTP_KEEPALIVE_TIMEOUT", 5.0, minimum=0.1),
            metrics_token=reader.secret("SVCGW_METRICS_TOKEN", minimum_length=16),
            destination_ports=reader.ports("SVCGW_DESTINATION_PORTS", DEFAULT_DESTINATION_PORTS),
            account_concurrency=reader.integer("SVCGW_ACCOUNT_CONCURRENCY", 256, minimum=1, maximum=4096),
            gateway_max_body_bytes=gateway_bodies[0],
            upload_max_body_bytes=gateway_bodies[1],
            account_inflight_bytes=gateway_bodies[2],
            upstream_timeout=reader.number("SVCGW_UPSTREAM_TIMEOUT", 30.0, minimum=0.01),
            upstream_connect_timeout=reader.number("SVCGW_UPSTREAM_CONNECT_TIMEOUT", 5.0, minimum=0.01),
            failing_after=reader.integer("SVCGW_FAILING_AFTER", 900, minimum=1, maximum=30 * 86400),
            disabled_recheck_seconds=reader.number("SVCGW_DISABLED_RECHECK_SECONDS", 30.0, minimum=0.1),
            signin_failures_per_login=reader.rate("SVCGW_SIGNIN_FAILURES_PER_LOGIN", "10/15minutes"),
            signin_failures_per_address=reader.rate("SVCGW_SIGNIN_FAILURES_PER_ADDRESS", "100/15minutes"),
            trusted_proxies=reader.proxies("SVCGW_TRUSTED_PROXIES"),
            ipv6_prefix=reader.integer("SVCGW_IPV6_PREFIX", 56, minimum=32, maximum=128),
            http_header_timeout=reader.number("SVCGW_HTTP_HEADER_TIMEOUT", 10.0, minimum=0.1),
            http_body_timeout=reader.number("SVCGW_HTTP_BODY_TIMEOUT", 20.0, minimum=0.1),
            http_body_min_rate=reader.integer("SVCGW_HTTP_BODY_MIN_RATE", 500, minimum=0),
            http_connections_per_address=_address_share(reader),
            redis_max_connections=reader.integer("SVCGW_REDIS_MAX_CONNECTIONS", 100, minimum=2, maximum=10_000),
            redis_pool_timeout=reader.number("SVCGW_REDIS_POOL_TIMEOUT", 5.0, minimum=0.01),
            receiver_failures_per_address=reader.rate("SVCGW_RECEIVER_FAILURES_PER_ADDRESS", "600/minute"),
            key_failures_per_address=reader.rate("SVCGW_KEY_FAILURES_PER_ADDRESS", "600/minute"),
        )

    @property
    def redis_socket_timeout(self) -> float:
        """The clients' read timeout: ``SVCGW_REDIS_TIMEOUT``, past the longest wait a command asks for
        (``WAIT`` for replicas, ``SVCGW_REDIS_WAIT_TIMEOUT``; the worker's idle ``BLMOVE`` is shorter)."""
        return max(self.redis_timeout, self.redis_wait_timeout + 1.0)

    @property
    def host_ceiling(self) -> int:
        """Attempts in flight to one destination per worker, every account's together (SVCGW_HOST_CONCURRENCY)."""
        if self.host_concurrency is not None:
            return self.host_concurrency
        return HOST_CEILING_SHARES * self.destination_concurrency

    @property
    def http_address_share(self) -> int:
        """Connections one client address may hold at once per server process (SVCGW_HTTP_CONNECTIONS_PER_ADDRESS)."""
        if self.http_connections_per_address is not None:
            return self.http_connections_per_address
        return default_address_share(self.http_limit_concurrency)

    @property
    def shard_layout(self) -> ShardLayout:
        """The deployments and shards: without ``SVCGW_REDIS_SHARDS``, one shard, the one Redis."""
        if self.redis_shards is not None:
            return self.redis_shards
        if self.redis_sentinels:
            one = Deployment("sentinel", addresses=self.redis_sentinels, master=self.redis_sentinel_master,
                             password=self.redis_password, db=self.redis_db)  # fmt: skip
        elif self.redis_url:
            one = Deployment("redis", url=self.redis_url)
        else:
            return ShardLayout((), (Shard(0, "embedded"),))
        return ShardLayout((one,), (Shard(0, one.name),))

    @property
    def redis_configured(self) -> bool:
        """An external Redis is named: by URL, through Sentinel, as shards (otherwise ``up`` embeds one)."""
        return bool(self.redis_url or self.redis_sentinels or self.redis_shards)

    @property
    def public_origin(self) -> tuple[str, str, int]:
        """(scheme, host, port) of ``public_url``: the address that is our own."""
        parts = urlsplit(self.public_url)
        scheme = parts.scheme.lower()
        port = parts.port or (443 if scheme == "https" else 80)
        return scheme, (parts.hostname or "").lower(), port

    def require_upstream(self) -> str:
        if not self.upstream_url:
            raise SettingsError("SVCGW_UPSTREAM_URL is required to serve the gateway API")
        return self.upstream_url.rstrip("/")


def default_address_share(limit_concurrency: int) -> int:
    """An eighth of the server's connections: one client cannot take them all, and a pool of a few
    hundred connections from one address (a load balancer, the capability layer) still fits."""
    return max(1, limit_concurrency // 8)


# A wildcard bind address listens everywhere but is nobody's destination: the derived public
# URL names loopback instead, which this machine's processes (and the simulator) reach.
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1", "*": "127.0.0.1"}


def derived_public_url(host: str, port: int) -> str:
    """``SVCGW_PUBLIC_URL`` when it is unset: ``http://`` + ``SVCGW_HOST`` + ``:`` + ``SVCGW_PORT`` (CONTRACT)."""
    reachable = _WILDCARD_HOSTS.get(host.strip(), host.strip())
    if ":" in reachable and not reachable.startswith("["):
        reachable = f"[{reachable}]"
    return f"http://{reachable}:{port}"


def _host_ceiling(reader: EnvReader) -> int | None:
    """``SVCGW_HOST_CONCURRENCY``, at least HOST_CEILING_LEAST times one account's cap; None when unset.

    The ceiling protects a receiving host from every account's attempts together; one account's
    own cap (``SVCGW_DESTINATION_CONCURRENCY``) must leave most of it to the others, or one account
    whose endpoints there hang or answer slowly would hold it and starve them again.
    """
    cap = reader.integer("SVCGW_DESTINATION_CONCURRENCY", 16, minimum=1, maximum=1024)
    if reader.get("SVCGW_HOST_CONCURRENCY") is None:
        return None
    number = reader.integer("SVCGW_HOST_CONCURRENCY", 0, minimum=1, maximum=65536)
    if number < HOST_CEILING_LEAST * cap:
        raise SettingsError(
            f"SVCGW_HOST_CONCURRENCY ({number}) must be at least {HOST_CEILING_LEAST * cap}, {HOST_CEILING_LEAST} "
            f"times SVCGW_DESTINATION_CONCURRENCY ({cap}), so that one account cannot fill it"
        )
    return number


def _address_share(reader: EnvReader) -> int | None:
    """``SVCGW_HTTP_CONNECTIONS_PER_ADDRESS``, at most the cap it is a share of; None when unset."""
    cap = reader.integer("SVCGW_HTTP_LIMIT_CONCURRENCY", 2048, minimum=1)
    share = reader.get("SVCGW_HTTP_CONNECTIONS_PER_ADDRESS")
    if share is None:
        return None
    number = reader.integer("SVCGW_HTTP_CONNECTIONS_PER_ADDRESS", 0, minimum=1)
    if number > cap:
        raise SettingsError(
            f"SVCGW_HTTP_CONNECTIONS_PER_ADDRESS ({number}) must be at most SVCGW_HTTP_LIMIT_CONCURRENCY ({cap})"
        )
    return number


def _gateway_bodies(reader: EnvReader) -> tuple[int, int, int]:
    """The gateway's body limits (ordinary, upload, in flight per account), each let through by the next."""
    ordinary = reader.integer("SVCGW_GATEWAY_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
    upload = reader.integer("SVCGW_UPLOAD_MAX_BODY_BYTES", 32 * 1024 * 1024, minimum=1024)
    inflight = reader.integer("SVCGW_ACCOUNT_INFLIGHT_BYTES", 64 * 1024 * 1024, minimum=1024)
    if upload < ordinary:
        raise SettingsError(
            f"SVCGW_UPLOAD_MAX_BODY_BYTES ({upload}) must be at least SVCGW_GATEWAY_MAX_BODY_BYTES ({ordinary})"
        )
    if inflight < upload:
        raise SettingsError(
            f"SVCGW_ACCOUNT_INFLIGHT_BYTES ({inflight}) must be at least SVCGW_UPLOAD_MAX_BODY_BYTES ({upload})"
        )
    return ordinary, upload, inflight
