"""Typed values of ``SVCGW_*`` variables: each read, checked and refused with a message that names it.

:class:`svcgw.config.settings.Settings` is built from these readers, once, at start-up; nothing else reads
the environment. A refusal is a :class:`SettingsError`, whose message names the variable and never
a secret's value.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from svcgw.config.shards import ShardLayout, read_layout
from svcgw.errors import Rejected

__all__ = ["EnvReader", "Network", "PortRanges", "SettingsError"]


class SettingsError(Rejected, ValueError):
    """A configuration variable has a value the service cannot use."""


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
PortRanges = tuple[tuple[int, int], ...]  # inclusive (first, last) pairs


class EnvReader:
    """The variables of ``env``, each by its name, as the type a setting needs."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def get(self, name: str) -> str | None:
        """The variable's value without surrounding blanks; None when it is unset or blank."""
        value = self.env.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def url(self, name: str, *, schemes: tuple[str, ...]) -> str | None:
        value = self.get(name)
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
        return self.get(name) is not None

    def addresses(self, name: str) -> tuple[tuple[str, int], ...]:
        """``host:port,host:port``; an IPv6 host in brackets, ``[::1]:26379``."""
        value = self.get(name)
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
        value = self.get(name)
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
        value = self.get(name)
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
        value = self.get(name)
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

        value = self.get(name) or default
        try:
            items = parse_many(value)
        except ValueError:
            raise SettingsError(f"{name} must look like '300/minute', got {value!r}") from None
        if any(item.amount < 1 for item in items):
            raise SettingsError(f"{name} must allow at least 1 per window, got {value!r}")
        return value

    def networks(self, name: str) -> tuple[Network, ...]:
        value = self.get(name)
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
        value = self.get(name)
        if value is None:
            return ()
        if value == "*":
            return ("*",)
        return tuple(str(network) for network in self.networks(name))

    def credentials(self, user_name: str, password_name: str) -> dict[str, str | None]:
        """Both set, or neither: half a pair of credentials is a mistake worth stopping for."""
        user, password = self.get(user_name), self.get(password_name)
        if (user is None) != (password is None):
            missing = password_name if password is None else user_name
            raise SettingsError(f"{missing} must be set too: {user_name} and {password_name} go together")
        if user is not None and ":" in user:
            raise SettingsError(f"{user_name} cannot contain ':' (HTTP Basic credentials)")
        return {"dashboard_user": user, "dashboard_password": password}

    def ports(self, name: str, default: PortRanges) -> PortRanges:
        """``80,443,1024-65535``: single ports and inclusive ranges."""
        value = self.get(name)
        if value is None:
            return default
        ranges: list[tuple[int, int]] = []
        for part in value.split(","):
            first, _, last = part.strip().partition("-")
            try:
                low, high = int(first), int(last or first)
            except ValueError:
                raise SettingsError(
                    f"{name} must be comma-separated ports or ranges such as 1024-65535, got {part!r}"
                ) from None
            if not 0 < low <= high <= 65535:
                raise SettingsError(f"{name} ports must be from 1 to 65535, low to high, got {part!r}")
            ranges.append((low, high))
        return tuple(ranges)

    def secret(self, name: str, *, minimum_length: int) -> str | None:
        value = self.get(name)
        if value is not None and len(value) < minimum_length:
            # The message names the variable, never the value.
            raise SettingsError(f"{name} must be at least {minimum_length} characters long")
        return value

    def words(self, name: str) -> tuple[str, ...]:
        value = self.get(name)
        if value is None:
            return ()
        return tuple(word.strip() for word in value.split(",") if word.strip())

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        """One of ``choices`` (compared without case), or ``default`` when unset."""
        value = self.get(name)
        if value is None:
            return default
        if value.lower() not in choices:
            raise SettingsError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return value.lower()
