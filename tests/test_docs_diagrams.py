"""The docs' Mermaid diagrams reach the site as diagrams: each ```mermaid fence of a page is
rendered, with the site's own Markdown configuration (mkdocs.yml), into the block the theme draws,
and the concepts page draws the concepts it explains."""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest
from mkdocs.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```mermaid\s*$", re.MULTILINE)
DIAGRAM = re.compile(r'<pre class="mermaid"><code>(\w+)')
PAGES = sorted(path for path in DOCS.rglob("*.md") if FENCE.search(path.read_text()))


def render(path: Path) -> str:
    """The page's HTML as the site's Markdown extensions make it."""
    config = load_config(str(ROOT / "mkdocs.yml"))
    html: str = markdown.markdown(
        path.read_text(),
        extensions=config["markdown_extensions"],
        extension_configs=config["mdx_configs"],
    )
    return html


def test_pages_with_diagrams_are_found() -> None:
    assert DOCS / "getting-started" / "concepts.md" in PAGES


@pytest.mark.parametrize("path", PAGES, ids=[str(path.relative_to(DOCS)) for path in PAGES])
def test_every_mermaid_fence_becomes_a_diagram_block(path: Path) -> None:
    fences = len(FENCE.findall(path.read_text()))

    assert len(DIAGRAM.findall(render(path))) == fences


def test_the_concepts_page_draws_a_gang_a_cohort_a_reservation_and_fragmentation() -> None:
    html = render(DOCS / "getting-started" / "concepts.md")
    kinds = DIAGRAM.findall(html)
    diagrams = html.split('<pre class="mermaid">')[1:]

    assert {"flowchart", "sequenceDiagram", "gantt"} <= set(kinds)
    for drawn in ("gang", "reclaim", "reservation", "too few"):
        assert [text for text in diagrams if drawn in text.split("</pre>")[0]] != [], drawn
