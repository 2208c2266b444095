"""The alpha shapes a paste cross-fades with, in aligned (crop) space.

`feather_mask`: the crop's feathered footprint (erode = a zero border, then one Gaussian blur),
built once per crop size by the `Blender` (`faces/blend.py`) and kept. `mouth_keep_mask`: a soft
ellipse around the mouth corners where the frame's real mouth stays (the mouth mask).
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import as_float32

FloatImage = npt.NDArray[np.float32]

MASK_MARGIN = 0.10
"""Zero border of the feathered mask, as a share of the crop side (the 'erode' step)."""

MASK_SIGMA = MASK_MARGIN / 3.0
"""Gaussian feather, as a share of the crop side. margin = 3σ: the mask is ~0 at the crop edge, so
the crop's own border (resampling fringe, black fill where the face left the frame) never shows."""


def feather_mask(size: int) -> FloatImage:
    """size×size float32 mask in aligned space: 1 in the middle, smoothly 0 at the edges."""
    margin = max(1, round(size * MASK_MARGIN))
    mask = np.zeros((size, size), np.float32)
    mask[margin : size - margin, margin : size - margin] = 1.0
    sigma = max(0.5, size * MASK_SIGMA)
    return as_float32(cv2.GaussianBlur(mask, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_CONSTANT))


def mouth_keep_mask(size: tuple[int, int], mouth_corners_crop: npt.ArrayLike) -> FloatImage:
    """Soft ellipse (1 = keep the real mouth) around the two mouth corners, in crop coordinates.

    The ellipse is wider than the corners (lips reach past the keypoints) and 3/4 as tall as wide
    (an open mouth), rotated with the mouth line; it keeps the mouth fully up to 70% of its radius
    and fades to 0 at its edge.
    """
    crop_w, crop_h = size
    left, right = np.asarray(mouth_corners_crop, np.float32).reshape(2, 2)
    centre = (left + right) / 2.0
    span = float(np.linalg.norm(right - left))
    out = np.zeros((crop_h, crop_w), np.float32)
    if span < 1.0:
        return out
    # Centre a little below the corner line: the lower lip hangs below the corners.
    direction = (right - left) / span
    normal = np.array([-direction[1], direction[0]], np.float32)
    centre = centre + normal * span * 0.05
    semi_x = span * 0.8
    semi_y = span * 0.6
    reach = int(np.ceil(max(semi_x, semi_y) * 1.3)) + 1
    x0, x1 = max(0, int(centre[0]) - reach), min(crop_w, int(centre[0]) + reach + 1)
    y0, y1 = max(0, int(centre[1]) - reach), min(crop_h, int(centre[1]) + reach + 1)
    if x1 <= x0 or y1 <= y0:
        return out
    ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float32)
    dx, dy = xs - centre[0], ys - centre[1]
    along = dx * direction[0] + dy * direction[1]
    across = dx * normal[0] + dy * normal[1]
    radius = np.sqrt((along / semi_x) ** 2 + (across / semi_y) ** 2)
    # 1 inside r < 0.7, smoothstep down to 0 at r = 1.
    t = np.clip((1.0 - radius) / 0.3, 0.0, 1.0)
    out[y0:y1, x0:x1] = t * t * (3.0 - 2.0 * t)
    return out
