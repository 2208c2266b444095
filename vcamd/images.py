"""Reading user-supplied photos (source face, reference face, `vcamd faces`/`swap` inputs).

One place that turns every way a file can be wrong into a FaceError that names the file and says
what to do: missing, a folder, empty, not an image, animated, absurdly large, unreadable pixels.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

from vcamd.errors import FaceError
from vcamd.types import Frame

MAX_PIXELS = 64_000_000
"""Refuse photos above 64 MP: decoding one costs hundreds of MB and no face needs it."""

MAX_FILE_BYTES = 200 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ImageHeader:
    """What a photo's header says, read without decoding a pixel."""

    width: int
    height: int
    format: str  # Pillow's name: "JPEG", "PNG", ...


def probe_image(path: Path | str, what: str = "image") -> ImageHeader:
    """Every check `read_image` makes before decoding — from the file and its header only, so a
    decompression bomb, an animation or a non-image costs no memory — or FaceError saying why not."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FaceError(f"{what} {path} does not exist", fix="check the path")
    if path.is_dir():
        raise FaceError(f"{what} {path} is a folder, not an image file", fix="give the path of a photo")
    size = path.stat().st_size
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
    probe_image(path, what)
    data = np.fromfile(path, dtype=np.uint8)
    try:
        image = cv2.imdecode(data, cv2.IMREAD_COLOR)
    except cv2.error as exc:  # OpenCV refuses e.g. a header claiming more pixels than it allows
        raise FaceError(f"{what} {path} is not a readable image ({str(exc).strip().splitlines()[-1]})", fix="give a JPEG or PNG photo") from None
    if image is None:
        raise FaceError(f"{what} {path} is not a readable image (the pixel data is damaged)", fix="give a JPEG or PNG photo")
    return np.ascontiguousarray(image)
