"""The disclosure badge: a small "AI-altered" label in a corner of every altered frame.

Drawn on the badge's own small rectangle only (never a full-frame operation): the rectangle is
darkened so the white text reads on any background, then the text is drawn on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import cv2

from vcamd.common.types import Frame
from vcamd.config.schema import Corner

_FONT = cv2.FONT_HERSHEY_SIMPLEX
_DARKEN = 0.35
"""The badge background keeps 35% of the picture under it: readable text, the picture still shows."""


@dataclass(frozen=True, slots=True)
class BadgeBox:
    """Where the badge goes, in frame pixels (half-open), and how its text is drawn."""

    x0: int
    y0: int
    x1: int
    y1: int
    text_origin: tuple[int, int]  # baseline-left of the text, relative to (x0, y0)
    scale: float
    thickness: int


def badge_box(frame_shape: tuple[int, ...], text: str, corner: Corner | str) -> BadgeBox:
    """Lay the badge out for a frame size: text height ~2.5% of the frame height, a margin of
    ~1.5% from the corner, clipped to the frame."""
    return _layout(tuple(frame_shape[:2]), text, Corner(corner))


@lru_cache(maxsize=16)
def _layout(frame_hw: tuple[int, int], text: str, corner: Corner) -> BadgeBox:
    """badge_box's work, done once per frame size, text and corner (they change only on a
    config reload) rather than on every published frame."""
    height, width = frame_hw
    scale = max(0.35, height / 720.0 * 0.6)
    thickness = max(1, round(scale * 1.7))
    (text_w, text_h), baseline = cv2.getTextSize(text, _FONT, scale, thickness)
    pad = max(2, round(text_h * 0.45))
    box_w = min(width, text_w + 2 * pad)
    box_h = min(height, text_h + baseline + 2 * pad)
    margin = max(0, min(round(height * 0.015), width - box_w, height - box_h))
    x0 = margin if corner in (Corner.top_left, Corner.bottom_left) else width - margin - box_w
    y0 = margin if corner in (Corner.top_left, Corner.top_right) else height - margin - box_h
    return BadgeBox(x0, y0, x0 + box_w, y0 + box_h, (pad, pad + text_h), scale, thickness)


def draw_badge(frame: Frame, text: str, corner: Corner | str) -> BadgeBox:
    """Draw the badge into `frame` in place; returns the rectangle it covers."""
    box = badge_box(frame.shape, text, corner)
    roi = frame[box.y0 : box.y1, box.x0 : box.x1]
    # Work on a small contiguous copy: OpenCV's drawing functions need contiguous memory.
    patch = cv2.convertScaleAbs(roi, alpha=_DARKEN)  # rounded, in one pass
    cv2.putText(patch, text, box.text_origin, _FONT, box.scale, (255, 255, 255), box.thickness, cv2.LINE_AA)
    roi[...] = patch
    return box
