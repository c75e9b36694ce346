"""Reading the shard settings: ``SVCGW_REDIS_SHARDS`` and what goes with it.

``SVCGW_REDIS_SHARDS`` lists Redis deployments separated by spaces (or new
lines; commas belong to host lists), shard 0 first:

* ``redis://[user:password@]host:port/db`` (also ``rediss://``, ``unix://``): one shard;
* ``sentinel://[user:password@]host:port,host:port/mastername[/db]``: one shard, its
  primary found through those sentinels (``SVCGW_REDIS_SENTINEL_PASSWORD`` is the
  sentinels' own password, for every group);
* ``cluster://[user:password@]host:port,host:port``: one Redis Cluster from its seed
  nodes, alone in the list; it holds ``SVCGW_CLUSTER_SHARDS`` virtual shards
  (default 16), shard ``i`` being the hash tag ``{s<i>}``.

``SVCGW_SHARDS_CLOSED=2,3`` closes shards to new instances (their instances
stay); ``SVCGW_SHARDS_WEIGHTS=0:2,3:0.5`` gives shards a weight other than 1
(a shard of weight 2 is given twice the instances). Both name shards by index.

Errors are ``ValueError`` naming the variable and the entry, with any
password taken out; :mod:`svcgw.config.settings` turns them into ``SettingsError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["Deployment", "Shard", "ShardLayout", "read_layout", "safe_url"]

Kind = Literal["redis", "sentinel", "cluster"]


def safe_url(url: str) -> str:
    """A Redis URL without its password (and without a query, which may carry one)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    # In ``user:password@`` the user is no secret; a lone ``secret@`` may be the password.
    if parts.username and parts.password is not None:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class Deployment:
    """One Redis the service connects to: by URL, through Sentinel, or a Cluster from seed nodes."""

    kind: Kind
    url: str | None = field(default=None, repr=False)  # redis: may hold a password
    addresses: tuple[tuple[str, int], ...] = ()  # sentinel: the sentinels; cluster: the seed nodes
    master: str = "mymaster"  # sentinel: the name the sentinels monitor the primary under
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int = 0

    @property
    def name(self) -> str:
        """What an operator sees: never a password."""
        if self.kind == "redis":
            return safe_url(self.url or "")
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.addresses)
        if self.kind == "sentinel":
            return f"sentinel://{hosts}/{self.master}" + (f"/{self.db}" if self.db else "")
        return f"cluster://{hosts}"


@dataclass(frozen=True)
class Shard:
    """Where instances are placed. ``tag`` is ``{s<i>}`` for a Cluster's virtual shard, else empty."""

    index: int
    name: str
    deployment: int = 0  # index into the deployments
    weight: float = 1.0
    closed: bool = False
    tag: str = ""


SHARDS = "SVCGW_REDIS_SHARDS"
CLUSTER_SHARDS = "SVCGW_CLUSTER_SHARDS"
CLOSED = "SVCGW_SHARDS_CLOSED"
WEIGHTS = "SVCGW_SHARDS_WEIGHTS"
DEFAULT_CLUSTER_SHARDS = 16
# 16384 slots; far fewer tags than that still spread over every master of a large Cluster.
MAX_CLUSTER_SHARDS = 1024
_URL_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class ShardLayout:
    deployments: tuple[Deployment, ...]
    shards: tuple[Shard, ...]

    @property
    def cluster(self) -> bool:
        return self.deployments[0].kind == "cluster"




def read_layout(env: Mapping[str, str], *, other_redis: bool = False) -> ShardLayout | None:
    """The layout ``SVCGW_REDIS_SHARDS`` names; None when it is unset (one shard, as before).

    ``other_redis``: SVCGW_REDIS_URL or SVCGW_REDIS_SENTINELS is set too, which is refused.
    """
    value = _get(env, SHARDS)
    if value is None:
        for name in (CLUSTER_SHARDS, CLOSED, WEIGHTS):
            if _get(env, name) is not None:
                raise ValueError(f"{name} applies only with {SHARDS}")
        return None
    if other_redis:
        raise ValueError(f"set {SHARDS} or SVCGW_REDIS_URL / SVCGW_REDIS_SENTINELS, not both")
    for name in ("SVCGW_REDIS_PASSWORD", "SVCGW_REDIS_DB", "SVCGW_REDIS_SENTINEL_MASTER"):
        if _get(env, name) is not None:
            raise ValueError(f"{name} does not apply with {SHARDS}: put it in each entry")
    entries = value.split()
    deployments = tuple(_deployment(number, entry) for number, entry in enumerate(entries, 1))
    if _get(env, "SVCGW_REDIS_SENTINEL_PASSWORD") is not None and all(d.kind != "sentinel" for d in deployments):
        raise ValueError(f"SVCGW_REDIS_SENTINEL_PASSWORD applies only to sentinel:// entries of {SHARDS}")
    if any(d.kind == "cluster" for d in deployments) and len(deployments) > 1:
        raise ValueError(f"{SHARDS}: a cluster:// entry must be the only one (its shards are hash tags)")
    if deployments[0].kind == "cluster":
        count = _cluster_shards(env)
        name = deployments[0].name
        bare = [Shard(i, f"{name} {{s{i}}}", 0, tag=f"{{s{i}}}") for i in range(count)]
    else:
        if _get(env, CLUSTER_SHARDS) is not None:
            raise ValueError(f"{CLUSTER_SHARDS} applies only to a cluster:// entry of {SHARDS}")
        bare = [Shard(i, d.name, i) for i, d in enumerate(deployments)]
    closed = _indexes(env, len(bare))
    weights = _weights(env, len(bare))
    shards = tuple(
        Shard(s.index, s.name, s.deployment, weights.get(s.index, 1.0), s.index in closed, s.tag) for s in bare
    )
    if all(shard.closed for shard in shards):
        raise ValueError(f"{CLOSED} closes every shard: at least one must stay open to new instances")
    return ShardLayout(deployments, shards)


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value.strip() if value is not None and value.strip() else None


