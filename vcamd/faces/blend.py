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
The mouth mask is computed on the crop. Where the crop lands: `footprint`; the masks: `masks`; the
colour correction: `colour`.
"""

from __future__ import annotations

import collections
import math
import weakref
from collections.abc import Callable

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import Frame, as_float32, as_frame
from vcamd.faces.colour import LAB_BLACK, MIN_STATS_PIXELS, Stats, colour_table, corrected_roi, mean_std
from vcamd.faces.footprint import (
    Affine6,
    PasteRegion,
    affine6,
    crop_validity,
    footprint_region,
    halved_affine,
    invert6,
    roi_affine,
)
from vcamd.faces.masks import FloatImage, feather_mask, mouth_keep_mask

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


def _halve(image: np.ndarray) -> np.ndarray:
    """The image at half its side, each pixel the mean of a 2×2 block (INTER_AREA at exactly ½)."""
    side = image.shape[0] // 2
    return cv2.resize(image, (side, side), interpolation=cv2.INTER_AREA)


class _Prepared:
    """One swapped crop at one level (halved `halvings` times), as pastes need it: its pixels and,
    for colour correction, its LAB and statistics over the level's region — computed on first use,
    kept while the same crop is pasted again (a live swap is pasted at every frame until the next
    one arrives). Warped forms have a fourth channel (see `_warp4`). The crop itself is held by a
    weak reference (`crop`): the entry never keeps it alive, and goes when it goes."""

    __slots__ = ("crop", "side", "_halved", "_bgra", "_lab", "_lab4", "_stats")

    def __init__(self, crop: weakref.ref[Frame], halved: Frame | None, side: int) -> None:
        self.crop = crop
        self.side = side  # of the level's pixels
        self._halved = halved  # the level's own pixels; None: the crop's (level 0)
        self._bgra: Frame | None = None
        self._lab: Frame | None = None
        self._lab4: Frame | None = None
        self._stats: Stats | None = None

    @property
    def pixels(self) -> Frame:
        pixels = self._halved if self._halved is not None else self.crop()
        if pixels is None:  # never: a level is read only while its crop is being pasted
            raise RuntimeError("the prepared crop is gone")
        return pixels

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
            self._stats = mean_std(self.lab(), region)
        return self._stats


def _warp4(image4: Frame, roi_m: npt.NDArray[np.float64], size: tuple[int, int], border: tuple[int, ...] = (0, 0, 0, 0)) -> Frame:
    """Warp a 4-channel 8-bit image into the paste rectangle and drop the fourth channel. OpenCV
    warps 8-bit images with 4 channels through its SIMD path and 3-channel ones without it: the
    same pixels, bit for bit, in half the time or less (a 330² paste rectangle: 527 → 270 µs)."""
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    warped = cv2.warpAffine(image4, roi_m, size, flags=flags, borderMode=cv2.BORDER_CONSTANT, borderValue=border)
    return as_frame(cv2.cvtColor(warped, cv2.COLOR_BGRA2BGR))  # drops the fourth channel, whatever the colours


PREPARED_PIXELS = 256 * 128 * 128
"""How many pixels of prepared crops (at their level) a Blender keeps at most, the oldest dropped
first; an entry goes as soon as its crop does (a live swap book holds one crop a face): 256 swapped
128² crops — a crowd's faces, every one pasted again when the camera's picture steps (exposure, a
clip's restart: 150 faces 45 → 36 ms) — or 1,024 halved ones, 16 restored 512² ones pasted whole;
~30 MB at most (the crops' LAB forms), held only while that many crops live."""


class Blender:
    """Pastes aligned crops back into frames, in place, on the face's region only.

    A Blender keeps what it derived from the crops it pasted last (see `_Prepared`, bounded by
    PREPARED_PIXELS), by the crop array's identity, through a weak reference (no crop is kept
    alive by it, and what was derived from a crop goes with it): a crop must not be modified in
    place once pasted (swap results never are).
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
        # (id(crop), halvings) → its prepared form: an entry is the crop's only while that crop lives
        # (a new array may get a dead one's id). The keys of crops gone since, told by their weak
        # references' callbacks (on whichever thread dropped the crop), are dropped at the next paste.
        self._prepared: dict[tuple[int, int], _Prepared] = {}
        self._prepared_pixels = 0
        self._gone: collections.deque[tuple[int, int]] = collections.deque()

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
        while self._gone:
            gone = self._gone.popleft()
            entry = self._prepared.get(gone)
            if entry is not None and entry.crop() is None:
                del self._prepared[gone]
                self._prepared_pixels -= entry.side**2
        key = (id(crop), halvings)
        prepared = self._prepared.pop(key, None)
        if prepared is not None:
            self._prepared_pixels -= prepared.side**2
            if prepared.crop() is not crop:
                prepared = None
        if prepared is None:
            pixels = crop
            for _ in range(halvings):
                pixels = _halve(pixels)
            prepared = _Prepared(weakref.ref(crop, _teller(self._gone, key)), pixels if halvings else None, pixels.shape[0])
        size = prepared.side**2
        while self._prepared and self._prepared_pixels + size > PREPARED_PIXELS:
            oldest = self._prepared.pop(next(iter(self._prepared)))
            self._prepared_pixels -= oldest.side**2
        self._prepared[key] = prepared  # re-inserted: the newest
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
        m = affine6(M)
        inverse = invert6(m)
        region = footprint_region(frame.shape, side, side, inverse)
        if region is None or opacity <= 0.0:
            return region
        if self.mouth_mask and mouth_kps is None:
            raise ValueError("mouth_mask is on: pass mouth_kps (the face's keypoints in frame coordinates)")
        halvings = 0
        while (self.footprint_sized and math.sqrt(abs(m[0] * m[4] - m[1] * m[3])) >= SHRINK_RATIO
               and side % 2 == 0 and side > MIN_SHRUNK_SIDE):
            m = halved_affine(m)
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
            pixels4 = self._corrected_crop(frame, prepared, m, side, (swapped_crop.shape[0], halvings), original_crop)
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

        roi_m = roi_affine(m, region)
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
            warped = corrected_roi(lab, roi, as_frame(cv2.compare(plain, 0.5, cv2.CMP_GE)))  # type: ignore[call-overload]
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

    def _corrected_crop(self, frame: Frame, prepared: _Prepared, m: Affine6, side: int, level: tuple[int, int],
                        original_crop: Frame | None) -> Frame:
        """Colour correction in crop space (`match_colour`, with the swapped crop's LAB and, for a
        face wholly inside the frame, its statistics kept from the last paste of the same crop):
        the corrected crop, with a fourth channel for `_warp4`. When the frame's face is not at
        hand (`original_crop`), its statistics are taken on every other pixel of every other row
        of its crop, warped straight from the frame: a quarter of the pixels warped, converted
        and measured, the same correction within a level or two (benchmarks/paste_quality.py)."""
        stats_region = self._masks_for(*level)[1]
        valid = crop_validity(frame.shape, (side, side), invert6(m))
        if valid is None:
            region, src = stats_region, prepared.stats(stats_region)
        else:
            region = stats_region * valid
            if cv2.countNonZero(region) < MIN_STATS_PIXELS:
                return prepared.bgra()
            src = mean_std(prepared.lab(), region)
        # Every other crop pixel of every other row (the affine scaled by ½: crop pixel 2i lands at i):
        # the same pixels the whole warp has there, in the same statistics region.
        every_other = (m[0] / 2, m[1] / 2, m[2] / 2, m[3] / 2, m[4] / 2, m[5] / 2)
        if (original_crop is None and valid is None and side % 2 == 0
                and crop_validity(frame.shape, (side // 2, side // 2), invert6(every_other)) is None):
            m, side, region = every_other, side // 2, np.ascontiguousarray(region[::2, ::2])
        if original_crop is None:  # warping to the crop's size reads only the face's pixels of the frame
            original_crop = as_frame(cv2.warpAffine(frame, np.array((m[:3], m[3:]), np.float64), (side, side), flags=cv2.INTER_LINEAR))
        ref = mean_std(as_frame(cv2.cvtColor(original_crop, cv2.COLOR_BGR2LAB)), region)
        return as_frame(cv2.cvtColor(cv2.LUT(prepared.lab(), colour_table(src, ref)), cv2.COLOR_LAB2BGR, dstCn=4))


def _teller(gone: collections.deque[tuple[int, int]], key: tuple[int, int]) -> Callable[[weakref.ref[Frame]], None]:
    """A weak reference's callback that tells `gone` the key of the crop it referred to (it holds
    the queue, never the Blender: no cycle keeps either alive)."""

    def tell(_: weakref.ref[Frame]) -> None:
        gone.append(key)

    return tell


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


def _in_frame_space(region: PasteRegion, crop_side: int) -> bool:
    """Colour-correct in frame space (after the warp, on the paste rectangle, where the frame's own
    pixels are the original face) when that rectangle has fewer pixels than the crop: a small face.
    A large face is corrected in crop space, before the warp, as it always was."""
    return region.width * region.height < crop_side * crop_side
