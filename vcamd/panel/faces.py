"""Source-face photos uploaded through the control page: bounded, private, decoded safely.

An upload is streamed into a 0600 temporary file inside a 0700 folder of the user's data dir
(never into memory, never world-readable), then checked from its header with
`vcamd.files.images.probe_image` (read_image's checks, no pixel decoded: the upload's HTTP thread never
holds a decoded photo) and only then kept, named by its content hash (the same photo uploaded
twice is stored once). The engine decodes it, in the daemon's one photo lane (`vcamd.files.photo_lane`).
The newest `MAX_KEPT_FACES` stay, so the tray's and the page's recent-faces list can offer them
again after a restart; older ones are removed as new ones come (the folder does not grow without
bound). A temporary `.upload-PID-….part` left by a daemon that was stopped mid-upload (SIGTERM ends
it without unwinding its threads) is removed by the next upload and when `vcamd run` ends
(`sweep_partial_uploads`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from vcamd.common.errors import FaceError, VcamdError
from vcamd.files.diskspace import mount_point
from vcamd.files.images import probe_image
from vcamd.files.private_files import UnsafePathError, private_dir

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""A face photo never needs more; bigger bodies are refused before a byte is stored."""

CHUNK_BYTES = 256 * 1024
MAX_KEPT_FACES = 20
"""Uploaded photos kept (the newest); more than the recent-faces list shows (8)."""
PART_PREFIX = ".upload-"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
SUFFIXES = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif"}


class UploadNotStored(VcamdError):
    """The photo could not be stored in the data folder (its disk is full, the folder is read-only):
    what happened, for the page to answer (507 when the disk is full, else 500) without a traceback.
    `unread`: bytes of the body not read yet (the page drains them so the browser sees the answer)."""

    def __init__(self, message: str, *, fix: str, disk_full: bool, unread: int) -> None:
        super().__init__(message, fix=fix)
        self.disk_full = disk_full
        self.unread = unread


class UploadTooLarge(VcamdError):
    def __init__(self, size: int) -> None:
        super().__init__(f"the photo is {size / 1e6:.1f} MB; the control page takes photos up to "
                         f"{MAX_UPLOAD_BYTES // (1024 * 1024)} MB", fix="use a smaller photo (a face needs well under 1 MB)")


def safe_stem(name: str) -> str:
    """A browser-given file name as a harmless stem: no folders, dots or odd characters, ≤ 40 chars."""
    stem = Path(name.replace("\\", "/")).stem
    return _UNSAFE.sub("_", stem).strip("_")[:40] or "photo"


def naming_upload(err: FaceError, stored: Path, name: str) -> FaceError:
    """`err`'s words and fix, naming the file the user chose rather than our copy of it."""
    shown = f'"{Path(name.replace(chr(92), "/")).name or "photo"}"'
    return FaceError(err.message.replace(str(stored), shown), fix=err.fix)


def store_upload(body: BinaryIO, length: int, folder: Path, name: str = "photo") -> tuple[Path, bool]:
    """Read `length` bytes of `body` into `folder` and check them as a photo, from the header.

    `name` is the file name the browser gave (only shown in lists; reduced to safe characters).
    Returns (the kept file, whether it is new). Raises UploadTooLarge before reading anything when
    `length` is over the limit, FaceError (read_image's message) when it is not a usable photo.
    """
    if length > MAX_UPLOAD_BYTES:
        raise UploadTooLarge(length)
    remaining = length
    try:
        private_dir(folder)
        sweep_partial_uploads(folder)
        fd, tmp_name = tempfile.mkstemp(prefix=f"{PART_PREFIX}{os.getpid()}-", suffix=".part", dir=folder)  # created 0600
    except UnsafePathError:
        raise
    except OSError as exc:
        raise not_stored(exc, folder, remaining) from None
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        out = os.fdopen(fd, "wb", buffering=0)  # unbuffered: a write that fails fails here, not at close
        with out:
            while remaining > 0:
                try:
                    chunk = body.read(min(CHUNK_BYTES, remaining))
                except OSError as exc:  # TimeoutError included: a client that stalls mid-upload
                    raise VcamdError(f"the upload stalled after {length - remaining} of {length} bytes ({exc or 'timed out'})",
                                     fix="try again") from None
                if not chunk:
                    raise VcamdError(f"the upload ended after {length - remaining} of {length} bytes",
                                     fix="try again")
                remaining -= len(chunk)
                left = memoryview(chunk)
                while left:  # a raw write may take part of it
                    try:
                        left = left[out.write(left) or 0:]
                    except OSError as exc:
                        raise not_stored(exc, folder, remaining) from None
                digest.update(chunk)
        try:
            header = probe_image(tmp, "uploaded photo")  # every way a file can be wrong → FaceError saying so
        except FaceError as err:
            raise naming_upload(err, tmp, name) from None
        suffix = SUFFIXES.get(header.format, ".img")
        kept = folder / f"{safe_stem(name)}-{digest.hexdigest()[:12]}{suffix}"
        is_new = not kept.exists()
        os.replace(tmp, kept)  # also makes a photo uploaded again the newest
        _keep_newest(folder, MAX_KEPT_FACES, kept)
        return kept, is_new
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def not_stored(exc: OSError, folder: Path, unread: int) -> UploadNotStored:
    """An OSError while storing an upload in `folder`, as what the page answers."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    why = f"its disk (at {mount_point(folder)}) is full" if full else (exc.strerror or str(exc))
    return UploadNotStored(f"the photo could not be stored in {folder}: {why}",
                           fix="free some space on that disk, then upload it again" if full else
                           "check that the folder is writable, then upload it again",
                           disk_full=full, unread=unread)


def uploads_dir() -> Path:
    """Where the control page keeps uploaded photos: the user data dir's `faces/`."""
    from vcamd.config.folders import user_data_dir

    return user_data_dir() / "faces"


def sweep_partial_uploads(folder: Path, *, including_ours: bool = False) -> None:
    """Remove the temporary files of uploads that no process is writing any more: those of a
    process that has ended (and, `including_ours`, this one's: called as the daemon ends)."""
    for part in folder.glob(f"{PART_PREFIX}*.part"):
        pid = part.name[len(PART_PREFIX):].split("-", 1)[0]
        if pid.isdecimal() and _alive(int(pid)) and (int(pid) != os.getpid() or not including_ours):
            continue  # an upload in progress
        with contextlib.suppress(OSError):
            part.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process with that number: not ours to judge
    return True


def _keep_newest(folder: Path, count: int, keep: Path) -> None:
    """Remove all but the `count` newest kept photos (never `keep`, the one just stored)."""
    photos = []
    for path in folder.iterdir():
        if path.name.startswith(".") or path == keep:
            continue
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                photos.append((info.st_mtime_ns, path))
    photos.sort(reverse=True)
    for _, old in photos[max(0, count - 1):]:
        with contextlib.suppress(OSError):
            old.unlink()
