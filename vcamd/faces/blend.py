"""Paste a swapped (or restored) aligned face crop back into the frame — on the face's region only.

The swap model works on an aligned crop (128² for inswapper, 512² for GFPGAN); `M` is the 2×3
affine that took frame pixels to crop pixels. Pasting back means warping the crop with the inverse
of `M` and cross-fading it into the frame with a feathered mask. A naive paste warps the crop and
its mask to the *whole* frame and erodes/blurs there (insightface's `INSwapper.get` does this: 10+
full-frame operations, ~30 ms at 720p). Here:

- the feathered mask is built once per crop size, in aligned space (erode = a zero border, then one
  Gaussian blur), and cached;
- per face, only the bounding rectangle of the crop's footprint in the frame (its four corners
  mapped through the inverse affine, clipped to the frame) is touched: crop and mask are warped
  straight into that rectangle with the translation adjusted, and the alpha blend runs in float32
  (cv2.blendLinear) on that rectangle alone. Pixels outside it are never read or written.

Colour correction and the mouth mask are computed on the crop too (128² or 512² pixels), never on
the frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.types import Frame

FloatImage = npt.NDArray[np.float32]

MASK_MARGIN = 0.10
"""Zero border of the feathered mask, as a share of the crop side (the 'erode' step)."""

MASK_SIGMA = MASK_MARGIN / 3.0
"""Gaussian feather, as a share of the crop side. margin = 3σ: the mask is ~0 at the crop edge, so
the crop's own border (resampling fringe, black fill where the face left the frame) never shows."""


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


def feather_mask(size: int) -> FloatImage:
    """size×size float32 mask in aligned space: 1 in the middle, smoothly 0 at the edges."""
    margin = max(1, round(size * MASK_MARGIN))
    mask = np.zeros((size, size), np.float32)
    mask[margin : size - margin, margin : size - margin] = 1.0
    sigma = max(0.5, size * MASK_SIGMA)
    return cv2.GaussianBlur(mask, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_CONSTANT)


def _full_affine(M: npt.ArrayLike) -> npt.NDArray[np.float64]:
    m = np.asarray(M, np.float64)
    if m.shape != (2, 3):
        raise ValueError(f"M must be a 2×3 affine matrix, got shape {m.shape}")
    return np.vstack([m, [0.0, 0.0, 1.0]])


def paste_region(frame_shape: tuple[int, ...], crop_size: tuple[int, int], M: npt.ArrayLike) -> PasteRegion | None:
    """Bounding rectangle of the crop's footprint in the frame, clipped; None if fully outside."""
    height, width = frame_shape[:2]
    crop_w, crop_h = crop_size
    inverse = np.linalg.inv(_full_affine(M))[:2]
    corners = np.array([[0, 0, 1], [crop_w, 0, 1], [0, crop_h, 1], [crop_w, crop_h, 1]], np.float64)
    mapped = corners @ inverse.T
    # One pixel of slack each side: bilinear sampling reaches half a pixel past the corners.
    x0 = max(0, int(np.floor(mapped[:, 0].min())) - 1)
    y0 = max(0, int(np.floor(mapped[:, 1].min())) - 1)
    x1 = min(width, int(np.ceil(mapped[:, 0].max())) + 1)
    y1 = min(height, int(np.ceil(mapped[:, 1].max())) + 1)
    if x1 <= x0 or y1 <= y0:
        return None
    return PasteRegion(x0, y0, x1, y1)


def _roi_affine(M: npt.ArrayLike, region: PasteRegion) -> npt.NDArray[np.float64]:
    """M re-based so that ROI pixel (0, 0) is frame pixel (x0, y0): maps ROI → crop coordinates."""
    m = np.asarray(M, np.float64).copy()
    m[:, 2] += m[:, :2] @ np.array([region.x0, region.y0], np.float64)
    return m


def _crop_validity(frame_shape: tuple[int, ...], size: tuple[int, int], M: npt.ArrayLike) -> npt.NDArray[np.uint8] | None:
    """Which crop pixels came from inside the frame (1) vs the black fill (0); None = all inside.

    Only needed when the face is partly outside the frame, so statistics (colour correction) do
    not count the fill. Checking the four corners first keeps the common case free.
    """
    height, width = frame_shape[:2]
    crop_w, crop_h = size
    inverse = np.linalg.inv(_full_affine(M))[:2]
    corners = np.array([[0, 0, 1], [crop_w - 1, 0, 1], [0, crop_h - 1, 1], [crop_w - 1, crop_h - 1, 1]], np.float64)
    mapped = corners @ inverse.T
    if (mapped[:, 0] >= 0).all() and (mapped[:, 0] <= width - 1).all() and (mapped[:, 1] >= 0).all() and (mapped[:, 1] <= height - 1).all():
        return None
    ys, xs = np.mgrid[0:crop_h, 0:crop_w].astype(np.float32)
    fx = inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2]
    fy = inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2]
    inside = (fx >= 0) & (fx <= width - 1) & (fy >= 0) & (fy <= height - 1)
    return inside.astype(np.uint8)


