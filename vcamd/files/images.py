"""Reading user-supplied photos (source face, reference face, `vcamd faces`/`swap` inputs).

One place that turns every way a file can be wrong into a FaceError that names the file and says
what to do: missing, a folder, empty, not an image, animated, absurdly large, unreadable pixels.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from vcamd.common.errors import FaceError
from vcamd.common.types import Frame

MAX_PIXELS = 64_000_000
"""Refuse photos above 64 MP: decoding one costs hundreds of MB and no face needs it."""

MAX_FILE_BYTES = 200 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ImageHeader:
    """What a photo's header says, read without decoding a pixel."""

    width: int
    height: int
    format: str  # Pillow's name: "JPEG", "PNG", ...


def stat_given_path(path: Path, what: str = "image") -> os.stat_result:
    """`os.stat` of a path a user gave (a photo, `vcamd swap`'s input), or FaceError saying what is
    wrong with the path itself:
    it does not exist, holds a NUL byte or text no file name can hold, has a name over the file
    system's limit, or cannot be looked at (permission)."""
    shown = shown_path(path)
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise FaceError(f"{what} {shown} does not exist", fix="check the path") from None
    except UnicodeEncodeError:
        raise FaceError(f"{what} path {shown} is not a valid file name (it holds text no file name can)",
                        fix="check the path") from None
    except ValueError:  # "embedded null byte"
        raise FaceError(f"{what} path {shown} holds a NUL byte, which no file name can", fix="check the path") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise FaceError(f"{what} path {shown} is too long for a file name ({exc.strerror})",
                            fix="use a shorter name (at most 255 bytes a folder or file name)") from None
        if exc.errno == errno.ENOTDIR:
            raise FaceError(f"{what} {shown} does not exist (a part of the path is a file, not a folder)",
                            fix="check the path") from None
        raise FaceError(f"{what} {shown} cannot be read ({exc.strerror or exc})",
                        fix="check the path and its permissions") from None


def shown_path(path: Path | str, limit: int = 160) -> str:
    """A path as a one-line message may show it: a NUL as \\0, cut to `limit` characters."""
    text = str(path).replace("\0", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def probe_image(path: Path | str, what: str = "image") -> ImageHeader:
    """Every check `read_image` makes before decoding — from the file and its header only, so a
    decompression bomb, an animation or a non-image costs no memory — or FaceError saying why not."""
    path = Path(path).expanduser()
    info = stat_given_path(path, what)
    if stat.S_ISDIR(info.st_mode):
        raise FaceError(f"{what} {path} is a folder, not an image file", fix="give the path of a photo")
    size = info.st_size
    if size == 0:
        raise FaceError(f"{what} {path} is empty (0 bytes)", fix="give a JPEG or PNG photo")
    if size > MAX_FILE_BYTES:
        raise FaceError(f"{what} {path} is {size / 1e6:.0f} MB", fix="use a photo under 200 MB")
    # Pillow opens lazily: the pixel count and frame count come from the header, before any
    # pixels are allocated.
    try:
        with warnings.catch_warnings():
            # Pillow warns about huge headers; the size check below refuses them with a clear error.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as probe:
                width, height = probe.size
                frames = getattr(probe, "n_frames", 1)
                kind = str(probe.format)
    except UnidentifiedImageError:  # Pillow's words repeat the path in quotes; say what is wrong instead
        raise FaceError(f"{what} {path} is not a readable image (not a format Pillow knows)", fix="give a JPEG or PNG photo") from None
    except (OSError, SyntaxError, ValueError) as exc:
        # Only formats whose size Pillow can read first are decoded: OpenCV alone (HDR, PFM, ...)
        # would reserve whatever pixel count the header claims before failing.
        detail = str(exc) or type(exc).__name__
        raise FaceError(f"{what} {path} is not a readable image ({detail})", fix="give a JPEG or PNG photo") from None
    except Image.DecompressionBombError:
        raise FaceError(f"{what} {path} is too large to decode safely", fix=f"use a photo under {MAX_PIXELS // 1_000_000} MP") from None
    if width * height > MAX_PIXELS:
        raise FaceError(
            f"{what} {path} is {width}×{height} ({width * height / 1e6:.0f} MP)",
            fix=f"use a photo under {MAX_PIXELS // 1_000_000} MP",
        )
    if frames > 1:
        raise FaceError(f"{what} {path} is animated ({frames} frames)", fix="use a still photo (JPEG or PNG)")
    return ImageHeader(width, height, kind)


def read_image(path: Path | str, what: str = "image") -> Frame:
    """Decode a still photo to an H×W×3 uint8 BGR frame, or raise FaceError saying why not.
    The header is checked first (`probe_image`): nothing over MAX_PIXELS is ever decoded."""
    path = Path(path).expanduser()
    return _decoded(_checked_bytes(path, what), path, what)


def read_photo(path: Path | str, what: str = "image") -> tuple[Frame, str]:
    """`read_image`, and the SHA-256 of the very bytes it decoded (what a photo's kept face is
    keyed by, `vcamd.faces.source_cache`: a file replaced between hashing and decoding cannot
    pair one photo's pixels with another's key). Only the source-face cache needs the hash, so
    `read_image` does not compute it."""
    path = Path(path).expanduser()
    data = _checked_bytes(path, what)
    return _decoded(data, path, what), hashlib.sha256(data.data).hexdigest()


def _checked_bytes(path: Path, what: str) -> npt.NDArray[np.uint8]:
    """The file's bytes, once its header passed `probe_image`."""
    probe_image(path, what)
    return np.fromfile(path, dtype=np.uint8)


def _decoded(data: npt.NDArray[np.uint8], path: Path, what: str) -> Frame:
    try:
        image = cv2.imdecode(data, cv2.IMREAD_COLOR)
    except cv2.error as exc:  # OpenCV refuses e.g. a header claiming more pixels than it allows
        raise FaceError(f"{what} {path} is not a readable image ({str(exc).strip().splitlines()[-1]})", fix="give a JPEG or PNG photo") from None
    if image is None:
        raise FaceError(f"{what} {path} is not a readable image (the pixel data is damaged)", fix="give a JPEG or PNG photo")
    return np.ascontiguousarray(image)
