"""docs/performance.md is what a user and a maintainer read today: short (≤ 300 lines), every script,
module and test it names exists, every file it links to is there, and every passage the code and
the other docs point at by its title (`docs/performance.md, "Cold start"`) is still on the page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
MAX_LINES = 300

# A path anywhere on the page, also inside a command (`.venv/bin/python benchmarks/steady.py`).
PATH = re.compile(r"(?<![\w./-])((?:tests|benchmarks|vcamd)/[A-Za-z0-9_/.-]+\.(?:py|sh|md))")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# A pointer: performance.md, then within a few characters a quoted title (it may run over a line
# break), and any further titles joined to it by "and" (`"An MJPG camera's decode" and "…"`).
POINTER = re.compile(r"performance\.md`?,?\s*\(?((?:\"[^\"]{4,120}\")(?:\s+and\s+\"[^\"]{4,120}\")*)")
TITLE = re.compile(r"\"([^\"]+)\"")
SOURCES = ("vcamd", "tests", "benchmarks", "docs")
TOP_FILES = ("README.md", "config.example.toml")


def _flat(text: str) -> str:
    """Line breaks, comment marks and runs of spaces read as one space; case ignored."""
    return re.sub(r"\s+", " ", re.sub(r"\n\s*#?\s*", " ", text)).lower()


def _pointers() -> list[tuple[str, str]]:
    found = []
    files = [p for folder in SOURCES for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md", ".toml"}]
    for path in [*files, *(ROOT / name for name in TOP_FILES)]:
        if path in (DOC, Path(__file__).resolve()) or ".venv" in path.parts or not path.is_file():
            continue
        for titles in POINTER.findall(_flat(path.read_text(encoding="utf-8"))):
            found.extend((str(path.relative_to(ROOT)), title) for title in TITLE.findall(titles))
    return found


def test_the_page_is_short() -> None:
    assert len(DOC.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_every_path_it_names_exists() -> None:
    named = set(PATH.findall(DOC.read_text(encoding="utf-8")))
    assert len(named) >= 10, named  # the page names its benchmarks and modules: the pattern must see them
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_every_file_it_links_to_exists() -> None:
    links = [link for link in LINK.findall(DOC.read_text(encoding="utf-8")) if "://" not in link]
    assert links, "the page links to models.md and its picture"
    assert sorted(link for link in links if not (DOC.parent / link).exists()) == []


def test_every_passage_pointed_at_is_on_the_page() -> None:
    pointers = _pointers()
    # The code and the docs point at a dozen passages: the pattern must find those pointers.
    assert len(pointers) >= 12, pointers
    page = _flat(DOC.read_text(encoding="utf-8"))
    assert [(where, title) for where, title in pointers if title.strip() not in page] == []


def test_the_pointer_pattern_reads_titles_over_line_breaks_and_joined_titles() -> None:
    """The pattern itself can fail: it reads a title split over a comment's lines and two titles
    joined by "and", and a page without them is caught."""
    text = '# see docs/performance.md, "The call\'s swapper built\n# to its cost"; `docs/performance.md`,\n"Cold start" and "Where the CPU goes".'
    titles = [t for group in POINTER.findall(_flat(text)) for t in TITLE.findall(group)]
    assert titles == ["the call's swapper built to its cost", "cold start", "where the cpu goes"]
    assert "cold start" not in _flat("## Warm start")
