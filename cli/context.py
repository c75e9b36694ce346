"""What an administration command works with: settings, Redis clients, one event loop.

``admin_command`` turns ``async def command(admin, **options)`` into a click
callback: it loads the settings, makes an :class:`Admin`, runs the command
in an event loop of its own (``asyncio.run``, one per command), closes the
clients inside that loop, and turns user errors into a message on stderr and
exit status 1, never a traceback:

* Redis unreachable or refusing (``redis.exceptions.RedisError``): the message
  names the Redis without its password;
* any error of the service's own tree (``svcgw.errors.SvcgwError``: an unknown
  account, key, appid or dead letter, a bad value, unusable encryption keys,
  ...) and any other ``LookupError`` or ``ValueError``: its message and its
  code, the code the console answers with for it (:func:`error_code`), so
  that every error reads ``message (code N)``. :func:`error_message` is the
  one place that words them.

The commands need ``SVCGW_REDIS_URL`` (or ``SVCGW_REDIS_SENTINELS``, or
``SVCGW_REDIS_SHARDS``); they use the same settings, key names and ``Store`` as
the service itself. Settings that name only part of a sharded deployment are said
on stderr before the command runs (:mod:`cli.partialview`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import click
from cryptography.fernet import Fernet
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from svcgw import errors
from svcgw.callbacks.addresses import AddressError
from svcgw.callbacks.destinationrules import DestinationRejected
from svcgw.config.settings import Settings
from svcgw.config.shards import safe_url
from svcgw.errors import STORAGE_ERRORS, Missing, Refusal, SvcgwError
from svcgw.registry.copies import ShardCopies
from svcgw.registry.store import OperatorDenied, Store
from svcgw.shards.clients import ShardRedis, aclose_all, role_clients, spaces
from svcgw.storage.keys import KeySpace
from svcgw.vault import KEY_FILE, TokenVault

from .partialview import partial_view

__all__ = [
    "CONNECT_TIMEOUT",
    "UNAVAILABLE_CODE",
    "Admin",
    "admin_command",
    "coded",
    "error_code",
    "error_message",
    "load_settings",
    "safe_redis_url",
]

CONNECT_TIMEOUT = 5


def load_settings() -> Settings:
    """The settings from the environment; a bad one (``SettingsError``) ends the command with its message.

    The ending is the ``svcgw`` group's (``cli.main.Svcgw.invoke``), for every command alike.
    """
    return Settings.from_env()


def safe_redis_url(url: str) -> str:
    """The Redis URL without its password (and without a query, which may carry one)."""
    return safe_url(url)


class Admin:
    """Settings, and ``redis.asyncio`` clients opened on first use within the command's loop."""

    def __init__(self, settings: Settings) -> None:
        if not settings.redis_configured:
            raise click.ClickException(
                "SVCGW_REDIS_URL (or SVCGW_REDIS_SENTINELS) is required for administration commands: "
                "the Redis of the running service"
            )
        self.settings = settings
        self._shards: tuple[ShardRedis, ...] = ()
        self._text_shards: tuple[ShardRedis, ...] = ()

    @property
    def safe_url(self) -> str:
        if self.settings.redis_shards is not None:
            return " ".join(deployment.name for deployment in self.settings.redis_shards.deployments)
        if self.settings.redis_sentinels:
            hosts = ",".join(f"{host}:{port}" for host, port in self.settings.redis_sentinels)
            return f"sentinels {hosts} (primary {self.settings.redis_sentinel_master})"
        return safe_redis_url(self.settings.redis_url or "")

    @property
    def redis(self) -> Redis:
        """Shard 0's client returning bytes (raw bodies stay raw)."""
        return self.shards[0].redis

    @property
    def keys(self) -> KeySpace:
        """Shard 0's key names: what belongs to the whole service."""
        return spaces(self.settings.shard_layout)[0]

    @property
    def shards(self) -> tuple[ShardRedis, ...]:
        """The client (bytes) and names of every shard, by shard index: shard 0's client is :attr:`redis`."""
        if not self._shards:
            # No connection is opened before a command is sent: a shard not read costs nothing.
            self._shards = role_clients(self.settings, connect_timeout=CONNECT_TIMEOUT)
        return self._shards

    @property
    def text_shards(self) -> tuple[ShardRedis, ...]:
        """The client returning text and names of every shard, by shard index."""
        if not self._text_shards:
            self._text_shards = role_clients(self.settings, decode=True, connect_timeout=CONNECT_TIMEOUT)
        return self._text_shards

    @property
    def text(self) -> Redis:
        """Shard 0's client returning text (configuration)."""
        return self.text_shards[0].redis

    def store(self, *, sealing: bool = False) -> Store:
        """The ``Store``; ``sealing`` when the command may encrypt or decrypt a token.

        With several shards it also writes the copies of callback settings
        that instances' shards read (:mod:`svcgw.registry.copies`).
        """
        store = Store(self.text, self._vault(sealing), self.keys)
        if len(self.text_shards) > 1:
            store.copies = ShardCopies(
                [client for client, _ in self.text_shards], [names for _, names in self.text_shards]
            )
        return store

    def _vault(self, sealing: bool) -> TokenVault:
        settings = self.settings
        if sealing or settings.encryption_keys or (settings.state_dir / KEY_FILE).exists():
            return TokenVault.from_settings(settings)
        # Nothing will be sealed or opened: leave no key file behind as a side effect.
        return TokenVault([Fernet.generate_key().decode("ascii")])

    async def aclose(self) -> None:
        await aclose_all(self._shards)
        await aclose_all(self._text_shards)
        self._shards = self._text_shards = ()


