"""Where an aligned crop lands in the frame: its affine as six floats, its footprint's rectangle.

`M` is the 2×3 affine that took frame pixels to crop pixels; pasting back maps the crop through
its inverse. Only the bounding rectangle of the crop's footprint (its four corners mapped into the
frame, clipped) is touched by a paste (`faces/blend.py`); this module says which rectangle, how `M`
reads from it, which crop pixels came from inside the frame, and how `M` changes when the crop is
halved. Per-face geometry is plain float arithmetic, not 3×3 numpy calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class PasteRegion:
    """The frame rectangle a paste touched, half-open: frame[y0:y1, x0:x1]."""

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0


Affine6 = tuple[float, float, float, float, float, float]
"""A 2×3 affine as six Python floats (a, b, c, d, e, f): x' = a·x + b·y + c, y' = d·x + e·y + f.
Per-face geometry in plain floats: a 3×3 `np.linalg.inv` and corner products cost ~20 µs a
call, the same arithmetic on six floats ~2 µs — it adds up over a group's faces."""


def affine6(M: npt.ArrayLike) -> Affine6:
    m = np.asarray(M, np.float64)
    if m.shape != (2, 3):
        raise ValueError(f"M must be a 2×3 affine matrix, got shape {m.shape}")
    a, b, c, d, e, f = m.ravel().tolist()
    return a, b, c, d, e, f


def invert6(m: Affine6) -> Affine6:
    a, b, c, d, e, f = m
    det = a * e - b * d
    if det == 0.0:
        raise ValueError("M is singular: it does not map the frame onto the crop")
    return e / det, -b / det, (b * f - e * c) / det, -d / det, a / det, (d * c - a * f) / det


def _corners(inverse: Affine6, right: float, bottom: float) -> tuple[list[float], list[float]]:
    """The crop rectangle's corners (0, 0)…(right, bottom) mapped into the frame: xs, ys."""
    a, b, c, d, e, f = inverse
    xs = [c, a * right + c, b * bottom + c, a * right + b * bottom + c]
    ys = [f, d * right + f, e * bottom + f, d * right + e * bottom + f]
    return xs, ys


def footprint_region(frame_shape: tuple[int, ...], crop_w: int, crop_h: int, inverse: Affine6) -> PasteRegion | None:
    """`paste_region` from the inverse affine already at hand (crop → frame pixels)."""
    height, width = frame_shape[:2]
    xs, ys = _corners(inverse, crop_w, crop_h)
    # One pixel of slack each side: bilinear sampling reaches half a pixel past the corners.
    x0 = max(0, math.floor(min(xs)) - 1)
    y0 = max(0, math.floor(min(ys)) - 1)
    x1 = min(width, math.ceil(max(xs)) + 1)
    y1 = min(height, math.ceil(max(ys)) + 1)
    if x1 <= x0 or y1 <= y0:
        return None
    return PasteRegion(x0, y0, x1, y1)


def paste_region(frame_shape: tuple[int, ...], crop_size: tuple[int, int], M: npt.ArrayLike) -> PasteRegion | None:
    """Bounding rectangle of the crop's footprint in the frame, clipped; None if fully outside."""
    return footprint_region(frame_shape, crop_size[0], crop_size[1], invert6(affine6(M)))


def roi_affine(m: Affine6, region: PasteRegion) -> npt.NDArray[np.float64]:
    """M re-based so that ROI pixel (0, 0) is frame pixel (x0, y0): maps ROI → crop coordinates."""
    a, b, c, d, e, f = m
    x0, y0 = region.x0, region.y0
    return np.array(((a, b, c + a * x0 + b * y0), (d, e, f + d * x0 + e * y0)), np.float64)


def crop_validity(frame_shape: tuple[int, ...], size: tuple[int, int], inverse: Affine6) -> npt.NDArray[np.uint8] | None:
    """Which crop pixels came from inside the frame (1) vs the black fill (0); None = all inside.

    Only needed when the face is partly outside the frame, so statistics (colour correction) do
    not count the fill. Checking the four corners first keeps the common case free.
    """
    height, width = frame_shape[:2]
    crop_w, crop_h = size
    if _inside(frame_shape, inverse, crop_w):
        return None
    a, b, c, d, e, f = inverse
    gy, gx = np.mgrid[0:crop_h, 0:crop_w].astype(np.float32)
    fx = a * gx + b * gy + c
    fy = d * gx + e * gy + f
    inside = (fx >= 0) & (fx <= width - 1) & (fy >= 0) & (fy <= height - 1)
    valid: npt.NDArray[np.uint8] = inside.astype(np.uint8)
    return valid


def _inside(frame_shape: tuple[int, ...], inverse: Affine6, side: int) -> bool:
    """Whether the whole crop (side × side) maps inside the frame."""
    height, width = frame_shape[:2]
    xs, ys = _corners(inverse, side - 1, side - 1)
    return min(xs) >= 0 and max(xs) <= width - 1 and min(ys) >= 0 and max(ys) <= height - 1


def halved_affine(m: Affine6) -> Affine6:
    """M for the halved crop: crop pixel x (centre at x) lies at (x − ½)/2 in the half-size crop."""
    a, b, c, d, e, f = m
    return a * 0.5, b * 0.5, c * 0.5 - 0.25, d * 0.5, e * 0.5, f * 0.5 - 0.25