def _shown(entry: str) -> str:
    """An entry as an error message may quote it: without what comes before an ``@`` (a password)."""
    scheme, sep, rest = entry.partition("://")
    return f"{scheme}{sep}{rest.rsplit('@', 1)[-1]}" if sep else entry.rsplit("@", 1)[-1]


def _deployment(number: int, entry: str) -> Deployment:
    where = f"{SHARDS} entry {number} ({_shown(entry)!r})"
    if entry.count("://") > 1:
        raise ValueError(f"{where}: separate entries with spaces, not commas")
    scheme, sep, rest = entry.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in (*_URL_SCHEMES, "sentinel", "cluster"):
        raise ValueError(f"{where}: must start with redis://, rediss://, unix://, sentinel:// or cluster://")
    if scheme in _URL_SCHEMES:
        if scheme != "unix" and not urlsplit(entry).hostname:
            raise ValueError(f"{where}: has no host")
        return Deployment("redis", url=entry)
    userinfo, at, location = rest.rpartition("@")
    username, password = _credentials(userinfo) if at else (None, None)
    hosts, _, path = location.partition("/")
    addresses = _addresses(where, hosts)
    if scheme == "cluster":
        if path.strip("/"):
            raise ValueError(f"{where}: a cluster has no database or master name")
        return Deployment("cluster", addresses=addresses, username=username, password=password)
    master, _, db = path.partition("/")
    if not master:
        raise ValueError(f"{where}: name the master, sentinel://host:port,host:port/mastername")
    if db and not (db.isascii() and db.isdigit()):
        raise ValueError(f"{where}: the database after the master name must be a number")
    return Deployment(
        "sentinel", addresses=addresses, master=master, username=username, password=password, db=int(db or 0)
    )


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    user, colon, password = userinfo.partition(":")
    if not colon:  # a lone ``secret@``: the password, as in redis:// URLs
        return None, unquote(user) or None
    return unquote(user) or None, unquote(password) or None


def _addresses(where: str, hosts: str) -> tuple[tuple[str, int], ...]:
    found: list[tuple[str, int]] = []
    for part in hosts.split(","):
        host, sep, port = part.strip().rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            raise ValueError(f"{where}: hosts must be comma-separated host:port pairs, got {part.strip()!r}")
        found.append((host, int(port)))
    return tuple(found)


def _cluster_shards(env: Mapping[str, str]) -> int:
    value = _get(env, CLUSTER_SHARDS)
    if value is None:
        return DEFAULT_CLUSTER_SHARDS
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_CLUSTER_SHARDS:
        raise ValueError(f"{CLUSTER_SHARDS} must be from 1 to {MAX_CLUSTER_SHARDS}, got {value!r}")
    return int(value)


def _index(name: str, text: str, count: int) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) >= count:
        raise ValueError(f"{name} names shards by index, 0 to {count - 1}, got {text!r}")
    return int(text)


def _indexes(env: Mapping[str, str], count: int) -> frozenset[int]:
    value = _get(env, CLOSED)
    if value is None:
        return frozenset()
    return frozenset(_index(CLOSED, part, count) for part in value.split(",") if part.strip())


def _weights(env: Mapping[str, str], count: int) -> dict[int, float]:
    value = _get(env, WEIGHTS)
    if value is None:
        return {}
    weights: dict[int, float] = {}
    for part in value.split(","):
        if not part.strip():
            continue
        index, colon, weight = part.partition(":")
        try:
            number = float(weight)
        except ValueError:
            number = float("nan")
        if not colon or not 0 < number < float("inf"):
            raise ValueError(f"{WEIGHTS} must be comma-separated index:weight pairs, weight above 0, got {part!r}")
        weights[_index(WEIGHTS, index, count)] = number
    return weights
