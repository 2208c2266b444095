"""Int8 copies of the user's model files, kept beside the optimised graphs (`vcamd.inference.ortcache`) and
keyed by the model file's SHA-256, with the fidelity check's verdict on each.

Keyed by content, not by path: a model moved, renamed or pulled again to another folder finds its
copy; a model file that changed (another export under the same name) gets a copy of its own. The
key also holds how the copy is built (`int8recipes.build_key`: the recipes, the check's thresholds,
the ONNX Runtime version, 7- or 8-bit weights), so a copy is never used under rules it was not
checked by. A copy that failed the check is kept as its verdict alone (no model), so a start does
not build it again; a new key (another ONNX Runtime, other thresholds) tries again.

Hashing a 554 MB model takes seconds, so a start never hashes: each model file's SHA-256 is
remembered with the file's identity when the copy is built (`vcamd.inference.modelhashes`, the one home
of those records, shared with the source photo's kept face), and a start looks it up by that
identity (a changed file is unknown until it is hashed again, by its next build).

Where: `<optimised-graph cache>/int8/` (`~/.cache/facelive/optimized/int8` on Linux; it follows
`$VCAMD_CACHE_DIR`), 0600 files in 0700 folders:

    <sha256>.<build key>.onnx   the copy (only when it passed)
    <sha256>.<build key>.json   the verdict: passed, summary, the figures, the recipe, when
    <sha256>.lock               one build per model file at a time (several daemons, `vcamd models quantize`)

Everything here fails soft: a cache that cannot be read is "not built", one that cannot be
written leaves the float model serving (logged), never an error of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vcamd.inference.fidelity import Verdict

log = logging.getLogger(__name__)


def folder() -> Path:
    from vcamd.inference.ortcache import cache_dir

    return cache_dir() / "int8"


@dataclass(frozen=True, slots=True)
class Entry:
    """Where the int8 copy of one model file (by content) under one build key lives."""

    sha256: str
    key: str

    @property
    def model(self) -> Path:
        return folder() / f"{self.sha256}.{self.key}.onnx"

    @property
    def verdict_file(self) -> Path:
        return folder() / f"{self.sha256}.{self.key}.json"


@dataclass(frozen=True, slots=True)
class Kept:
    """An entry's verdict, and its copy when the copy passed."""

    verdict: Verdict
    model: Path | None
    record: dict[str, Any]


def _ours() -> bool:
    """Whether the cache folder is the user's and no other user can write to it: a copy (or a passed
    verdict) another local user put there is never loaded — the detector's copy decides which faces
    get covered. Said in the log; the float models serve then."""
    from vcamd.files.private_files import check_private_dir

    try:
        check_private_dir(folder())
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("the int8 cache %s is not private (%s): its copies are not used", folder(), exc)
        return False
    return True


def read(entry: Entry) -> Kept | None:
    """The entry's verdict (and its copy, whole, when it passed); None when there is none, or when
    the cache folder is not the user's own (`_ours`)."""
    if not _ours():
        return None
    try:
        record = json.loads(entry.verdict_file.read_text(encoding="utf-8"))
        verdict = Verdict(passed=bool(record["passed"]), summary=str(record["summary"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not verdict.passed:
        return Kept(verdict, None, record)
    try:
        whole = entry.model.stat().st_size == record.get("model_size")
    except OSError:
        whole = False
    return Kept(verdict, entry.model, record) if whole else None


def lookup(model: Path, key: str) -> Kept | None:
    """What is kept for this model file under `key`, found without hashing the file; None: not built
    (or the file changed since, or its hash was never remembered)."""
    from vcamd.inference.modelhashes import known_sha256

    sha = known_sha256(model)
    return read(Entry(sha, key)) if sha is not None else None


def record(entry: Entry, passed: bool, summary: str, details: dict[str, Any], built: Path | None) -> Kept:
    """Keep a build's verdict (and, when it passed, move the copy `built` into place first: the
    verdict file marks a complete entry)."""
    from vcamd.files.private_files import private_dir, write_private_atomic

    private_dir(entry.model.parent)
    size = None
    if passed:
        if built is None:
            raise ValueError("a passed verdict needs its copy")
        os.replace(built, entry.model)
        os.chmod(entry.model, 0o600)
        size = entry.model.stat().st_size
    elif built is not None:
        with contextlib.suppress(OSError):
            built.unlink()
        with contextlib.suppress(OSError):
            entry.model.unlink()
    data = {"passed": passed, "summary": summary, "model_size": size, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "sha256": entry.sha256, "key": entry.key} | details
    write_private_atomic(entry.verdict_file, json.dumps(data, indent=1) + "\n")
    return Kept(Verdict(passed, summary), entry.model if passed else None, data)


@contextlib.contextmanager
def build_lock(sha256: str) -> Iterator[None]:
    """One build of a model file's copy at a time, across processes (waits for another's; Windows:
    no advisory locks, builds may overlap and the last one's verdict stays)."""
    from vcamd.files.private_files import open_private_fd, private_dir

    try:
        import fcntl
    except ImportError:
        yield
        return
    private_dir(folder())
    fd = open_private_fd(folder() / f"{sha256}.lock", os.O_WRONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)

