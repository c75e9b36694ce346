"""The README: a newcomer's ten minutes, opening with the two commands that work on a fresh machine."""

from __future__ import annotations

import re

from tests.docs.markdown import DOCS, ROOT, links

README = ROOT / "README.md"
START = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/svcgw up --demo"
TESTS = "bash .ci/run"
# About ten minutes of reading; what is longer belongs on a page of docs/.
MOST_LINES = 250


def test_the_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    before_first_section = text.split("\n## ", 1)[0]
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", before_first_section, flags=re.M | re.S)
    assert [block.strip() for block in blocks[:2]] == [START, TESTS]
    assert (ROOT / ".ci" / "run").is_file()


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= MOST_LINES


def test_the_readme_links_every_page_of_docs() -> None:
    linked = {link.resolved()[0] for link in links(README) if not link.external}
    assert {page.name for page in DOCS.glob("*.md") if page not in linked} == set()
    assert ROOT / "deploy" / "README.md" in linked
