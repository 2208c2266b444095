"""Placeholder frames the virtual camera shows instead of the camera picture.

While the daemon starts, and while the camera is lost, the virtual camera must keep delivering
frames (apps drop a camera that goes silent) and must never fall back to the real face. These
frames are calm, dark and say what is happening. Each is built once per size and message and then
reused, so publishing one costs nothing per frame.

The returned arrays are shared and read-only: a caller that wants to draw on one (e.g. a badge)
copies it first. Writing to it raises instead of silently corrupting every later placeholder.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vcamd.types import Frame

OFFLINE_MESSAGE = "Camera offline — reconnecting…"
STARTING_MESSAGE = "Camera starting…"

_BACKGROUND_TOP = np.array([44, 36, 30], np.float32)  # BGR: dark slate, a little lighter at the top
_BACKGROUND_BOTTOM = np.array([26, 21, 18], np.float32)
_TEXT_RGB = (214, 220, 226)

# Fonts with the em dash and ellipsis, tried in order: Linux (DejaVu), Windows (Segoe UI, Arial),
# macOS (Helvetica). Pillow looks each name up in the platform's font folders.
_FONT_CANDIDATES = ("DejaVuSans.ttf", "segoeui.ttf", "arial.ttf", "Arial.ttf", "Helvetica.ttc")
# Pillow's bundled fallback font has no em dash or ellipsis glyph: spell them in ASCII there.
_ASCII_SPELLING = str.maketrans({"—": "-", "…": "..."})


def offline_frame(width: int, height: int, message: str = OFFLINE_MESSAGE) -> Frame:
    """The frame published while the camera is lost (or not started yet): dark background,
    `message` centred."""
    return _placeholder(width, height, message)


MIN_TEXT_PX = 6
"""Below this font size the message is unreadable: such a tiny frame shows the background only."""


@lru_cache(maxsize=16)
def _placeholder(width: int, height: int, message: str) -> Frame:
    if width < 1 or height < 1:
        raise ValueError(f"placeholder size {width}×{height}: a frame needs at least 1×1 pixels")
    # A soft vertical gradient reads as "a screen", not as a broken black feed.
    t = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    column = _BACKGROUND_TOP * (1.0 - t) + _BACKGROUND_BOTTOM * t  # height × 3
    frame = np.ascontiguousarray(np.broadcast_to(column[:, None, :], (height, width, 3)).astype(np.uint8))
    rgb = Image.fromarray(frame[:, :, ::-1])
    _draw_centred(ImageDraw.Draw(rgb), width, height, message)
    out = np.ascontiguousarray(np.asarray(rgb)[:, :, ::-1])
    out.flags.writeable = False
    return out


def _draw_centred(draw: ImageDraw.ImageDraw, width: int, height: int, message: str) -> None:
    """The message centred in the frame, as large as looks calm and no larger than fits; on a
    frame too small for readable text (a tiny camera mode), nothing: the background says enough."""
    size = max(MIN_TEXT_PX, round(min(height / 18, width / 30)))
    while size >= MIN_TEXT_PX:
        font, text = _font_and_text(message, size=size)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        if right - left <= 0.92 * width and bottom - top <= 0.8 * height:
            x = (width - (right - left)) / 2 - left
            y = (height - (bottom - top)) / 2 - top
            draw.text((x, y), text, font=font, fill=_TEXT_RGB)
            return
        size = min(size - 1, int(size * 0.92 * width / max(1, right - left)))


def _font_and_text(message: str, size: int) -> tuple[ImageFont.FreeTypeFont | ImageFont.ImageFont, str]:
    for name in _FONT_CANDIDATES:
        try:
            return ImageFont.truetype(name, size), message
        except OSError:
            continue
    return ImageFont.load_default(size=size), message.translate(_ASCII_SPELLING)
