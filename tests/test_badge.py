"""The disclosure badge: a small label in the configured corner, drawn on its own rectangle only."""

from __future__ import annotations

import numpy as np
import pytest

from vcamd.config.schema import Corner
from vcamd.privacy.badge import draw_badge


@pytest.mark.parametrize("corner", list(Corner))
def test_badge_sits_in_its_corner_and_touches_nothing_else(corner: Corner) -> None:
    rng = np.random.default_rng(1)
    frame = rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    before = frame.copy()
    box = draw_badge(frame, "AI-altered", corner)
    inside = np.zeros(frame.shape[:2], bool)
    inside[box.y0 : box.y1, box.x0 : box.x1] = True
    assert np.array_equal(frame[~inside], before[~inside])
    assert inside.sum() < 0.02 * inside.size  # small
    assert (frame[inside] != before[inside]).mean() > 0.9
    patch = frame[box.y0 : box.y1, box.x0 : box.x1]
    assert (patch.min(axis=2) > 200).sum() > 50  # white text on the darkened patch
    cx, cy = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
    assert (cx < 640) == corner.value.endswith("left")
    assert (cy < 360) == corner.value.startswith("top")


def test_badge_fits_a_tiny_frame() -> None:
    frame = np.zeros((40, 60, 3), np.uint8)
    box = draw_badge(frame, "AI-altered", "bottom-right")
    assert 0 <= box.x0 < box.x1 <= 60 and 0 <= box.y0 < box.y1 <= 40
