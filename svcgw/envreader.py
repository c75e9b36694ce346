"""Reading the environment's ``SVCGW_*`` variables, one kind of value at a time, for ``svcgw.settings``.

Each method reads one variable (or a pair, or a group that must agree) and
returns it typed, or its default when it is unset or blank; a value the
service cannot use raises :class:`SettingsError`, whose message names the
variable and never shows a secret.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from svcgw.errors import Rejected

from .portranges import DEFAULT_DESTINATION_PORTS, PortRanges, parse_port_ranges
from .shardspec import ShardLayout, read_layout

__all__ = ["EnvReader", "Network", "SettingsError"]


class SettingsError(Rejected, ValueError):
    """A configuration variable has a value the service cannot use."""


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class EnvReader:
    """The ``SVCGW_*`` variables of ``env``, each read as its kind; a bad value is a ``SettingsError`` naming it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def _get(self, name: str) -> str | None:
        value = self.env.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def url(self, name: str, *, schemes: tuple[str, ...]) -> str | None:
        value = self._get(name)
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme.lower() not in schemes:
            raise SettingsError(f"{name} must be a {' / '.join(s + '://' for s in schemes)} URL")
        if parts.scheme.lower() != "unix" and not parts.hostname:
            raise SettingsError(f"{name} has no host")
        return value

    def layout(self, *, other_redis: bool) -> ShardLayout | None:
        try:
            return read_layout(self.env, other_redis=other_redis)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None

    def present(self, name: str) -> bool:
        return self._get(name) is not None

    def addresses(self, name: str) -> tuple[tuple[str, int], ...]:
        """``host:port,host:port``; an IPv6 host in brackets, ``[::1]:26379``."""
        value = self._get(name)
        if value is None:
            return ()
        found: list[tuple[str, int]] = []
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            host, sep, port = part.rpartition(":")
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise SettingsError(f"{name} must be comma-separated host:port pairs, got {part!r}")
            found.append((host, int(port)))
        return tuple(found)

    def integer(self, name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
        value = self._get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise SettingsError(f"{name} must be a whole number, got {value!r}") from None
        if number < minimum or (maximum is not None and number > maximum):
            bound = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
            raise SettingsError(f"{name} must be {bound}, got {number}")
        return number

    def number(self, name: str, default: float, *, minimum: float) -> float:
        value = self._get(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            raise SettingsError(f"{name} must be a number of seconds, got {value!r}") from None
        if not number >= minimum or number == float("inf"):
            raise SettingsError(f"{name} must be at least {minimum}, got {value!r}")
        return number

    def schedule(self, name: str, default: tuple[float, ...]) -> tuple[float, ...]:
        value = self._get(name)
        if value is None:
            return default
        delays: list[float] = []
        for part in value.split(","):
            try:
                delay = float(part)
            except ValueError:
                raise SettingsError(f"{name} must be comma-separated seconds, got {part!r}") from None
            if not 0 <= delay < float("inf"):
                raise SettingsError(f"{name} delays must be 0 or more seconds, got {part!r}")
            delays.append(delay)
        return tuple(delays)

    def rate(self, name: str, default: str) -> str:
        from limits import parse_many

        value = self._get(name) or default
        try:
            items = parse_many(value)
        except ValueError:
            raise SettingsError(f"{name} must look like '300/minute', got {value!r}") from None
        if any(item.amount < 1 for item in items):
            raise SettingsError(f"{name} must allow at least 1 per window, got {value!r}")
        return value

    def networks(self, name: str) -> tuple[Network, ...]:
        value = self._get(name)
        if value is None:
            return ()
        networks: list[Network] = []
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                networks.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise SettingsError(f"{name} must be comma-separated CIDRs, got {part!r}") from None
        return tuple(networks)

    def proxies(self, name: str) -> tuple[str, ...]:
        """Comma-separated addresses or CIDRs, or ``*`` (every peer: only where nothing else can connect)."""
        value = self._get(name)
        if value is None:
            return ()
        if value == "*":
            return ("*",)
        return tuple(str(network) for network in self.networks(name))

    def credentials(self, user_name: str, password_name: str) -> dict[str, str | None]:
        """Both set, or neither: half a pair of credentials is a mistake worth stopping for."""
        user, password = self._get(user_name), self._get(password_name)
        if (user is None) != (password is None):
            missing = password_name if password is None else user_name
            raise SettingsError(f"{missing} must be set too: {user_name} and {password_name} go together")
        if user is not None and ":" in user:
            raise SettingsError(f"{user_name} cannot contain ':' (HTTP Basic credentials)")
        return {"dashboard_user": user, "dashboard_password": password}

    def ports(self, name: str) -> PortRanges:
        """``80,443,1024-65535``: single ports and inclusive ranges."""
        value = self._get(name)
        try:
            return DEFAULT_DESTINATION_PORTS if value is None else parse_port_ranges(value)
        except ValueError as exc:
            raise SettingsError(f"{name} {exc}") from None

    def secret(self, name: str, *, minimum_length: int) -> str | None:
        value = self._get(name)
        if value is not None and len(value) < minimum_length:
            # The message names the variable, never the value.
            raise SettingsError(f"{name} must be at least {minimum_length} characters long")
        return value

    def words(self, name: str) -> tuple[str, ...]:
        value = self._get(name)
        if value is None:
            return ()
        return tuple(word.strip() for word in value.split(",") if word.strip())

    def address_share(self) -> int | None:
        """``SVCGW_HTTP_CONNECTIONS_PER_ADDRESS``, at most the cap it is a share of; None when unset."""
        cap = self.integer("SVCGW_HTTP_LIMIT_CONCURRENCY", 2048, minimum=1)
        share = self._get("SVCGW_HTTP_CONNECTIONS_PER_ADDRESS")
        if share is None:
            return None
        number = self.integer("SVCGW_HTTP_CONNECTIONS_PER_ADDRESS", 0, minimum=1)
        if number > cap:
            raise SettingsError(
                f"SVCGW_HTTP_CONNECTIONS_PER_ADDRESS ({number}) must be at most SVCGW_HTTP_LIMIT_CONCURRENCY ({cap})"
            )
        return number

    def gateway_bodies(self) -> tuple[int, int, int]:
        """The gateway's body limits (ordinary, upload, in flight per account), each let through by the next."""
        ordinary = self.integer("SVCGW_GATEWAY_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
        upload = self.integer("SVCGW_UPLOAD_MAX_BODY_BYTES", 32 * 1024 * 1024, minimum=1024)
        inflight = self.integer("SVCGW_ACCOUNT_INFLIGHT_BYTES", 64 * 1024 * 1024, minimum=1024)
        if upload < ordinary:
            raise SettingsError(
                f"SVCGW_UPLOAD_MAX_BODY_BYTES ({upload}) must be at least SVCGW_GATEWAY_MAX_BODY_BYTES ({ordinary})"
            )
        if inflight < upload:
            raise SettingsError(
                f"SVCGW_ACCOUNT_INFLIGHT_BYTES ({inflight}) must be at least SVCGW_UPLOAD_MAX_BODY_BYTES ({upload})"
            )
        return ordinary, upload, inflight
