"""docs/settings.md lists every variable the service reads, and only those; docs/testing.md the tests' own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.docs.markdown import DOCS, ROOT, table_rows

PACKAGES = ("svcgw", "receiver", "worker", "cli", "simulator")
NAME = r"SVCGW_[A-Z0-9_]*[A-Z0-9]"


def _sources() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))] + [
        ROOT / "deploy" / "healthcheck.py"
    ]


def read_by_the_code() -> set[str]:
    """Every variable the service's code names in a string: read, set for a child, or named in a message."""
    names: set[str] = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.update(re.findall(rf"\b{NAME}\b", node.value))
    return names


def named_by_the_deploy_files() -> set[str]:
    texts = [path.read_text() for path in (ROOT / "deploy").rglob("*") if path.is_file() and path.suffix != ".md"]
    return set(re.findall(rf"\b{NAME}\b", "\n".join(texts)))


def documented(page: Path) -> set[str]:
    """The variables of the first column of the page's tables."""
    names: set[str] = set()
    for row in table_rows(page.read_text().splitlines()):
        names.update(re.findall(rf"`({NAME})`", row[0]))
    return names


def test_every_variable_the_code_reads_is_in_the_settings_table() -> None:
    code = read_by_the_code()
    assert {"SVCGW_REDIS_URL", "SVCGW_REDIS_SHARDS", "SVCGW_SIM_PORT"} <= code  # settings, shardspec, cli
    assert sorted(code - documented(DOCS / "settings.md")) == []


def test_every_variable_of_the_deploy_files_is_in_the_settings_table() -> None:
    named = named_by_the_deploy_files()
    assert "SVCGW_ENCRYPTION_KEYS" in named
    assert sorted(named - documented(DOCS / "settings.md")) == []


def test_the_settings_table_lists_no_variable_the_code_does_not_read() -> None:
    assert sorted(documented(DOCS / "settings.md") - read_by_the_code()) == []


def test_a_variable_missing_from_the_table_is_found(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text("| variable | default | meaning |\n|---|---|---|\n| `SVCGW_HOST` | `127.0.0.1` | bind |\n")
    assert documented(page) == {"SVCGW_HOST"}
    assert "SVCGW_PORT" in read_by_the_code() - documented(page)


def test_every_variable_of_the_tests_is_in_the_testing_page() -> None:
    paths = [*(ROOT / "tests").rglob("*.py"), ROOT / ".ci" / "run", ROOT / ".ci" / "timed"]
    names = set(re.findall(r"\bSVCGW_TEST_[A-Z0-9_]*[A-Z0-9]\b", "\n".join(p.read_text() for p in paths)))
    assert "SVCGW_TEST_REQUIRE_TOOLS" in names
    assert sorted(names - documented(DOCS / "testing.md")) == []
