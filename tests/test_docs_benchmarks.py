"""No figure in the docs without its benchmark page: each row of README's headline results links
a page of docs/benchmarks/ that holds the row's figures, and each suite's page names the command
of a suite that exists (`manage.py bench SUITE`, or `manage.py simulate` for the simulator's)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from bench import SUITE_MODULES
from bench.registry import suites

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "docs" / "benchmarks"
# Pages about the suites as a whole, not one suite's figures.
NOT_A_SUITE = {"index.md", "journal.md"}
LINK = re.compile(r"\]\((docs/benchmarks/[\w-]+\.md)\)")
# A figure: a number of two characters or more (62,925 · 4.41 · 0.60 · 503), as pages write it.
FIGURE = re.compile(r"(?<![\w.,])\d[\d,.]*\d")
COMMAND = re.compile(r"manage\.py (bench ([\w-]+)|simulate)\b")


def headline_rows() -> list[tuple[str, str, str]]:
    """README's headline results as (what, result, page) cells."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("## Headline results")
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("| what |"))
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        what, result, page = (cell.strip() for cell in line.strip().strip("|").split(" | "))
        rows.append((what, result, page))
    return rows


def registered() -> set[str]:
    for module in SUITE_MODULES:
        importlib.import_module(f"bench.{module}")
    return set(suites())


ROWS = headline_rows()


def test_readme_has_headline_results() -> None:
    assert len(ROWS) >= 10


@pytest.mark.parametrize(("what", "result", "page"), ROWS, ids=[row[0] for row in ROWS])
def test_each_headline_links_a_benchmark_page_holding_its_figures(
    what: str, result: str, page: str
) -> None:
    linked = LINK.findall(page)

    assert len(linked) == 1, page
    path = ROOT / linked[0]
    assert path.is_file()
    assert path.name not in NOT_A_SUITE
    text = path.read_text()
    missing = [figure for figure in FIGURE.findall(result) if figure not in text]
    assert missing == [], f"{what}: {missing} not on {linked[0]}"


SUITE_PAGES = sorted(path for path in BENCHMARKS.glob("*.md") if path.name not in NOT_A_SUITE)


@pytest.mark.parametrize("path", SUITE_PAGES, ids=[path.name for path in SUITE_PAGES])
def test_each_suite_page_names_the_command_of_a_suite_that_exists(path: Path) -> None:
    commands = COMMAND.findall(path.read_text())

    assert commands != []
    assert {suite for _, suite in commands if suite} <= registered()


def test_every_suite_has_its_page() -> None:
    named = {
        suite for path in SUITE_PAGES for _, suite in COMMAND.findall(path.read_text()) if suite
    }

    assert registered() <= named


MENTION = re.compile(r"\bbench ([a-z][\w-]*)")
OTHER_PAGES = sorted(
    path
    for path in (ROOT / "docs").rglob("*.md")
    if BENCHMARKS not in path.parents and MENTION.search(path.read_text())
)


def suite_pages() -> dict[str, str]:
    """Each suite's name and the page (docs/benchmarks/NAME.md) that names its command."""
    return {
        suite: path.name
        for path in SUITE_PAGES
        for _, suite in COMMAND.findall(path.read_text())
        if suite
    }


@pytest.mark.parametrize(
    "path", OTHER_PAGES, ids=[str(path.relative_to(ROOT / "docs")) for path in OTHER_PAGES]
)
def test_a_page_that_cites_a_suite_links_its_benchmark_page(path: Path) -> None:
    # A figure quoted from a suite outside docs/benchmarks/ sends the reader to the page that
    # holds its command, its baseline and the machine.
    text = path.read_text()
    pages = suite_pages()
    cited = {suite for suite in MENTION.findall(text) if suite in pages}

    assert cited != set()
    assert [suite for suite in sorted(cited) if f"benchmarks/{pages[suite]}" not in text] == []
