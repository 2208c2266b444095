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
  straight into that rectangle with the translation adjusted, and cross-faded on that rectangle
  alone. Pixels outside it are never read or written. A face at least the crop's size is
  cross-faded premultiplied (`blend_premultiplied`: colours times alpha and the frame's share in
  one 8-bit 4-channel warp, then two 8-bit passes); a small one in float32 (cv2.blendLinear), after
  its colour correction on the rectangle.

The work follows the face's size in the frame, not the crop's:

- a crop much finer than its footprint (a 128² crop on a 25–50 px face: 3–5 crop pixels per frame
  pixel) is area-halved first, its mask and M with it, until it has fewer than SHRINK_RATIO crop
  pixels per frame pixel: the warp samples a crop fit for the face's size instead of aliasing, and
  the work per face is a fraction of the crop's (a 29-face group at 720p: 15.5 → 3.2 CPU-ms);
- colour correction is measured and applied on whichever is smaller: the crop (a large face, as
  before) or the paste rectangle, where the frame's own pixels are the original face (a small one);
- what depends on the swapped crop alone (its halvings, its LAB, its statistics) is kept per crop
  while the same swap is pasted again at later frames;
- per-face geometry (inverse, rectangle, corners) is plain float arithmetic, not 3×3 numpy calls.

A face whose crop is upsampled into the frame (the one-face case, a 181-px face at 720p) is pasted
as before but for the 8-bit weights of its premultiplied cross-fade (within 2 grey levels);
`Blender(..., footprint_sized=False)` pastes every face the old way, crop-sized and cross-faded in
float32 (the reference of benchmarks/paste_quality.py and tests/faces/test_blend_footprint.py).
The mouth mask is computed on the crop.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import cast

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import Frame, as_float32, as_frame

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


SHRINK_RATIO = 2.6
"""A crop with this many crop pixels or more per frame pixel (its face is much smaller in the frame
than in the crop) is area-halved before it is warped — its mask, colour work and M with it —
until it has fewer: the warp then resamples at 1.3–2.6 crop px per frame px, never the 3–5 of a
128² crop on a 25–50 px face, where bilinear sampling aliases. Measured on real faces
(benchmarks/paste_quality.py): from 2.6 on, halving is closer to both an anti-aliased
(8× supersampled) paste and, for an identity swap, to the camera frame itself; below, one bilinear
step from the full crop is (halving twice blurs more than a 2× bilinear step aliases)."""

MIN_SHRUNK_SIDE = 16
"""Crops are never halved below this side."""


def feather_mask(size: int) -> FloatImage:
    """size×size float32 mask in aligned space: 1 in the middle, smoothly 0 at the edges."""
    margin = max(1, round(size * MASK_MARGIN))
    mask = np.zeros((size, size), np.float32)
    mask[margin : size - margin, margin : size - margin] = 1.0
    sigma = max(0.5, size * MASK_SIGMA)
    return as_float32(cv2.GaussianBlur(mask, (0, 0), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_CONSTANT))


Affine6 = tuple[float, float, float, float, float, float]
"""A 2×3 affine as six Python floats (a, b, c, d, e, f): x' = a·x + b·y + c, y' = d·x + e·y + f.
Per-face geometry in plain floats: a 3×3 `np.linalg.inv` and corner products cost ~20 µs a
call, the same arithmetic on six floats ~2 µs — it adds up over a group's faces."""


def _affine6(M: npt.ArrayLike) -> Affine6:
    m = np.asarray(M, np.float64)
    if m.shape != (2, 3):
        raise ValueError(f"M must be a 2×3 affine matrix, got shape {m.shape}")
    a, b, c, d, e, f = m.ravel().tolist()
    return a, b, c, d, e, f


def _invert6(m: Affine6) -> Affine6:
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


def _region(frame_shape: tuple[int, ...], crop_w: int, crop_h: int, inverse: Affine6) -> PasteRegion | None:
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
    return _region(frame_shape, crop_size[0], crop_size[1], _invert6(_affine6(M)))


