"""Words that mean one thing: a class name the service uses names one class, not several."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGES = ("svcgw", "receiver", "worker", "cli", "simulator")


def _classes_named(name: str) -> list[str]:
    return sorted(
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == name
    )


def test_attempt_is_the_delivery_attempt_alone() -> None:
    # The read model's record, a sign-in's outcome and a QR login have names of their own.
    assert _classes_named("Attempt") == ["svcgw/delivery/attempt.py"]


def _modules(pattern: str) -> list[str]:
    return sorted(path.relative_to(ROOT).as_posix() for package in PACKAGES for path in (ROOT / package).rglob(pattern))


def test_a_console_routes_module_is_a_table_of_declared_routes() -> None:
    # "operation" is the gateway's sense alone (a module/action call); a table the router and
    # /openapi.json are made from is of routes (receiver.apispec.ApiRoute).
    assert _modules("*operations.py") == []
    named = [path for path in _modules("*routes.py") if path.startswith("receiver/console/")]
    assert named == [
        "receiver/console/account_routes.py",
        "receiver/console/apikey_routes.py",
        "receiver/console/denial_routes.py",
        "receiver/console/destination_routes.py",
        "receiver/console/history_routes.py",
        "receiver/console/instance_routes.py",
        "receiver/console/onboarding_routes.py",
        "receiver/console/routes.py",
    ]
    for path in named:
        assert "ConsoleRoute" in (ROOT / path).read_text(), path


def test_destination_is_a_further_destination_and_probe_an_instance_s_liveness() -> None:
    # An origin, the socket an attempt dials and the recipient a delivery goes to have words of their
    # own, as has the breaker that holds back a hanging origin's deliveries.
    assert _modules("*probing*.py") == []
    assert [path for path in _modules("*destinations.py") if not path.startswith("cli/")] == [
        "receiver/console/destinations.py",
        "svcgw/registry/destinations.py",
    ]
    for name in ("FailingDestination", "DestinationKeys", "DestinationSlots", "Destination"):
        assert _classes_named(name) == [], name
    # The console API's answer type keeps its name: it is a schema's name in /openapi.json.
    assert _classes_named("Probing") == ["receiver/console/schemas.py"]
