"""The repository's Markdown pages as the tests of ``docs/`` read them: headings, anchors and links.

An anchor is the one GitHub gives a heading: its text in lower case, without the characters that
are neither letters, digits, ``_``, ``-`` nor spaces, its spaces made ``-``; a repeated one gets
``-1``, ``-2``... Fenced code is not Markdown: a ``# comment`` in a shell block is no heading, and a
``[x](y)`` in it is no link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the text may run over lines and hold inline code.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def pages() -> list[Path]:
    """Every Markdown page a reader of the repository follows links between."""
    found = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "deploy" / "README.md"]
    found += sorted((ROOT / "verify").glob("*/README.md"))
    return found


def prose(text: str) -> list[str]:
    """The page's lines, each line of fenced code replaced by an empty one (numbers stay right)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every heading outside fenced code."""
    found = []
    for line in prose(text):
        match = _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, heading in headings(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str

    @property
    def external(self) -> bool:
        return re.match(r"^[a-z][a-z0-9+.-]*:", self.target) is not None

    def resolved(self) -> tuple[Path, str]:
        """The file the link points at (its own page for ``#anchor``), and the anchor ('' for none)."""
        path, _, anchor = self.target.partition("#")
        return ((self.page.parent / path).resolve() if path else self.page), anchor

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.target}"


def links(page: Path) -> list[Link]:
    """Every link and image of the page outside code, with the line it starts on."""
    text = "\n".join(_CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line) for line in prose(page.read_text()))
    return [Link(page, text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _LINK.finditer(text)]


def table_rows(lines: list[str]) -> list[list[str]]:
    """The cells of each table row among ``lines``, header and separator rows included."""
    rows = [line.strip() for line in lines if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip("|"))] for row in rows]
