"""docs/architecture.md is the newcomer's map of `vcamd/`: every module has its line there, and every
file it names exists (a module moved or removed leaves no stale pointer behind).

A name is read the way a reader reads it: a path from the repository's root as is, `live/frames.py`
under `vcamd/`, and a bare `name.py` in the package of the section that lists it (a "### `vcamd/pkg/`"
heading, or a line that opens with a subpackage such as `live/capture/`). A package's heading is the
line of its `__init__.py`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
MAX_LINE = 110

NAME = re.compile(r"`([A-Za-z0-9_./-]+(?:\.py|\.toml|\.md|/))`")
PACKAGE_HEADING = re.compile(r"^###\s+`(vcamd/[A-Za-z0-9_/]*)`")
SUBPACKAGE_LINE = re.compile(r"^`([a-z_]+/[a-z_/]+/)`")


def _resolve(token: str, package: Path) -> Path | None:
    """The file or folder `token` names from within `package`, or None when none exists."""
    if "/" in token.rstrip("/"):
        candidates = [ROOT / token, ROOT / "vcamd" / token, package / token]
    else:
        candidates = [package / token, ROOT / token, ROOT / "vcamd" / token]
    return next((c for c in candidates if c.exists()), None)


def _named() -> tuple[set[Path], list[str]]:
    """(every path the page names, the names that point at nothing)."""
    named: set[Path] = set()
    missing: list[str] = []
    package = ROOT / "vcamd"
    for n, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            package = ROOT / "vcamd"
        if m := PACKAGE_HEADING.match(line):
            package = ROOT / m.group(1)
        elif m := SUBPACKAGE_LINE.match(line):
            package = ROOT / "vcamd" / m.group(1)
        for token in NAME.findall(line):
            if "NAME" in token:  # a placeholder: `vcamd/sinks/NAME.py`
                continue
            path = _resolve(token, package)
            if path is None:
                missing.append(f"line {n}: {token}")
            else:
                named.add(path.resolve())
                if path.is_dir():
                    named.add((path / "__init__.py").resolve())
    return named, missing


def test_every_name_on_the_page_exists() -> None:
    _, missing = _named()
    assert missing == []


def test_every_module_has_its_line() -> None:
    named, _ = _named()
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "vcamd").rglob("*.py"))
    assert [m for m in modules if (ROOT / m).resolve() not in named] == []


def test_lines_fit_the_page() -> None:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    assert [n for n, line in enumerate(lines, 1) if len(line) > MAX_LINE] == []