def match_colour(swapped: Frame, original: Frame, region: npt.NDArray[np.uint8]) -> Frame:
    """Shift the swapped crop's LAB mean/std to the original crop's, measured where `region` ≠ 0.

    The swap model's output often has a slightly different white balance/exposure than the camera
    frame; matching the statistics of the face area (region = the inner part of the paste mask)
    hides that seam. Statistics use cv2.meanStdDev (one pass each); the correction is one affine
    map per LAB channel on the crop, applied as a lookup table.
    """
    if cv2.countNonZero(region) < 16:
        return swapped
    # 8-bit LAB (L scaled to 0..255, a/b offset by 128) is 5× cheaper than float LAB and the
    # per-channel affine map becomes a lookup table; the rounding costs under one grey level.
    src = cv2.cvtColor(swapped, cv2.COLOR_BGR2LAB)
    ref = cv2.cvtColor(original, cv2.COLOR_BGR2LAB)
    src_mean, src_std = (v.ravel() for v in cv2.meanStdDev(src, mask=region))
    ref_mean, ref_std = (v.ravel() for v in cv2.meanStdDev(ref, mask=region))
    # A flat channel (std ~0) would blow up the ratio; clamp it to a sane range.
    gain = np.clip(ref_std / np.maximum(src_std, 0.5), 0.5, 2.0)
    levels = np.arange(256, dtype=np.float64)[:, None]
    table = np.clip((levels - src_mean) * gain + ref_mean + 0.5, 0, 255).astype(np.uint8)
    corrected = cv2.LUT(src, table.reshape(256, 1, 3))
    return cv2.cvtColor(corrected, cv2.COLOR_LAB2BGR)


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


class Blender:
    """Pastes aligned crops back into frames, in place, on the face's region only."""

    def __init__(self, crop_size: int = 128, mouth_mask: bool = False, color_correction: bool = True) -> None:
        self.crop_size = crop_size
        self.mouth_mask = mouth_mask
        self.color_correction = color_correction
        self._masks: dict[int, tuple[FloatImage, npt.NDArray[np.uint8]]] = {}
        self._masks_for(crop_size)

    def mask_for(self, size: int) -> FloatImage:
        """The feathered mask for a square crop of this side, built on first use, then reused."""
        return self._masks_for(size)[0]

    def _masks_for(self, size: int) -> tuple[FloatImage, npt.NDArray[np.uint8]]:
        """(feathered mask, colour-statistics region = where the mask is ≥ 0.5), cached per size."""
        masks = self._masks.get(size)
        if masks is None:
            mask = feather_mask(size)
            masks = self._masks[size] = (mask, (mask >= 0.5).astype(np.uint8))
        return masks

    def paste(
        self,
        frame: Frame,
        swapped_crop: Frame,
        M: npt.ArrayLike,
        *,
        original_crop: Frame | None = None,
        mouth_kps: npt.ArrayLike | None = None,
        opacity: float = 1.0,
    ) -> PasteRegion | None:
        """Blend `swapped_crop` into `frame` in place where `M` says it came from.

        `M` maps frame → crop pixels (as returned with the aligned crop). `original_crop` is the
        frame's own aligned crop for colour correction; it is warped from the frame (crop-sized
        work) when not given. `mouth_kps` (the face's 5 keypoints, or just the 2 mouth corners, in
        frame coordinates) is needed for the mouth mask. Returns the rectangle touched, or None
        when the crop lies wholly outside the frame.
        """
        crop_h, crop_w = swapped_crop.shape[:2]
        if crop_h != crop_w:
            raise ValueError(f"aligned crops are square, got {crop_w}×{crop_h}")
        region = paste_region(frame.shape, (crop_w, crop_h), M)
        if region is None or opacity <= 0.0:
            return region
        alpha, stats_region = self._masks_for(crop_w)
        if self.color_correction or self.mouth_mask:
            if original_crop is None:
                # Warping to the crop's size reads only the face's pixels of the frame.
                original_crop = cv2.warpAffine(frame, np.asarray(M, np.float64), (crop_w, crop_h), flags=cv2.INTER_LINEAR)
        if self.color_correction:
            assert original_crop is not None
            region_mask = stats_region
            valid = _crop_validity(frame.shape, (crop_w, crop_h), M)
            if valid is not None:
                region_mask = region_mask * valid
            swapped_crop = match_colour(swapped_crop, original_crop, region_mask)
        if self.mouth_mask:
            if mouth_kps is None:
                raise ValueError("mouth_mask is on: pass mouth_kps (the face's keypoints in frame coordinates)")
            corners = np.asarray(mouth_kps, np.float64).reshape(-1, 2)[-2:]
            corners_crop = corners @ np.asarray(M, np.float64)[:, :2].T + np.asarray(M, np.float64)[:, 2]
            # Lower the alpha around the mouth: the frame's real mouth pixels stay exactly as they were.
            alpha = alpha * (1.0 - mouth_keep_mask((crop_w, crop_h), corners_crop))
        if opacity < 1.0:
            alpha = alpha * np.float32(opacity)

        roi_m = _roi_affine(M, region)
        size = (region.width, region.height)
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        warped = cv2.warpAffine(swapped_crop, roi_m, size, flags=flags, borderMode=cv2.BORDER_CONSTANT)
        weight = cv2.warpAffine(alpha, roi_m, size, flags=flags, borderMode=cv2.BORDER_CONSTANT)

        roi = frame[region.y0 : region.y1, region.x0 : region.x1]
        # One pass in float32 with a single rounding at the end (truncating instead would darken
        # every blended pixel by half a level): weight·swapped + (1 − weight)·frame. Where the
        # weight is 0 the frame pixel comes back bit-identical. 6× faster than the numpy
        # expression with its four ROI-sized float temporaries. Written straight into the frame's
        # ROI (element-wise, so reading and writing the same pixels is safe): no ROI-sized copy.
        cv2.blendLinear(warped, roi, weight, 1.0 - weight, dst=roi)
        return region
