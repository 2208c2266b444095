"""Source-face photos uploaded through the control page: bounded, private, decoded safely.

An upload is streamed into a 0600 temporary file inside a 0700 folder of the user's data dir
(never into memory, never world-readable), then checked from its header with
`vcamd.images.probe_image` (read_image's checks, no pixel decoded: the upload's HTTP thread never
holds a decoded photo) and only then kept, named by its content hash (the same photo uploaded
twice is stored once). The engine decodes it, in the daemon's one photo lane (`vcamd.photo_lane`).
Kept files stay, so the tray's and the page's recent-faces list can offer them again after a restart.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from vcamd.errors import FaceError, VcamdError
from vcamd.images import probe_image

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
"""A face photo never needs more; bigger bodies are refused before a byte is stored."""

CHUNK_BYTES = 256 * 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
SUFFIXES = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif"}


class UploadTooLarge(VcamdError):
    def __init__(self, size: int) -> None:
        super().__init__(f"the photo is {size / 1e6:.1f} MB; the control page takes photos up to "
                         f"{MAX_UPLOAD_BYTES // (1024 * 1024)} MB", fix="use a smaller photo (a face needs well under 1 MB)")


def private_dir(path: Path) -> Path:
    """Create `path` as a 0700 folder of ours (uploaded faces are personal data)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name == "posix":
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise VcamdError(f"the uploaded-faces folder {path} is not a folder owned by you",
                             fix="remove it; it is created again")
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(path, 0o700)
    return path


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
    private_dir(folder)
    fd, tmp_name = tempfile.mkstemp(prefix=".upload-", suffix=".part", dir=folder)  # created 0600
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            remaining = length
            while remaining > 0:
                try:
                    chunk = body.read(min(CHUNK_BYTES, remaining))
                except OSError as exc:  # TimeoutError included: a client that stalls mid-upload
                    raise VcamdError(f"the upload stalled after {length - remaining} of {length} bytes ({exc or 'timed out'})",
                                     fix="try again") from None
                if not chunk:
                    raise VcamdError(f"the upload ended after {length - remaining} of {length} bytes",
                                     fix="try again")
                out.write(chunk)
                digest.update(chunk)
                remaining -= len(chunk)
        try:
            header = probe_image(tmp, "uploaded photo")  # every way a file can be wrong → FaceError saying so
        except FaceError as err:
            raise naming_upload(err, tmp, name) from None
        suffix = SUFFIXES.get(header.format, ".img")
        kept = folder / f"{safe_stem(name)}-{digest.hexdigest()[:12]}{suffix}"
        is_new = not kept.exists()
        os.replace(tmp, kept)
        return kept, is_new
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()