def _roi_affine(m: Affine6, region: PasteRegion) -> npt.NDArray[np.float64]:
    """M re-based so that ROI pixel (0, 0) is frame pixel (x0, y0): maps ROI → crop coordinates."""
    a, b, c, d, e, f = m
    x0, y0 = region.x0, region.y0
    return np.array(((a, b, c + a * x0 + b * y0), (d, e, f + d * x0 + e * y0)), np.float64)


def _crop_validity(frame_shape: tuple[int, ...], size: tuple[int, int], inverse: Affine6) -> npt.NDArray[np.uint8] | None:
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


def _halve(image: np.ndarray) -> np.ndarray:
    """The image at half its side, each pixel the mean of a 2×2 block (INTER_AREA at exactly ½)."""
    side = image.shape[0] // 2
    return cv2.resize(image, (side, side), interpolation=cv2.INTER_AREA)


def _halved_affine(m: Affine6) -> Affine6:
    """M for the halved crop: crop pixel x (centre at x) lies at (x − ½)/2 in the half-size crop."""
    a, b, c, d, e, f = m
    return a * 0.5, b * 0.5, c * 0.5 - 0.25, d * 0.5, e * 0.5, f * 0.5 - 0.25


_LEVELS = np.arange(256, dtype=np.float64)[:, None]

LAB_BLACK = (0, 128, 128, 0)
"""Black in OpenCV's 8-bit LAB: the fill where a warped LAB crop reaches past the crop."""

MIN_STATS_PIXELS = 16
"""Fewer pixels than this in the statistics region: no colour correction (nothing to measure)."""

Stats = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]
"""Per-channel mean and standard deviation (3×1 each), as cv2.meanStdDev returns them."""


def _mean_std(image: Frame, mask: npt.NDArray[np.uint8]) -> Stats:
    """cv2.meanStdDev where `mask` ≠ 0, as the float64 arrays it returns (its stubs say any depth)."""
    return cast(Stats, cv2.meanStdDev(image, mask=mask))


def _colour_table(src: Stats, ref: Stats) -> npt.NDArray[np.uint8]:
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
    table = _colour_table(_mean_std(src, region), _mean_std(ref, region))
    return as_frame(cv2.cvtColor(cv2.LUT(src, table), cv2.COLOR_LAB2BGR))


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


class _Prepared:
    """One swapped crop at one level (halved `halvings` times), as pastes need it: its pixels and,
    for colour correction, its LAB and statistics over the level's region — computed on first use,
    kept while the same crop is pasted again (a live swap is pasted at every frame until the next
    one arrives). Warped forms have a fourth channel (see `_warp4`)."""

    __slots__ = ("pixels", "_bgra", "_lab", "_lab4", "_stats")

    def __init__(self, pixels: Frame) -> None:
        self.pixels = pixels
        self._bgra: Frame | None = None
        self._lab: Frame | None = None
        self._lab4: Frame | None = None
        self._stats: Stats | None = None

    def bgra(self) -> Frame:
        if self._bgra is None:
            self._bgra = as_frame(cv2.cvtColor(self.pixels, cv2.COLOR_BGR2BGRA))
        return self._bgra

    def lab(self) -> Frame:
        if self._lab is None:
            self._lab = as_frame(cv2.cvtColor(self.pixels, cv2.COLOR_BGR2LAB))
        return self._lab

    def lab4(self) -> Frame:
        """The LAB crop with a fourth (unused) channel, for `_warp4`."""
        if self._lab4 is None:
            self._lab4 = as_frame(cv2.cvtColor(self.lab(), cv2.COLOR_BGR2BGRA))  # appends a channel; LAB stays LAB
        return self._lab4

    def stats(self, region: npt.NDArray[np.uint8]) -> Stats:
        """LAB statistics where `region` ≠ 0; `region` is always the level's statistics region."""
        if self._stats is None:
            self._stats = _mean_std(self.lab(), region)
        return self._stats


