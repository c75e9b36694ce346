"""Destination address rules for callback URLs.

One set of rules, applied twice:

* at configuration time, :func:`check_callback_url` turns a ``callbackUrl``
  into a :class:`CallbackUrl` or raises :class:`AddressError` with the
  gateway error code;
* at connect time, :func:`filter_addresses` resolves the host again and keeps
  only the addresses that may be dialled, so a name that changed its answer
  since it was configured (DNS rebinding) still cannot reach an internal
  address, nor the service itself (-40012, with the service's own targets,
  :func:`own_targets`). The delivery transport dials only what it returns.

The rules, checked in this order:

``-40011`` (``INVALID_URL``): the value is not a string, is longer than
  :data:`MAX_URL_LENGTH`, contains whitespace, control or invisible format
  characters or a backslash, is not an absolute ``http://`` / ``https://``
  URL with a host, has a bad port, or carries user credentials
  (``user:password@``). Credentials are refused rather than kept: they would
  be stored and logged in clear, and ``public.example@10.0.0.1`` is a classic
  way to make an address look like something it is not.

``-40012`` (``OWN_ADDRESS``): the URL points at the service itself: the same
  host and port (whatever the scheme) as one of ``own_origins``, or inside one
  of ``own_prefixes`` (the receiver URLs). Hosts are also compared by the
  addresses they resolve to, so ``localhost:8080`` is recognised as
  ``127.0.0.1:8080``.

``-40013`` (``UNUSABLE_ADDRESS``): the port is not one of ``ports``
  (``SVCGW_DESTINATION_PORTS``: 80, 443 and 1024 to 65535 but for the
  well-known ports of internal services, ``INTERNAL_SERVICE_PORTS``, unless set
  otherwise), the host does not resolve, or any address it resolves to is
  internal (see :func:`forbidden_reason`). IP literals,
  including the odd IPv4 spellings ``2130706433``, ``0x7f.1`` and ``127.1``
  that resolvers accept, are checked without a lookup.

An address inside one of the ``allow`` networks
(``SVCGW_ALLOW_PRIVATE_DESTINATIONS``) is always permitted; nothing else gets
around the rules.

The module does no I/O except through the resolver, which callers (and tests)
may replace.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import socket
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from svcgw.callbacks.netblocks import IPAddress, forbidden_reason
from svcgw.config.environment import Network, PortRanges
from svcgw.config.settings import DEFAULT_DESTINATION_PORTS, INTERNAL_SERVICE_PORTS, Settings
from svcgw.errors import Rejected
from svcgw.intake.receivers import receiver_prefix

__all__ = [
    "INVALID_URL",
    "MAX_URL_LENGTH",
    "OWN_ADDRESS",
    "UNUSABLE_ADDRESS",
    "AddressError",
    "CallbackUrl",
    "IPAddress",
    "Network",
    "OwnTarget",
    "Resolver",
    "check_callback_url",
    "check_for_service",
    "filter_addresses",
    "forbidden_reason",
    "is_ip_literal",
    "own_targets",
    "port_allowed",
    "system_resolve",
]

INVALID_URL = -40011
OWN_ADDRESS = -40012
UNUSABLE_ADDRESS = -40013

MAX_URL_LENGTH = 2048

Resolver = Callable[[str, int], Sequence[str]]


class AddressError(Rejected, ValueError):
    """A destination address breaks the rules.

    ``code`` is the gateway error code (-40011, -40012 or -40013) and
    ``message`` (also ``str(error)``) says why, without the URL's credentials
    or query string.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"AddressError({self.code}, {self.message!r})"


@dataclass(frozen=True)
class CallbackUrl:
    """A callback URL that passed :func:`check_callback_url`."""

    url: str
    scheme: str
    host: str
    port: int
    # What the host resolved to when it was checked; connect time resolves again.
    addresses: tuple[str, ...]


# --- resolving -------------------------------------------------------------

_NUMERIC_V4 = re.compile(r"[0-9a-fA-FxX.]+")


def _literal(host: str) -> IPAddress | None:
    """The IP address ``host`` spells, in any form a resolver accepts, or None."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    # inet_aton reads the legacy spellings (2130706433, 0x7f.1, 127.1, octal)
    # exactly as getaddrinfo does; the pattern keeps it from accepting
    # trailing junk after a space.
    if _NUMERIC_V4.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def is_ip_literal(host: str) -> bool:
    """Whether ``host`` spells an IP address (in any form a resolver accepts), so it needs no lookup."""
    return _literal(host) is not None


def system_resolve(host: str, port: int) -> list[str]:
    """The unique addresses ``host`` resolves to, in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for _family, _type, _proto, _canonname, sockaddr in infos:
        seen.setdefault(str(sockaddr[0]), None)
    return list(seen)


