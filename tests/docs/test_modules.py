"""docs/modules.md maps the tree as it is: every package has its section, every module its row, and no more."""

from __future__ import annotations

import re

from tests.docs.markdown import DOCS, ROOT, prose, table_rows

PACKAGES = ("svcgw", "receiver", "worker", "cli", "simulator")
MAP = DOCS / "modules.md"
# A heading that names a package: ## `svcgw/`, ### `receiver/console/`.
_PACKAGE_HEADING = re.compile(r"^#{2,6}\s+`([a-z_/]+)/`\s*$")


def tree() -> dict[str, set[str]]:
    """Each package (``receiver/console``) and the names of its modules (``__init__`` aside)."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            folder = init.parent
            name = folder.relative_to(ROOT).as_posix()
            found[name] = {path.stem for path in folder.glob("*.py") if path.name != "__init__.py"}
    return found


def mapped(text: str) -> dict[str, set[str]]:
    """Each package section of the map and the module names in the first column of its tables."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in prose(text):
        match = _PACKAGE_HEADING.match(line)
        if match and match.group(1).split("/")[0] in PACKAGES:
            current = match.group(1)
            sections[current] = []
        elif match or re.match(r"^#{1,2}\s", line):
            current = None  # a section of another kind: verify/'s, or the page's own
        elif current is not None:
            sections[current].append(line)
    found: dict[str, set[str]] = {}
    for package, lines in sections.items():
        rows = table_rows(lines)
        found[package] = {m for row in rows for m in re.findall(r"^`([A-Za-z_][A-Za-z0-9_]*)`$", row[0])}
    return found


def test_every_package_and_module_is_in_the_map_and_nothing_else() -> None:
    actual, listed = tree(), mapped(MAP.read_text())
    assert {"svcgw", "receiver/console", "cli"} <= actual.keys()
    assert sorted(actual.keys() - listed.keys()) == [], "packages without a section"
    missing = {package: sorted(actual[package] - listed.get(package, set())) for package in actual}
    stale = {package: sorted(listed[package] - actual.get(package, set())) for package in listed}
    assert {package: names for package, names in missing.items() if names} == {}, "modules not in the map"
    assert {package: names for package, names in stale.items() if names} == {}, "in the map, not in the tree"


def test_a_module_missing_or_stale_is_found() -> None:
    text = "## `svcgw/`\n\n### Concept\n\n| module | what | role |\n|---|---|---|\n| `errors` | names | all |\n"
    text += "## `verify/`\n\n| folder | what |\n|---|---|\n| `python/` | x |\n"
    assert mapped(text) == {"svcgw": {"errors"}}
    assert "logs" in tree()["svcgw"] - mapped(text)["svcgw"]
    assert mapped(text.replace("`errors`", "`clusterspace`"))["svcgw"] - tree()["svcgw"] == {"clusterspace"}
