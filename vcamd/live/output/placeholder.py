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

from vcamd.common.types import Frame

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
    column = (_BACKGROUND_TOP * (1.0 - t) + _BACKGROUND_BOTTOM * t).astype(np.uint8)  # height × 3
    frame = np.tile(column, (1, width)).reshape(height, width, 3)
    # The text is drawn on the band of rows it covers only: the "starting" card is the first frame
    # `vcamd run` publishes, and converting a whole 720p frame to and from PIL cost tens of ms.
    layout = _layout(width, height, message)
    if layout is not None:
        font, text, (x, y), (top, bottom) = layout
        top, bottom = max(0, top - 2), min(height, bottom + 2)
        band = Image.fromarray(np.ascontiguousarray(frame[top:bottom, :, ::-1]))
        ImageDraw.Draw(band).text((x, y - top), text, font=font, fill=_TEXT_RGB)
        frame[top:bottom] = np.asarray(band)[:, :, ::-1]
    frame.flags.writeable = False
    return frame


Layout = tuple[ImageFont.FreeTypeFont | ImageFont.ImageFont, str, tuple[float, float], tuple[int, int]]
"""The font, the text, where it is drawn and the rows it covers."""


def _layout(width: int, height: int, message: str) -> Layout | None:
    """Font, text, where to draw it and the rows it covers: centred, as large as looks calm and no
    larger than fits; None on a frame too small for readable text (a tiny camera mode): the
    background says enough."""
    draw = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    size = max(MIN_TEXT_PX, round(min(height / 18, width / 30)))
    while size >= MIN_TEXT_PX:
        font, text = _font_and_text(message, size=size)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        if right - left <= 0.92 * width and bottom - top <= 0.8 * height:
            x = (width - (right - left)) / 2 - left
            y = (height - (bottom - top)) / 2 - top
            # From the text's origin (PIL rounds a negative coordinate the other way) to its bottom.
            return font, text, (x, y), (int(np.floor(min(y, y + top))) - 1, int(np.ceil(y + bottom)) + 1)
        size = min(size - 1, int(size * 0.92 * width / max(1, right - left)))
    return None


def _font_and_text(message: str, size: int) -> tuple[ImageFont.FreeTypeFont | ImageFont.ImageFont, str]:
    for name in _FONT_CANDIDATES:
        try:
            return ImageFont.truetype(name, size), message
        except OSError:
            continue
    return ImageFont.load_default(size=size), message.translate(_ASCII_SPELLING)