def _lookup(host: str, port: int, resolve: Resolver | None) -> list[IPAddress]:
    """Addresses of ``host``: the literal itself, or what the resolver says.

    Returns an empty list when the host does not resolve.
    """
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        answers = (resolve or system_resolve)(host, port)
    except (OSError, ValueError):
        # gaierror for unknown names, UnicodeError for names IDNA cannot encode.
        return []
    found: list[IPAddress] = []
    for answer in answers:
        try:
            ip = ipaddress.ip_address(answer)
        except ValueError:
            continue
        if ip not in found:
            found.append(ip)
    return found


def _unmapped(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def port_allowed(port: int, ports: PortRanges = DEFAULT_DESTINATION_PORTS) -> bool:
    return any(low <= port <= high for low, high in ports)


def _port_refused(port: int) -> AddressError:
    service = INTERNAL_SERVICE_PORTS.get(port)
    why = f", it is {service}'s well-known port" if service else ""
    return AddressError(
        UNUSABLE_ADDRESS, f"port {port} is not an allowed destination port (SVCGW_DESTINATION_PORTS{why})"
    )


def filter_addresses(
    host: str,
    port: int,
    allow: Sequence[Network] = (),
    resolve: Resolver | None = None,
    ports: PortRanges = DEFAULT_DESTINATION_PORTS,
    own: Sequence[OwnTarget] = (),
) -> list[str]:
    """Resolve ``host`` and return the addresses that may be dialled.

    This is the connect-time check: forbidden addresses are dropped and the
    rest returned in the resolver's order. Raises :class:`AddressError`
    (-40013) when the port is not allowed, or when the host does not resolve
    or resolves only to internal addresses, and (-40012) when it is, or
    resolves only to, one of the service's ``own`` targets on their port.
    At connect time the path is not known, so a target counts for any path.
    """
    if not port_allowed(port, ports):
        raise _port_refused(port)
    mine = _own_addresses(own, _norm_host(host), port, resolve)
    if mine is None:
        raise AddressError(OWN_ADDRESS, f"host {host!r} is this service's own address")
    found = _lookup(host, port, resolve)
    if not found:
        raise AddressError(UNUSABLE_ADDRESS, f"host {host!r} does not resolve")
    if mine:
        found = [ip for ip in found if _unmapped(ip) not in mine]
        if not found:
            raise AddressError(OWN_ADDRESS, f"host {host!r} resolves to this service's own address")
    kept = [str(ip) for ip in found if forbidden_reason(ip, allow) is None]
    if not kept:
        reasons = sorted({forbidden_reason(ip, allow) or "" for ip in found})
        raise AddressError(
            UNUSABLE_ADDRESS,
            f"host {host!r} resolves only to internal addresses ({', '.join(reasons)})",
        )
    return kept


# --- configuration-time check ------------------------------------------------

_HOST_CHARS = frozenset("-._")


def _invalid(message: str) -> AddressError:
    return AddressError(INVALID_URL, f"callbackUrl {message}")


def _bad_character(text: str) -> bool:
    for ch in text:
        if ch.isspace() or ch == "\\":
            return True
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            return True
    return False


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _norm_host(host: str) -> str:
    host = host.lower().strip("[]").rstrip(".")
    literal = _literal(host)
    return str(_unmapped(literal)) if literal is not None else host


def _norm_path(path: str) -> str:
    path = unquote(path) or "/"
    normal = posixpath.normpath(path)
    # normpath drops the trailing slash that makes "/in/" a directory prefix.
    if path.endswith("/") and normal != "/":
        normal += "/"
    # POSIX keeps a leading "//"; a URL path does not care.
    return "/" + normal.lstrip("/")


@dataclass(frozen=True)
class OwnTarget:
    """A place of the service itself: a host (normalised), its port, and the path under which it is the service's."""

    host: str
    port: int
    path: str


def _own_targets(own_origins: Sequence[tuple[str, str, int]], own_prefixes: Sequence[str]) -> list[OwnTarget]:
    targets = [OwnTarget(_norm_host(host), port, "/") for _scheme, host, port in own_origins]
    for prefix in own_prefixes:
        try:
            parts = urlsplit(prefix)
            port = parts.port or _default_port(parts.scheme.lower())
        except ValueError:
            continue
        if parts.hostname:
            targets.append(OwnTarget(_norm_host(parts.hostname), port, _norm_path(parts.path)))
    return targets


def own_targets(settings: Settings) -> tuple[OwnTarget, ...]:
    """The service's own places, as :func:`check_for_service` knows them: its public origin and receiver URLs."""
    return tuple(_own_targets([settings.public_origin], [receiver_prefix(settings)]))


def _own_addresses(
    targets: Sequence[OwnTarget], host: str, port: int, resolve: Resolver | None
) -> frozenset[IPAddress] | None:
    """The addresses of the service's own targets on ``port`` (looked up now); None when ``host`` is one by name."""
    mine: set[IPAddress] = set()
    for target in targets:
        if target.port != port:
            continue
        if target.host == host:
            return None
        mine.update(_unmapped(ip) for ip in _lookup(target.host, target.port, resolve))
    return frozenset(mine)


def _is_own(
    targets: Sequence[OwnTarget],
    host: str,
    port: int,
    path: str,
    addresses: Sequence[IPAddress] | None,
    resolve: Resolver | None,
) -> bool:
    """Whether (host, port, path) is inside one of the service's own targets.

    With ``addresses`` given, a different name that resolves to one of the
    same addresses counts as the same host.
    """
    for target in targets:
        if target.port != port or not path.startswith(target.path):
            continue
        if target.host == host:
            return True
        if addresses is not None:
            mine = {_unmapped(ip) for ip in _lookup(target.host, target.port, resolve)}
            if mine.intersection(_unmapped(ip) for ip in addresses):
                return True
    return False


def check_callback_url(
    url: object,
    *,
    own_origins: Sequence[tuple[str, str, int]] = (),
    own_prefixes: Sequence[str] = (),
    allow: Sequence[Network] = (),
    resolve: Resolver | None = None,
    ports: PortRanges = DEFAULT_DESTINATION_PORTS,
) -> CallbackUrl:
    """Check a ``callbackUrl`` against the address rules (see the module docstring).

    ``own_origins`` are ``(scheme, host, port)`` tuples as produced by
    ``Settings.public_origin``; ``own_prefixes`` are receiver URL prefixes;
    ``allow`` is ``Settings.allow_private_destinations``; ``resolve`` maps
    ``(host, port)`` to address strings and defaults to ``getaddrinfo``;
    ``ports`` is ``Settings.destination_ports``.

    Raises :class:`AddressError` with code -40011, -40012 or -40013.
    """
    # -40011: an absolute http(s) URL with a host and nothing suspicious in it.
    if not isinstance(url, str):
        raise _invalid("must be a string")
    if not url:
        raise _invalid("is empty")
    if len(url) > MAX_URL_LENGTH:
        raise _invalid(f"is longer than {MAX_URL_LENGTH} characters")
    if _bad_character(url):
        # urlsplit would silently strip some of these; refuse instead of guessing.
        raise _invalid("contains whitespace, control characters or a backslash")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise _invalid("is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise _invalid("must be an http:// or https:// address")
    if "@" in parts.netloc:
        raise _invalid("must not contain user credentials")
    host = parts.hostname or ""
    if not host:
        raise _invalid("has no host")
    if "[" in parts.netloc or "]" in parts.netloc:
        if not parts.netloc.startswith("[") or not isinstance(_literal(host), ipaddress.IPv6Address):
            raise _invalid("has an invalid IPv6 address")
    elif not all(ch.isalnum() or ch in _HOST_CHARS for ch in host):
        raise _invalid("has an invalid host name")
    try:
        explicit_port = parts.port
    except ValueError:
        raise _invalid("has an invalid port") from None
    if explicit_port == 0:
        raise _invalid("has an invalid port")
    port = explicit_port or _default_port(scheme)

    # -40012: not the service itself.
    targets = _own_targets(own_origins, own_prefixes)
    norm_host = _norm_host(host)
    path = _norm_path(parts.path)
    if _is_own(targets, norm_host, port, path, None, resolve):
        raise AddressError(OWN_ADDRESS, "callbackUrl points at this service's own address")

    # -40013: an allowed port, resolvable, and every address public (or allowed).
    if not port_allowed(port, ports):
        raise _port_refused(port)
    found = _lookup(host, port, resolve)
    if not found:
        raise AddressError(UNUSABLE_ADDRESS, f"callbackUrl host {host!r} does not resolve")
    if _is_own(targets, norm_host, port, path, found, resolve):
        raise AddressError(OWN_ADDRESS, "callbackUrl points at this service's own address")
    reasons = sorted({r for r in (forbidden_reason(ip, allow) for ip in found) if r is not None})
    if reasons:
        raise AddressError(
            UNUSABLE_ADDRESS,
            f"callbackUrl host {host!r} resolves to an internal address ({', '.join(reasons)})",
        )
    return CallbackUrl(
        url=url,
        scheme=scheme,
        host=host,
        port=port,
        addresses=tuple(str(ip) for ip in found),
    )


def check_for_service(url: object, settings: Settings, *, resolve: Resolver | None = None) -> CallbackUrl:
    """:func:`check_callback_url` with this service's own address, receiver URLs, allow-list and ports."""
    return check_callback_url(
        url,
        own_origins=[settings.public_origin],
        own_prefixes=[receiver_prefix(settings)],
        allow=settings.allow_private_destinations,
        resolve=resolve,
        ports=settings.destination_ports,
    )