Command = Callable[..., Awaitable[None]]


def admin_command(func: Command) -> Callable[..., None]:
    """Run ``func(admin, **options)`` in its own event loop; user errors become exit status 1."""

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> None:
        admin = Admin(load_settings())

        async def run() -> None:
            try:
                seen = await partial_view(admin.text, admin.keys, admin.settings)
                if seen is not None:
                    click.echo(f"svcgw: {seen}", err=True)
                await func(admin, **kwargs)
            finally:
                await admin.aclose()

        try:
            asyncio.run(run())
        except (RedisConnectionError, RedisTimeoutError):
            raise click.ClickException(coded(f"cannot reach Redis at {admin.safe_url}", UNAVAILABLE_CODE)) from None
        except STORAGE_ERRORS as exc:
            raise click.ClickException(coded(f"Redis at {admin.safe_url} answered: {exc}", UNAVAILABLE_CODE)) from None
        except (SvcgwError, LookupError, ValueError) as exc:
            raise click.ClickException(error_message(exc)) from None

    return wrapper


# Storage not serving: the console's row for it.
UNAVAILABLE_CODE = errors.STORAGE_UNAVAILABLE.code


def coded(message: str, code: int) -> str:
    """The one wording of a command's error: the message, then its code."""
    return f"{message} (code {code})"


def error_code(exc: Exception) -> int:
    """The code of an error of the service, as the console answers it (-40000 for a value it cannot use)."""
    if isinstance(exc, AddressError):
        return exc.code
    if isinstance(exc, DestinationRejected):
        return exc.kind.code
    if isinstance(exc, Refusal):
        return exc.code
    if isinstance(exc, (Missing, LookupError)):
        return errors.NO_DESTINATION.code  # every not-found row of the table is -40404
    if isinstance(exc, OperatorDenied):
        return errors.DENIED_BY_OPERATOR.code
    return errors.BAD_REQUEST.code


def error_message(exc: Exception) -> str:
    """What an administration command prints on stderr for an error of the service (exit status 1)."""
    message = exc.message if isinstance(exc, (AddressError, DestinationRejected)) else str(exc)
    return coded(message, error_code(exc))
