"""Colour correction of a pasted face: the swapped crop's LAB mean/std matched to the original face's.

The swap model's output often has a slightly different white balance/exposure than the camera
frame; matching the statistics of the face area hides that seam. In 8-bit LAB (L scaled to 0..255,
a/b offset by 128: 5× cheaper than float LAB) the per-channel affine map is a lookup table. The
`Blender` (`faces/blend.py`) corrects a large face in crop space, before its warp, and a small one
in frame space, on its paste rectangle (`corrected_roi`).
"""

from __future__ import annotations

from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import Frame, as_frame

_LEVELS = np.arange(256, dtype=np.float64)[:, None]

LAB_BLACK = (0, 128, 128, 0)
"""Black in OpenCV's 8-bit LAB: the fill where a warped LAB crop reaches past the crop."""

MIN_STATS_PIXELS = 16
"""Fewer pixels than this in the statistics region: no colour correction (nothing to measure)."""

Stats = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]
"""Per-channel mean and standard deviation (3×1 each), as cv2.meanStdDev returns them."""


def mean_std(image: Frame, mask: npt.NDArray[np.uint8]) -> Stats:
    """cv2.meanStdDev where `mask` ≠ 0, as the float64 arrays it returns (its stubs say any depth)."""
    return cast(Stats, cv2.meanStdDev(image, mask=mask))


def colour_table(src: Stats, ref: Stats) -> npt.NDArray[np.uint8]:
    """The lookup table (256×1×3) that maps each LAB channel's `src` mean/std onto `ref`'s."""
    (src_mean, src_std), (ref_mean, ref_std) = src, ref
    # A flat channel (std ~0) would blow up the ratio; clamp it to a sane range. (numpy's ufuncs
    # rather than np.clip and a fresh arange: the same numbers, a few µs less per face.)
    gain = np.minimum(np.maximum(ref_std / np.maximum(src_std, 0.5), 0.5), 2.0)
    table = (_LEVELS - src_mean.T) * gain.T + ref_mean.T + 0.5
    return np.minimum(np.maximum(table, 0.0, out=table), 255.0, out=table).astype(np.uint8).reshape(256, 1, 3)


def match_colour(swapped: Frame, original: Frame, region: npt.NDArray[np.uint8]) -> Frame:
    """Shift the swapped crop's LAB mean/std to the original crop's, measured where `region` ≠ 0.

    The swap model's output often has a slightly different white balance/exposure than the camera
    frame; matching the statistics of the face area (region = the inner part of the paste mask)
    hides that seam. Statistics use cv2.meanStdDev (one pass each); the correction is one affine
    map per LAB channel on the crop, applied as a lookup table. (`Blender.paste` runs the same
    steps with the swapped crop's LAB and statistics kept from one frame to the next.)
    """
    if cv2.countNonZero(region) < MIN_STATS_PIXELS:
        return swapped
    # 8-bit LAB (L scaled to 0..255, a/b offset by 128) is 5× cheaper than float LAB and the
    # per-channel affine map becomes a lookup table; the rounding costs under one grey level.
    src = as_frame(cv2.cvtColor(swapped, cv2.COLOR_BGR2LAB))
    ref = as_frame(cv2.cvtColor(original, cv2.COLOR_BGR2LAB))
    table = colour_table(mean_std(src, region), mean_std(ref, region))
    return as_frame(cv2.cvtColor(cv2.LUT(src, table), cv2.COLOR_LAB2BGR))


def corrected_roi(lab: Frame, roi: Frame, region: npt.NDArray[np.uint8]) -> Frame:
    """Colour correction in frame space: `lab` is the swapped crop's LAB (kept per crop) warped
    onto the paste rectangle, `roi` the frame's own pixels there (the original face), `region`
    where the paste's mask is ≥ ½. Both statistics are taken here, on the pixels pasted (measured
    on the real faces of benchmarks/paste_quality.py, the swapped crop's own statistics in crop
    space matched the face's colour less well: a bilinear step down changes its spread)."""
    if cv2.countNonZero(region) < MIN_STATS_PIXELS:
        return as_frame(cv2.cvtColor(lab, cv2.COLOR_LAB2BGR))
    table = colour_table(mean_std(lab, region), mean_std(as_frame(cv2.cvtColor(roi, cv2.COLOR_BGR2LAB)), region))
    return as_frame(cv2.cvtColor(cv2.LUT(lab, table), cv2.COLOR_LAB2BGR))
