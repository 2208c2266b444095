"""Files in the models dir: written 0600, never through or over a symlink, made durable before
they are renamed into place; hashed in chunks."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from vcamd.common.errors import ModelError
from vcamd.files.private_files import UnsafePathError, open_private

PART_SUFFIX = ".part"
CHUNK_BYTES = 1 << 20


def refuse_symlink(path: Path) -> None:
    """vcamd reads through a symlinked model file but never writes through or over one."""
    if not path.is_symlink():
        return
    target = Path(os.path.realpath(path))
    where = "outside the models dir" if target.parent != path.parent.resolve() else "inside the models dir"
    raise ModelError(
        f"{path} is a symlink to {target} ({where}); vcamd will not write through or replace it",
        fix="remove the link, or fix the file it points to, then run the pull again",
    )


def open_for_write(path: Path, *, append: bool = False, truncate: bool = True) -> BinaryIO:
    """Open a file in the models dir for writing: 0600, a symlink at its name refused (O_NOFOLLOW)."""
    try:
        if append:
            return open_private(path, "ab")
        return open_private(path, "wb" if truncate else "r+b")
    except OSError as exc:
        if path.is_symlink():
            refuse_symlink(path)
        if isinstance(exc, UnsafePathError):
            raise ModelError(exc.strerror or str(exc), fix="remove it, then run the pull again") from None
        raise ModelError(
            f"cannot write {path}: {exc.strerror}",
            fix="check the permissions of the models dir, or set [models] dir to a folder you can write",
        ) from None



def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def crc32_file(path: Path) -> str:
    """The file's CRC32 as 8 lowercase hex digits (how FaceFusion publishes its models' `.hash`)."""
    crc = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            crc = zlib.crc32(chunk, crc)
    return format(crc, "08x")


def fsync(path: Path) -> None:
    """Make the bytes durable before the rename makes them visible under the final name."""
    with path.open("rb") as handle:
        os.fsync(handle.fileno())



def dir_error(directory: Path, exc: OSError) -> ModelError:
    return ModelError(
        f"[models] dir = {str(directory)!r} cannot be used as the models folder ({exc.strerror})",
        fix="set [models] dir to a folder you can write to (or remove the key for the default)",
    )