def _warp4(image4: Frame, roi_m: npt.NDArray[np.float64], size: tuple[int, int], border: tuple[int, ...] = (0, 0, 0, 0)) -> Frame:
    """Warp a 4-channel 8-bit image into the paste rectangle and drop the fourth channel. OpenCV
    warps 8-bit images with 4 channels through its SIMD path and 3-channel ones without it: the
    same pixels, bit for bit, in half the time or less (a 330² paste rectangle: 527 → 270 µs)."""
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    warped = cv2.warpAffine(image4, roi_m, size, flags=flags, borderMode=cv2.BORDER_CONSTANT, borderValue=border)
    return as_frame(cv2.cvtColor(warped, cv2.COLOR_BGRA2BGR))  # drops the fourth channel, whatever the colours


PREPARED_PIXELS = 64 * 128 * 128
"""How many pixels of prepared crops (at their level) a Blender keeps, the oldest dropped first: 64
swapped 128² crops (more than a group photo's faces) or 256 halved ones, 4 restored 512² ones
pasted whole — ~14 MB at most."""


class Blender:
    """Pastes aligned crops back into frames, in place, on the face's region only.

    A Blender keeps what it derived from the crops it pasted last (see `_Prepared`, bounded by
    PREPARED_PIXELS), by the crop array's identity, through a weak reference (a halved crop's
    original is not kept alive): a crop must not be modified in place once pasted (swap results
    never are).
    One thread at a time per Blender (the live loop's, or the swap worker's for the enhancer's).
    """

    def __init__(self, crop_size: int = 128, mouth_mask: bool = False, color_correction: bool = True, *,
                 footprint_sized: bool = True) -> None:
        self.crop_size = crop_size
        self.mouth_mask = mouth_mask
        self.color_correction = color_correction
        # False: every paste works at the crop's size, whatever the face's size in the frame — the
        # paste as it was before, kept as the reference the quality tests and
        # benchmarks/paste_quality.py compare with.
        self.footprint_sized = footprint_sized
        # (crop side, halvings) → (feathered mask, colour-statistics region): the crop side's own
        # mask, or that mask area-halved as often as the crop is.
        self._masks: dict[tuple[int, int], tuple[FloatImage, npt.NDArray[np.uint8]]] = {}
        self._masks_for(crop_size)
        self._weights: dict[tuple[int, int], FloatImage] = {}  # the same keys: `_weights_for`
        if color_correction:
            # OpenCV builds its LAB tables at the first BGR→LAB conversion of the process (~110 ms
            # here): now, where the face engine is built off the loop, not at the first paste —
            # that froze the first swapped frame.
            cv2.cvtColor(np.zeros((1, 1, 3), np.uint8), cv2.COLOR_BGR2LAB)
        # (id(crop), halvings) → (a weak reference to the crop, its prepared form): an entry is the
        # crop's only while that crop lives (a new array may get a dead one's id).
        self._prepared: dict[tuple[int, int], tuple[weakref.ref[Frame], _Prepared]] = {}
        self._prepared_pixels = 0

    def mask_for(self, size: int) -> FloatImage:
        """The feathered mask for a square crop of this side, built on first use, then reused."""
        return self._masks_for(size)[0]

    def _masks_for(self, size: int, halvings: int = 0) -> tuple[FloatImage, npt.NDArray[np.uint8]]:
        """(feathered mask, colour-statistics region = where the mask is ≥ 0.5), cached per size and
        level: a crop halved n times is pasted with its side's mask halved n times (the same
        footprint, averaged like the crop's pixels)."""
        key = (size, halvings)
        masks = self._masks.get(key)
        if masks is None:
            mask = feather_mask(size) if halvings == 0 else _halve(self._masks_for(size, halvings - 1)[0])
            masks = self._masks[key] = (mask, (mask >= 0.5).astype(np.uint8))
        return masks

    def _prepare(self, crop: Frame, halvings: int) -> _Prepared:
        key = (id(crop), halvings)
        kept = self._prepared.pop(key, None)
        if kept is not None:
            self._prepared_pixels -= kept[1].pixels.shape[0] ** 2
            if kept[0]() is not crop:
                kept = None
        pixels = crop
        if kept is None:
            for _ in range(halvings):
                pixels = _halve(pixels)
        prepared = _Prepared(pixels) if kept is None else kept[1]
        size = prepared.pixels.shape[0] ** 2
        while self._prepared and self._prepared_pixels + size > PREPARED_PIXELS:
            _, oldest = self._prepared.pop(next(iter(self._prepared)))
            self._prepared_pixels -= oldest.pixels.shape[0] ** 2
        self._prepared[key] = (weakref.ref(crop), prepared)  # re-inserted: the newest
        self._prepared_pixels += size
        return prepared

    def paste(
        self,
        frame: Frame,
        swapped_crop: Frame,
        M: npt.ArrayLike,
        *,
        original_crop: Frame | None = None,
        mouth_kps: npt.ArrayLike | None = None,
        opacity: float = 1.0,
        keep: FloatImage | None = None,
    ) -> PasteRegion | None:
        """Blend `swapped_crop` into `frame` in place where `M` says it came from.

        `M` maps frame → crop pixels (as returned with the aligned crop). `original_crop` is the
        frame's own aligned crop, for colour correction in crop space; it is warped from the frame
        (crop-sized work) when not given. `mouth_kps` (the face's 5 keypoints, or just the 2 mouth
        corners, in frame coordinates) is needed for the mouth mask. `keep` (crop-sized, [0, 1]: the
        face parser's regions) limits where the swap shows, by its minimum with the feathered mask:
        elsewhere the frame's own pixels (a hand in front of the face) stay. Returns the rectangle touched,
        or None when the crop lies wholly outside the frame.

        The work follows the face's size in the frame, not the crop's: a crop much finer than its
        footprint is area-halved first (`SHRINK_RATIO`), and a face whose paste rectangle has
        fewer pixels than the crop is colour-corrected there (`_in_frame_space`).
        """
        side = swapped_crop.shape[0]
        if swapped_crop.shape[1] != side:
            raise ValueError(f"aligned crops are square, got {swapped_crop.shape[1]}×{side}")
        m = _affine6(M)
        inverse = _invert6(m)
        region = _region(frame.shape, side, side, inverse)
        if region is None or opacity <= 0.0:
            return region
        if self.mouth_mask and mouth_kps is None:
            raise ValueError("mouth_mask is on: pass mouth_kps (the face's keypoints in frame coordinates)")
        halvings = 0
        while (self.footprint_sized and math.sqrt(abs(m[0] * m[4] - m[1] * m[3])) >= SHRINK_RATIO
               and side % 2 == 0 and side > MIN_SHRUNK_SIDE):
            m = _halved_affine(m)
            side //= 2
            halvings += 1
            if original_crop is not None:
                original_crop = _halve(original_crop)
        prepared = self._prepare(swapped_crop, halvings)
        alpha, stats_region = self._masks_for(swapped_crop.shape[0], halvings)
        small_face = self.footprint_sized and _in_frame_space(region, side)
        in_frame = self.color_correction and small_face
        pixels4 = prepared.bgra() if not self.color_correction else None
        if self.color_correction and not in_frame:
            pixels4 = self._corrected_crop(frame, prepared, m, side, stats_region, original_crop)
        plain_alpha = alpha
        if self.mouth_mask:
            a, b, c, d, e, f = m
            (lx, ly), (rx, ry) = np.asarray(mouth_kps, np.float64).reshape(-1, 2)[-2:].tolist()
            corners_crop = ((a * lx + b * ly + c, d * lx + e * ly + f), (a * rx + b * ry + c, d * rx + e * ry + f))
            # Lower the alpha around the mouth: the frame's real mouth pixels stay exactly as they were.
            alpha = alpha * (1.0 - mouth_keep_mask((side, side), corners_crop))
        if keep is not None:  # the face parser's regions: nothing of the swap outside them
            shown = keep if keep.shape[0] == side else cv2.resize(keep, (side, side), interpolation=cv2.INTER_AREA)
            alpha = np.minimum(alpha, shown.astype(np.float32, copy=False))

        roi_m = _roi_affine(m, region)
        roi = frame[region.y0 : region.y1, region.x0 : region.x1]
        if self.footprint_sized and not small_face:  # a face at least the crop's size: premultiplied
            assert pixels4 is not None
            if alpha is plain_alpha and opacity >= 1.0:
                weights = self._weights_for(swapped_crop.shape[0], halvings)
            else:
                weights = premultiply_weights(alpha * np.float32(min(opacity, 1.0)))
            blend_premultiplied(roi, pixels4, weights, roi_m)
            return region
        size = (region.width, region.height)
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        weight = as_float32(cv2.warpAffine(alpha, roi_m, size, flags=flags, borderMode=cv2.BORDER_CONSTANT))
        if in_frame:
            lab = _warp4(prepared.lab4(), roi_m, size, LAB_BLACK)
            plain = weight if plain_alpha is alpha else cv2.warpAffine(plain_alpha, roi_m, size, flags=flags, borderMode=cv2.BORDER_CONSTANT)
            # OpenCV compares with a scalar; its stubs take only an array as the second operand.
            warped = _corrected_roi(lab, roi, as_frame(cv2.compare(plain, 0.5, cv2.CMP_GE)))  # type: ignore[call-overload]
        else:
            assert pixels4 is not None
            warped = _warp4(pixels4, roi_m, size)
        if opacity < 1.0:
            weight *= np.float32(opacity)
        # A small face corrected on its paste rectangle (or any face with footprint_sized off, the
        # reference): one pass in float32 with a single rounding at the end (truncating instead
        # would darken every blended pixel by half a level): weight·swapped + (1 − weight)·frame.
        # Where the weight is 0 the frame pixel comes back bit-identical. Written straight into
        # the frame's ROI (element-wise, so reading and writing the same pixels is safe): no
        # ROI-sized copy.
        cv2.blendLinear(warped, roi, weight, 1.0 - weight, dst=roi)
        return region

    def _weights_for(self, size: int, halvings: int) -> FloatImage:
        """The level's plain mask as `blend_premultiplied` weights (kept like the mask itself)."""
        key = (size, halvings)
        weights = self._weights.get(key)
        if weights is None:
            weights = self._weights[key] = premultiply_weights(self._masks_for(size, halvings)[0])
        return weights

    def _corrected_crop(self, frame: Frame, prepared: _Prepared, m: Affine6, side: int, stats_region: npt.NDArray[np.uint8],
                        original_crop: Frame | None) -> Frame:
        """Colour correction in crop space (`match_colour`, with the swapped crop's LAB and, for a
        face wholly inside the frame, its statistics kept from the last paste of the same crop):
        the corrected crop, with a fourth channel for `_warp4`."""
        if original_crop is None:
            # Warping to the crop's size reads only the face's pixels of the frame.
            original_crop = as_frame(cv2.warpAffine(frame, np.array((m[:3], m[3:]), np.float64), (side, side), flags=cv2.INTER_LINEAR))
        valid = _crop_validity(frame.shape, (side, side), _invert6(m))
        if valid is None:
            region, src = stats_region, prepared.stats(stats_region)
        else:
            region = stats_region * valid
            if cv2.countNonZero(region) < MIN_STATS_PIXELS:
                return prepared.bgra()
            src = _mean_std(prepared.lab(), region)
        ref = _mean_std(as_frame(cv2.cvtColor(original_crop, cv2.COLOR_BGR2LAB)), region)
        return as_frame(cv2.cvtColor(cv2.LUT(prepared.lab(), _colour_table(src, ref)), cv2.COLOR_LAB2BGR, dstCn=4))


