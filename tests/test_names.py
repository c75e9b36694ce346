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


def test_an_operations_module_is_a_table_of_declared_routes() -> None:
    # "operations" is the OpenAPI sense (receiver.apispec.Operation): what the gateway does with an admitted
    # call is its forwarding, what the simulator plays is the capability layer's capabilities.
    named = sorted(
        path.relative_to(ROOT).as_posix() for package in PACKAGES for path in (ROOT / package).rglob("*operations.py")
    )
    assert named == [
        "receiver/console/destination_routes.py",
        "receiver/console/onboarding_routes.py",
        "receiver/console/routes.py",
    ]
    for path in named:
        assert "Operation" in (ROOT / path).read_text(), path
