"""The one error table and the one exception tree of ``svcgw.errors``."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
from pathlib import Path

import orjson
import pytest

import receiver
import svcgw
import worker
from svcgw import errors
from svcgw.errors import ErrorKind, Failure, GatewayError, Missing, Refusal, Rejected, SvcgwError

ROOT = Path(svcgw.__file__).parent.parent
EVERY_KIND: tuple[ErrorKind, ...] = (*errors.ALL_KINDS, *errors.RECEIVER_KINDS, *errors.CONSOLE_KINDS)


def _modules(package: object) -> list[object]:
    path = package.__path__  # type: ignore[attr-defined]
    prefix = package.__name__ + "."  # type: ignore[attr-defined]
    return [importlib.import_module(info.name) for info in pkgutil.walk_packages(path, prefix)]


@functools.cache
def _own_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class defined in the service's packages, by its qualified name."""
    found: dict[str, type[BaseException]] = {}
    for package in (svcgw, receiver, worker):
        for module in _modules(package):
            for value in vars(module).values():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == module.__name__  # type: ignore[attr-defined]
                ):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


# Exceptions that must stay what a library expects, raised and caught inside one module.
OUTSIDE_THE_TREE = {
    "svcgw.callbacks.outbound._ForbiddenAddress",  # an OSError for aiohttp's connector, turned into Refused
    "svcgw.callbacks.outbound.DestinationRefused",  # an aiohttp connection error, turned into Refused
}


@pytest.mark.parametrize("kind", EVERY_KIND, ids=lambda kind: f"{kind.code}/{kind.status}")
def test_every_row_has_a_code_an_http_status_and_a_message(kind: ErrorKind) -> None:
    assert isinstance(kind.code, int) and kind.code != 0
    assert 400 <= kind.status <= 599
    assert kind.message and kind.message == kind.message.strip()


def test_the_gateway_table_pairs_each_code_with_its_status_once() -> None:
    # One code may have two statuses only as the spec pairs them (-40402: 402 quota, 403 entitlement).
    pairs = {(kind.code, kind.status) for kind in errors.ALL_KINDS}
    assert len(pairs) == len(errors.ALL_KINDS)


def test_a_refusal_carries_its_row_its_message_and_its_headers() -> None:
    refusal = GatewayError(errors.RATE_LIMITED, headers={"Retry-After": "3"})
    assert (refusal.code, refusal.status, refusal.message) == (-42900, 429, errors.RATE_LIMITED.message)
    assert refusal.headers == {"Retry-After": "3"}
    told = GatewayError(errors.NOT_FOUND, "no such thing")
    assert str(told) == told.message == "no such thing"
    assert repr(told) == "GatewayError(-40404, 'no such thing')"


def test_the_body_of_a_row_is_code_message_and_null_data() -> None:
    assert orjson.loads(errors.error_body(-40404, "gone")) == {"code": -40404, "message": "gone", "data": None}


def test_every_exception_of_the_service_is_under_the_one_root() -> None:
    outside = {
        name
        for name, cls in _own_exceptions().items()
        if not issubclass(cls, SvcgwError) and name not in OUTSIDE_THE_TREE
    }
    assert outside == set()


def test_the_branches_keep_the_builtin_bases_callers_catch() -> None:
    from receiver.console.web import ConsoleHTTPError, RateLimited
    from receiver.http import BodyTooLarge, ConflictingKeys
    from svcgw.callbacks.addresses import AddressError
    from svcgw.callbacks.outbound import SendError
    from svcgw.delivery.deadletters import NotFound as DeadLetterNotFound
    from svcgw.intake.ingest import ReplicaNotConfirmed, UnknownReceiver
    from svcgw.registry.store import NotFound
    from svcgw.upstream import UpstreamError
    from svcgw.vault import VaultError

    assert issubclass(ConsoleHTTPError, Refusal) and issubclass(RateLimited, ConsoleHTTPError)
    assert issubclass(GatewayError, Refusal)
    assert issubclass(AddressError, Rejected) and issubclass(AddressError, ValueError)
    assert issubclass(BodyTooLarge, Rejected) and issubclass(ConflictingKeys, Rejected)
    for missing in (NotFound, DeadLetterNotFound, UnknownReceiver):
        assert issubclass(missing, Missing) and issubclass(missing, LookupError)
    for failure in (UpstreamError, SendError, VaultError):
        assert issubclass(failure, Failure) and not issubclass(failure, (Rejected, Refusal, Missing))
    from redis.exceptions import RedisError

    assert issubclass(ReplicaNotConfirmed, Failure) and issubclass(ReplicaNotConfirmed, RedisError)


def test_the_docstring_names_every_class_of_the_tree() -> None:
    doc = errors.__doc__ or ""
    for name, cls in _own_exceptions().items():
        if issubclass(cls, SvcgwError):
            assert cls.__name__ in doc, name


def test_the_core_imports_no_web_framework() -> None:
    for path in (ROOT / "svcgw").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in ("starlette", "fastapi", "uvicorn"), (path, name)


def _handlers_of(path: Path, names: tuple[str, ...]) -> int:
    """How many ``except`` clauses of a module catch any of ``names``."""
    return sum(
        1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ExceptHandler)
        and node.type is not None
        and any(name in ast.unparse(node.type) for name in names)
    )


def test_each_surface_maps_refusals_in_one_place() -> None:
    # The gateway: one clause turns a refusal or a storage failure into the answer (for HTTP and invoke).
    gateway = ROOT / "receiver" / "gateway"
    assert _handlers_of(gateway / "handlers.py", ("GatewayError", "RedisError")) == 1
    # The receiver: one clause, one mapping.
    assert _handlers_of(ROOT / "receiver" / "endpoint" / "receive.py", ("RedisError", "BodyTooLarge")) == 1
    # The console's JSON API: every handler's errors go through web.console_refusal, in one clause.
    assert _handlers_of(ROOT / "receiver" / "console" / "api.py", ("ConsoleHTTPError", "RedisError")) == 1
    # The CLI: every administration command through admin_command.
    assert _handlers_of(ROOT / "cli" / "context.py", ("SvcgwError",)) == 1


def test_the_cli_words_an_address_error_with_its_code() -> None:
    from cli.context import error_message
    from svcgw.callbacks.addresses import AddressError

    assert error_message(AddressError(-40012, "that is our own address")) == "that is our own address (code -40012)"
    assert error_message(errors.Missing("no such account")) == "no such account"


# One concept per module, split by concept and not by a count of lines: a module that holds one
# concept may well pass 400 lines. One past 600 almost surely holds two, and is looked at again.
MODULES = sorted(
    str(path.relative_to(ROOT))
    for package in ("svcgw", "receiver", "worker", "cli", "simulator")
    for path in (ROOT / package).rglob("*.py")
)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_of_the_service_is_over_600_lines(module: str) -> None:
    assert len((ROOT / module).read_text().splitlines()) <= 600
