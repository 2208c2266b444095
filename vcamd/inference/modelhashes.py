"""Model files' SHA-256, remembered by the file's identity: the one home of the hashes that every cache
keyed by a model's content reads (the int8 copies, `vcamd.inference.int8cache`; the source photo's
kept face, `vcamd.faces.source_cache`).

Hashing a 554 MB model takes seconds, so a start never hashes: each model file's SHA-256 is
remembered with the file's identity (resolved path, size, modification time) when something is
first kept for it, and looked up by that identity later (a changed file is unknown until it is
hashed again).

Where: `<optimised-graph cache>/hashes/` (`~/.cache/facelive/optimized/hashes` on Linux; it follows
`$VCAMD_CACHE_DIR`), one `<path id>.json` per model file, 0600 files in a 0700 folder. Records an
older vcamd kept in `int8/hashes/` and `faces/hashes/` are still read (never written): a start after
the update finds them without hashing. A record that cannot be written is logged, never an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LEGACY = ("int8/hashes", "faces/hashes")
"""Where records were kept before they had one home (read, never written)."""


def folder() -> Path:
    from vcamd.inference.ortcache import cache_dir

    return cache_dir() / "hashes"


def _identity(model: Path) -> dict[str, Any]:
    st = model.stat()
    return {"model": str(model), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _record_name(model: Path) -> str:
    return f"{hashlib.sha256(str(model).encode()).hexdigest()[:24]}.json"


def known_sha256(model: Path) -> str | None:
    """The SHA-256 remembered for this model file, if the file is unchanged since (never hashes)."""
    from vcamd.inference.ortcache import cache_dir

    model = model.expanduser().resolve()
    try:
        identity = _identity(model)
    except OSError:
        return None
    for records in (folder(), *(cache_dir() / old for old in LEGACY)):
        try:
            recorded = json.loads((records / _record_name(model)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        sha = recorded.get("sha256") if isinstance(recorded, dict) and recorded.get("identity") == identity else None
        if isinstance(sha, str) and len(sha) == 64:
            return sha
    return None


def sha256_of(model: Path) -> str:
    """The model file's SHA-256: remembered (`known_sha256`), or hashed now (seconds for 554 MB) and remembered."""
    from vcamd.files.digests import sha256_file
    from vcamd.files.private_files import private_dir, write_private_atomic

    model = model.expanduser().resolve()
    known = known_sha256(model)
    if known is not None:
        return known
    identity = _identity(model)
    sha = sha256_file(model)
    if _identity(model) != identity:  # changed while it was read: this hash is of no file
        raise OSError(f"{model} changed while it was hashed")
    try:
        private_dir(folder())
        write_private_atomic(folder() / _record_name(model), json.dumps({"identity": identity, "sha256": sha}) + "\n")
    except OSError as exc:
        log.info("could not remember the SHA-256 of %s in %s: %s", model.name, folder(), exc)
    return sha
