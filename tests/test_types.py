"""The type checker reads vcamd/: mypy, strict, on pyproject.toml's `[tool.mypy] files` less its
`exclude` (what is left out joins as it is brought to green, issue 40), passes; and
every `# type: ignore` in those modules names its error code and says why beside it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORE = re.compile(r"#\s*type:\s*ignore(\[[a-z-, ]+\])?")


def _checked_files() -> list[Path]:
    """The files mypy checks: those under `files`, less those an `exclude` pattern matches (mypy matches
    each against the path relative to the project, with forward slashes)."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    excluded = [re.compile(pattern) for pattern in settings.get("exclude", [])]
    files: list[Path] = []
    for entry in settings["files"]:
        path = ROOT / entry
        for found in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if not any(pattern.search(found.relative_to(ROOT).as_posix()) for pattern in excluded):
                files.append(found)
    return files


def _mypy_cache(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """mypy's incremental cache, kept between runs under the pytest cache (.pytest_cache/d/mypy):
    a second run re-checks only what changed (mypy compares each file's hash and the options with
    what the cache recorded). Without the pytest cache (`-p no:cacheprovider`), a fresh one."""
    cache = getattr(request.config, "cache", None)
    return tmp_path / "cache" if cache is None else cache.mkdir("mypy")


def test_mypy_is_green_on_the_checked_modules(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(_mypy_cache(request, tmp_path))],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_every_ignore_names_its_code_and_its_reason() -> None:
    files = _checked_files()
    assert len(files) >= 20
    bare = []
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            found = IGNORE.search(line)
            if found is None:
                continue
            reason_above = n > 0 and lines[n - 1].strip().startswith("#")
            if found.group(1) is None or not reason_above:
                bare.append(f"{path.relative_to(ROOT)}:{n + 1}")
    assert bare == []