def premultiply_weights(alpha: FloatImage) -> FloatImage:
    """(alpha, alpha, alpha, 1 − alpha) per crop pixel: what a BGRA crop (A = 255) is multiplied by
    to become `blend_premultiplied`'s premultiplied crop."""
    return as_float32(cv2.merge((alpha, alpha, alpha, 1.0 - alpha)))


def blend_premultiplied(roi: Frame, pixels4: Frame, weights: FloatImage, roi_m: npt.NDArray[np.float64]) -> None:
    """Cross-fade a crop into `roi`, in place: roi = alpha·crop + (1 − alpha)·roi, with the BGRA
    crop (A = 255) and its `premultiply_weights(alpha)` in crop space and `roi_m` mapping roi →
    crop pixels.

    The crop is premultiplied where it is small, in crop space: its colours times alpha, and in
    its fourth channel the frame's share (1 − alpha)·255. One 4-channel 8-bit warp (`_warp4`'s
    SIMD path) carries both to the paste rectangle; there roi·share/255 + colours are two 8-bit
    passes. Warping the alpha as float32 and cross-fading with cv2.blendLinear did the same with
    three ROI-sized passes more (docs/performance.md: a 1080p face's paste). Both weights are
    8-bit here, so along the feathered edge a blended pixel is within 2 grey levels of the float
    blend; at a steep edge (the mouth mask's) premultiplied colours interpolate differently, by a
    few levels at a few dozen pixels (tests/faces/test_blend_footprint.py). Where alpha is 0 the
    frame pixel comes back bit-identical, and where it is 1 the crop's."""
    premultiplied = cv2.multiply(pixels4, weights, dtype=cv2.CV_8U)
    # Outside the crop: no colour, all frame — the frame pixel is kept.
    warped = cv2.warpAffine(premultiplied, roi_m, (roi.shape[1], roi.shape[0]), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                            borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0, 255))
    share = cv2.cvtColor(cv2.extractChannel(warped, 3), cv2.COLOR_GRAY2BGR)
    cv2.multiply(roi, share, dst=roi, scale=1.0 / 255.0)
    cv2.add(roi, cv2.cvtColor(warped, cv2.COLOR_BGRA2BGR), dst=roi)


