"""A file's SHA-256, read in chunks: how the model store pins its downloads and how the int8 copies
are keyed (`vcamd.modelstore`, `vcamd.inference.int8cache`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

READ_BYTES = 1 << 20
"""One read while hashing: a 554 MB model never sits in memory whole."""


def sha256_file(path: Path) -> str:
    """The file's SHA-256 as 64 lowercase hex digits."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
