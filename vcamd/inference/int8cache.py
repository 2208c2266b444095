"""Int8 copies of the user's model files, kept beside the optimised graphs (`vcamd.inference.ortcache`) and
keyed by the model file's SHA-256, with the fidelity check's verdict on each.

Keyed by content, not by path: a model moved, renamed or pulled again to another folder finds its
copy; a model file that changed (another export under the same name) gets a copy of its own. The
key also holds how the copy is built (`int8recipes.build_key`: the recipes, the check's thresholds,
the ONNX Runtime version, 7- or 8-bit weights), so a copy is never used under rules it was not
checked by. A copy that failed the check is kept as its verdict alone (no model), so a start does
not build it again; a new key (another ONNX Runtime, other thresholds) tries again.

Hashing a 554 MB model takes seconds, so a start never hashes: each model file's SHA-256 is
remembered with the file's identity (resolved path, size, modification time) when the copy is
built, and a start looks it up by that identity (a changed file is unknown until it is hashed
again, by its next build). The source photo's kept face (`vcamd.faces.source_cache`) is keyed by model
hashes remembered the same way, in its own folder.

Where: `<optimised-graph cache>/int8/` (`~/.cache/facelive/optimized/int8` on Linux; it follows
`$VCAMD_CACHE_DIR`), 0600 files in 0700 folders:

    <sha256>.<build key>.onnx   the copy (only when it passed)
    <sha256>.<build key>.json   the verdict: passed, summary, the figures, the recipe, when
    <sha256>.lock               one build per model file at a time (several daemons, `vcamd models quantize`)
    hashes/<path id>.json       a model file's identity → its SHA-256

Everything here fails soft: a cache that cannot be read is "not built", one that cannot be
written leaves the float model serving (logged), never an error of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
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


def _identity(model: Path) -> dict[str, Any]:
    st = model.stat()
    return {"model": str(model), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _hash_record(model: Path, records: Path | None) -> Path:
    return (records or folder() / "hashes") / f"{hashlib.sha256(str(model).encode()).hexdigest()[:24]}.json"


def known_sha256(model: Path, records: Path | None = None) -> str | None:
    """The SHA-256 remembered for this model file, if the file is unchanged since (never hashes).
    `records`: the folder remembering them (default `<int8 folder>/hashes`; the source-face cache
    keeps its own, `vcamd.faces.source_cache`)."""
    model = model.expanduser().resolve()
    try:
        recorded = json.loads(_hash_record(model, records).read_text(encoding="utf-8"))
        identity = _identity(model)
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or recorded.get("identity") != identity:
        return None
    sha = recorded.get("sha256")
    return sha if isinstance(sha, str) and len(sha) == 64 else None


def sha256_of(model: Path, records: Path | None = None) -> str:
    """The model file's SHA-256: remembered (in `records`, as `known_sha256`), or hashed now (seconds
    for 554 MB) and remembered."""
    from vcamd.files.digests import sha256_file
    from vcamd.files.private_files import private_dir, write_private_atomic

    model = model.expanduser().resolve()
    known = known_sha256(model, records)
    if known is not None:
        return known
    identity = _identity(model)
    sha = sha256_file(model)
    if _identity(model) != identity:  # changed while it was read: this hash is of no file
        raise OSError(f"{model} changed while it was hashed")
    try:
        record = _hash_record(model, records)
        private_dir(record.parent)
        write_private_atomic(record, json.dumps({"identity": identity, "sha256": sha}) + "\n")
    except OSError as exc:
        log.info("could not remember the SHA-256 of %s in %s: %s", model.name, record.parent, exc)
    return sha


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


def read(entry: Entry) -> Kept | None:
    """The entry's verdict (and its copy, whole, when it passed); None when there is none."""
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

