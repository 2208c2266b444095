"""docs/reliability.md is what a user and a maintainer read today: short (≤ 300 lines), every test,
benchmark and module it names exists, and every passage the code and the other docs point at by its
title (`docs/reliability.md, "A newcomer beside a tracked face"`) is still on the page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
MAX_LINES = 300

PATH = re.compile(r"`((?:tests|benchmarks|vcamd)/[A-Za-z0-9_./-]+?)(?:::[^`]*)?`")
# A pointer: reliability.md, then within a few characters a quoted title (it may run over a line break).
POINTER = re.compile(r"reliability\.md`?,?\s*\(?\"([^\"]{4,120})\"")
SOURCES = ("vcamd", "tests", "benchmarks", "docs")


def _flat(text: str) -> str:
    """Line breaks, comment marks and runs of spaces read as one space; case ignored."""
    return re.sub(r"\s+", " ", re.sub(r"\n\s*#?\s*", " ", text)).lower()


def _pointers() -> list[tuple[str, str]]:
    found = []
    files = [p for folder in SOURCES for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md"}]
    for path in [*files, ROOT / "README.md"]:
        if path in (DOC, Path(__file__).resolve()) or ".venv" in path.parts:
            continue
        for title in POINTER.findall(_flat(path.read_text(encoding="utf-8"))):
            found.append((str(path.relative_to(ROOT)), title))
    return found


def test_the_page_is_short() -> None:
    assert len(DOC.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_every_path_it_names_exists() -> None:
    named = set(PATH.findall(DOC.read_text(encoding="utf-8")))
    assert named, "the page names its tests"
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_every_passage_pointed_at_is_on_the_page() -> None:
    pointers = _pointers()
    assert len(pointers) >= 5, pointers  # the code points at the page: the pattern must find those pointers
    page = _flat(DOC.read_text(encoding="utf-8"))
    assert [(where, title) for where, title in pointers if title.strip() not in page] == []
