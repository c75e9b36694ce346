"""The one error table and the one exception tree of ``svcgw.errors``."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import receiver
import svcgw
import worker
from receiver import plaincodes as plain_codes
from receiver.console import codes as console_codes
from receiver.endpoint import codes as receiver_codes
from receiver.gateway import codes as gateway_codes
from svcgw import errors
from svcgw.errors import ErrorKind, Failure, GatewayError, Missing, NotFound, Refusal, Rejected, Rows, SvcgwError

ROOT = Path(svcgw.__file__).parent.parent
EVERY_KIND: tuple[ErrorKind, ...] = (
    *gateway_codes.ALL_KINDS,
    *receiver_codes.RECEIVER_KINDS,
    *console_codes.CONSOLE_KINDS,
    *plain_codes.PLAIN_KINDS,
)


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
                    inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__  # type: ignore[attr-defined]
                ):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


# Exceptions that must stay what a library expects, raised and caught inside one module.
OUTSIDE_THE_TREE = {
    "svcgw.callbacks.outbound._ForbiddenAddress",  # an OSError for aiohttp's connector, turned into Refused
    "svcgw.callbacks.outbound.DestinationRefused",  # an aiohttp connection error, turned into Refused
    # Raised inside redis-py's Cluster pipeline in place of its reset, and caught by the pipeline around it.
    "svcgw.shards.connections._NotAgain",
}


@pytest.mark.parametrize("kind", EVERY_KIND, ids=lambda kind: f"{kind.code}/{kind.status}")
def test_every_row_has_a_code_an_http_status_and_a_message(kind: ErrorKind) -> None:
    assert isinstance(kind.code, int) and kind.code != 0
    assert 400 <= kind.status <= 599
    assert kind.message and kind.message == kind.message.strip()


def test_a_refusal_carries_its_row_its_message_and_its_headers() -> None:
    refusal = GatewayError(gateway_codes.RATE_LIMITED, headers={"Retry-After": "3"})
    assert (refusal.code, refusal.status, refusal.message) == (-42900, 429, gateway_codes.RATE_LIMITED.message)
    assert refusal.headers == {"Retry-After": "3"}
    told = GatewayError(gateway_codes.NOT_FOUND, "no such thing")
    assert str(told) == told.message == "no such thing"
    assert repr(told) == "GatewayError(-40404, 'no such thing')"


def test_the_core_holds_the_tree_and_no_surfaces_codes() -> None:
    # Each surface's rows live next to it (receiver.gateway.codes, ...); the JSON body is receiver.http's.
    assert [name for name, value in vars(errors).items() if isinstance(value, ErrorKind)] == []
    assert not hasattr(errors, "error_body") and "orjson" not in vars(errors)


def test_every_exception_of_the_service_is_under_the_one_root() -> None:
    outside = {
        name
        for name, cls in _own_exceptions().items()
        if not issubclass(cls, SvcgwError) and name not in OUTSIDE_THE_TREE
    }
    assert outside == set()


def test_the_branches_keep_the_builtin_bases_callers_catch() -> None:
    from receiver.console.qrattempt import AttemptGone
    from receiver.console.web import ConsoleHTTPError, RateLimited
    from receiver.http import BodyTooLarge, ConflictingKeys
    from svcgw.callbacks.addresses import AddressError
    from svcgw.callbacks.outbound import SendError
    from svcgw.intake.ingest import ReplicaNotConfirmed, UnknownReceiver
    from svcgw.upstream import UpstreamError
    from svcgw.vault import VaultError

    assert issubclass(ConsoleHTTPError, Refusal) and issubclass(RateLimited, ConsoleHTTPError)
    assert issubclass(GatewayError, Refusal)
    assert issubclass(AddressError, Rejected) and issubclass(AddressError, ValueError)
    assert issubclass(BodyTooLarge, Rejected) and issubclass(ConflictingKeys, Rejected)
    for missing in (NotFound, UnknownReceiver, AttemptGone):
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


def _callers_of(function: str) -> set[str]:
    """The modules of the HTTP role that call ``function``."""
    return {
        str(path.relative_to(ROOT))
        for path in (ROOT / "receiver").rglob("*.py")
        if any(
            isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == function
            for node in ast.walk(ast.parse(path.read_text()))
        )
    }


def test_each_surface_answers_errors_in_one_place() -> None:
    receiver_dir = ROOT / "receiver"
    # The gateway: one clause, for the direct path, the routes and invoke, hands its table's classes to refused.
    assert _handlers_of(receiver_dir / "gateway" / "handlers.py", ("ROWS.classes",)) == 1
    # The receiver: one clause, on its one route.
    assert _handlers_of(receiver_dir / "endpoint" / "receive.py", ("ROWS.classes",)) == 1
    # The console's JSON API catches none of what it answers: its mount's handler does (receiver.console.answers).
    answered = ("ConsoleHTTPError", "ConsoleError", "NotFound", "AddressError", "RedisError", "STORAGE_ERRORS")
    assert _handlers_of(receiver_dir / "console" / "api.py", answered) == 0
    # The bodies of error answers are built by the renderers alone (the path guard runs before routing),
    # and by the pure ASGI cap on bodies sent before signing in, which answers before any route runs.
    assert _callers_of("answer_body") == {"receiver/http.py", "receiver/console/answers.py", "receiver/console/web.py",
                                          "receiver/openbodies.py"}  # fmt: skip
    assert _callers_of("refusal_response") == {
        "receiver/gateway/refusals.py",
        "receiver/endpoint/receive.py",
        "receiver/gateway/paths.py",
    }
    assert _callers_of("plain_answer") == {"receiver/http.py", "receiver/dashboard.py"}
    # The CLI: every administration command through admin_command, every bad setting through the group.
    assert _handlers_of(ROOT / "cli" / "context.py", ("SvcgwError",)) == 1
    assert _handlers_of(ROOT / "cli" / "main.py", ("SettingsError",)) == 1


def test_one_class_says_a_thing_was_not_found() -> None:
    named = {name for name, cls in _own_exceptions().items() if cls.__name__ == "NotFound"}
    assert named == {"svcgw.errors.NotFound"}
    missing = NotFound("no dead letter 'x'", what="dead letter")
    assert (str(missing), missing.what) == ("no dead letter 'x'", "dead letter")
    assert isinstance(missing, Missing) and isinstance(missing, LookupError)


class _Base(Exception):
    pass


class _Child(_Base):
    pass


def test_a_table_finds_the_nearest_row_along_the_class_hierarchy() -> None:
    rows: Rows[str] = Rows({_Base: lambda exc: "base", (_Child, KeyError): lambda exc: f"child {exc}"})
    assert rows.classes == (_Base, _Child, KeyError)
    assert rows.answer(_Base()) == "base"
    assert rows.answer(_Child("x")) == "child x"
    assert rows.answer(KeyError("k")) == "child 'k'"
    lost = ValueError("no row")
    with pytest.raises(ValueError) as raised:
        rows.answer(lost)  # caught by mistake: raised again, a bug and not an answer
    assert raised.value is lost


def test_the_cli_words_an_address_error_with_its_code() -> None:
    from cli.context import error_message
    from svcgw.callbacks.addresses import AddressError

    assert error_message(AddressError(-40012, "that is our own address")) == "that is our own address (code -40012)"
    assert error_message(errors.Missing("no such account")) == "no such account (code -40404)"
    assert error_message(errors.NotFound("no destination 'x'", what="destination")) == (
        "no destination 'x' (code -40404)"
    )
    assert error_message(ValueError("a bad value")) == "a bad value (code -40000)"
    from svcgw.registry.accounts import OperatorDenied

    assert error_message(OperatorDenied(["message/sendText"])).endswith("(code -40320)")


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


def test_each_exception_name_is_defined_once() -> None:
    # One name, one concept: a second class of the same name is either the same thing (import it) or another.
    by_name: dict[str, list[str]] = {}
    for qualified, cls in _own_exceptions().items():
        by_name.setdefault(cls.__name__, []).append(qualified)
    assert {name: where for name, where in by_name.items() if len(where) > 1} == {}
