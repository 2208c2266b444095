"""A synthetic gloved hand over a face: what the parser must keep in front of the swap
(tests/faces/test_parse.py asserts it, benchmarks/parser.py shows it)."""

from __future__ import annotations

import cv2
import numpy as np

from vcamd.common.types import Face, Frame

GLOVE = (200, 120, 40)
"""BGR: a blue glove, no skin colour (the rule-based stand-in parser tells it from skin)."""


def with_hand(image: Frame, face: Face, reach: float) -> tuple[Frame, np.ndarray]:
    """`image` with a gloved hand coming in from the right over `reach` of the face's width, at
    the height of its nose and mouth; and where the hand is (bool)."""
    out = image.copy()
    x1, y1, x2, y2 = face.box
    w, h = x2 - x1, y2 - y1
    left = int(x2 - reach * w)
    palm = (int(x2 + 0.2 * w), int(y1 + 0.72 * h))
    hand = np.zeros(image.shape[:2], np.uint8)
    cv2.ellipse(hand, palm, (int(0.3 * w), int(0.3 * h)), 0, 0, 360, 1, -1)
    for i in range(4):  # fingers reaching left over the face, rounded at their tips
        y, r = int(y1 + (0.5 + 0.12 * i) * h), int(0.045 * h)
        cv2.rectangle(hand, (left + r, y - r), palm, 1, -1)
        cv2.circle(hand, (left + r, y), r, 1, -1)
    out[hand.astype(bool)] = GLOVE
    return out, hand.astype(bool)