def _corrected_roi(lab: Frame, roi: Frame, region: npt.NDArray[np.uint8]) -> Frame:
    """Colour correction in frame space: `lab` is the swapped crop's LAB (kept per crop) warped
    onto the paste rectangle, `roi` the frame's own pixels there (the original face), `region`
    where the paste's mask is ≥ ½. Both statistics are taken here, on the pixels pasted (measured
    on the real faces of benchmarks/paste_quality.py, the swapped crop's own statistics in crop
    space matched the face's colour less well: a bilinear step down changes its spread)."""
    if cv2.countNonZero(region) < MIN_STATS_PIXELS:
        return as_frame(cv2.cvtColor(lab, cv2.COLOR_LAB2BGR))
    table = _colour_table(_mean_std(lab, region), _mean_std(as_frame(cv2.cvtColor(roi, cv2.COLOR_BGR2LAB)), region))
    return as_frame(cv2.cvtColor(cv2.LUT(lab, table), cv2.COLOR_LAB2BGR))


def _inside(frame_shape: tuple[int, ...], inverse: Affine6, side: int) -> bool:
    """Whether the whole crop (side × side) maps inside the frame."""
    height, width = frame_shape[:2]
    xs, ys = _corners(inverse, side - 1, side - 1)
    return min(xs) >= 0 and max(xs) <= width - 1 and min(ys) >= 0 and max(ys) <= height - 1


def _in_frame_space(region: PasteRegion, crop_side: int) -> bool:
    """Colour-correct in frame space (after the warp, on the paste rectangle, where the frame's own
    pixels are the original face) when that rectangle has fewer pixels than the crop: a small face.
    A large face is corrected in crop space, before the warp, as it always was."""
    return region.width * region.height < crop_side * crop_side
