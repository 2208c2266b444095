"""One `vcamd models pull` per model at a time: an advisory lock file in the models dir."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from vcamd.common.errors import ModelError
from vcamd.modelstore.files import open_for_write
from vcamd.modelstore.manifest import ModelEntry


@contextlib.contextmanager
def pull_lock(entry: ModelEntry, lock_path: Path) -> Iterator[None]:
    """One pull per model at a time: two writers appending to one .part would corrupt it."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here; concurrent pulls are the user's risk
        yield
        return
    while True:
        handle = open_for_write(lock_path, truncate=False)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise ModelError(
                f"{entry.name}: another `vcamd models pull` is downloading it right now",
                fix="wait for it to finish",
            ) from None
        if _same_file(handle, lock_path):
            break
        # The holder removed the lock file between our open and our flock: this lock guards
        # nothing any more; take the one at the name now.
        handle.close()
    try:
        yield
    finally:
        # The lock file is removed while still held (success or failure: no empty file is left
        # behind); a pull that opened it meanwhile sees the name gone and retries, above.
        with contextlib.suppress(OSError):
            lock_path.unlink()
        handle.close()


def _same_file(handle: BinaryIO, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.lstat(path))
    except FileNotFoundError:
        return False
