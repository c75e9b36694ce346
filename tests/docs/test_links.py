"""Every link between the repository's pages leads somewhere, and every page links to the figures' one source."""

from __future__ import annotations

from pathlib import Path

from tests.docs.markdown import DOCS, ROOT, Link, anchors, links, pages, slug

FIGURES = DOCS / "performance.md"
FIGURES_ANCHOR = "the-figures-to-plan-with"


def _broken(link: Link) -> str | None:
    path, anchor = link.resolved()
    if not path.exists():
        return "no such file"
    if anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
        return f"no heading #{anchor} in {path.relative_to(ROOT)}"
    return None


def test_every_link_between_pages_leads_to_a_file_and_heading_that_exist() -> None:
    checked = [link for page in pages() for link in links(page) if not link.external]
    assert len(checked) > 100  # the parser finds the pages' links
    broken = {str(link): why for link in checked if (why := _broken(link)) is not None}
    assert broken == {}


def test_a_broken_link_or_anchor_is_found() -> None:
    page = DOCS / "settings.md"
    assert _broken(Link(page, 1, "shards.md#no-such-heading")) is not None
    assert _broken(Link(page, 1, "no-such-page.md")) == "no such file"
    assert _broken(Link(page, 1, "#no-such-heading")) is not None
    assert _broken(Link(page, 1, "shards.md#one-redis-and-its-settings")) is None


def test_anchors_are_githubs() -> None:
    assert slug("Fair pairs: the append-only file's rewrite, five pairs, compiled modules") == (
        "fair-pairs-the-append-only-files-rewrite-five-pairs-compiled-modules"
    )
    assert slug("How it is measured (`tests/bench/gateway.py`)") == "how-it-is-measured-testsbenchgatewaypy"
    assert slug("The service's checks, in order") == "the-services-checks-in-order"
    text = "# A\n\n## Twice\n\n```sh\n# not a heading\n```\n\n## Twice\n"
    assert anchors(text) == {"a", "twice", "twice-1"}


def _links_to_the_figures(page: Path) -> bool:
    return any(link.resolved() == (FIGURES, FIGURES_ANCHOR) for link in links(page) if not link.external)


def test_every_page_links_to_the_figures_one_source() -> None:
    # The verify/ packages' READMEs travel with their packages, where docs/ is not.
    quoting = [page for page in pages() if page != FIGURES and not page.is_relative_to(ROOT / "verify")]
    assert ROOT / "README.md" in quoting and DOCS / "settings.md" in quoting
    assert [str(page.relative_to(ROOT)) for page in quoting if not _links_to_the_figures(page)] == []
    assert FIGURES_ANCHOR in anchors(FIGURES.read_text())
