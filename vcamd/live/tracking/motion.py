"""Whether a tracked face only moved since the detector last saw it — then it need not run again.

The crop re-detection (a 192² SCRFD run per face, ~5 ms of CPU here) is the largest per-frame cost
of tracking one face. On many frames the face in its crop has not changed but for a shift: a still
face, a head sliding in the picture, a still group photo. `follow` tells those frames apart from
the rest by the pixels themselves, cheaply (~0.3 ms per face, on the caller's thread):

* the face's **key patch** is the grey square around it (CROP_FACTOR × its box, as the tracking
  crop; at most KEY_SIDE pixels a side, downscaled by a whole factor) cut from the frame where the
  detector found it, with that detection;
* in a later frame the same square is cut where the face was last reported, the shift between the
  two measured by phase correlation (sub-pixel), and the key patch moved by that shift is compared
  with the new one block by block over the face's box. Only when **every block** of the face
  matches within BLOCK_LIMIT grey levels (mean absolute difference; a blink, a mouth opening, a
  turn of the head, a lean towards the camera, a change of light all break that) is the face taken
  to be the key detection moved by the shift — box and keypoints;
* always against the key frame, never the previous frame, so small shifts do not add up to a
  drift; and the detector looks again at least every REDETECT_EVERY frames, whatever the pixels say.

The tracker asks for every tracked face at once (`follow_many`): the faces whose square has not
moved are checked at no shift in batches (their boxes' pixels cut, made grey and compared
together, `_still`) and taken as is when every block is within ZERO_LIMIT (a still picture) or
within BLOCK_LIMIT with no shift in the difference (a still face before a camera's sensor noise,
`_no_shift`); the rest are measured one by one. A crowd's still faces cost one pass, not a call each.

A face that fails the check (or whose square is larger than the frame, or moved more than
MAX_SHIFT of its square) is re-detected in its crop as before; a square that would reach past the
frame's edge is moved inside it (at the edge a face is compared as anywhere else): this never decides that a face is gone, only
that one whose pixels are all still there, moved, is where they moved to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import cv2
import numpy as np

from vcamd.common.types import Face, Frame
from vcamd.live.tracking.cropplan import CROP_FACTOR

KEY_SIDE = 104
"""The key patch's side at most, in patch pixels (a larger square is downscaled by a whole factor)."""

MIN_SIDE = 16
"""A face whose square is smaller than this is always re-detected (too few pixels to compare)."""

REDETECT_EVERY = 16
"""The detector re-detects a followed face at least every this many frames (15 frames in 16 may be
followed by their pixels; 0.53 s at 30 fps). A backstop, not what keeps the keypoints right: every
followed frame is checked against the key frame, so a change the check lets through is small
however long it lasts (under a 2° turn, 2 % scaling, an opening mouth: tests/live/test_motion.py),
and a change that adds up fails it. Each look is a crop detection: with det_10g's cost
(`loop_cost.py --at-10g`) 8 cost one face 2.0 CPU-ms a frame in crop looks against 1.1 at 16, a
29-face group 4.5–6.4 against 3.5–3.9 (docs/performance.md); the paste's steadiness
(`benchmarks/steady.py`) gives the same figures at both. 4 cost a 29-face group a full mosaic, 29 pastes and a
29-face swap job every 4th frame — spikes near the 40 ms budget that the watchdog took for
overload."""

MAX_SHIFT = 0.25
"""A face that moved more than this share of its square since the key frame is re-detected."""

BLOCK_GRID = 4
"""The face's box is compared as BLOCK_GRID × BLOCK_GRID blocks."""

BLOCK_LIMIT = 6.0
"""The most any block's mean absolute grey difference may be for the face to count as moved, not
changed. MJPG at 720p differs by 0.3–1.5 between shifted copies of one face; scaling the face by
2 %, turning it by 2° or opening the mouth raises some block above 5 (tests/live/test_motion.py)."""

ZERO_LIMIT = 1.0
"""A patch whose every block differs by at most this at no shift at all did not move (a still
picture): taken as is, without measuring the shift."""


@dataclass(frozen=True, slots=True)
class KeyPatch:
    """A face where the detector last found it, and the grey pixels around it then."""

    face: Face  # the detection, frame coordinates
    patch: np.ndarray  # float32 grey, n × n
    x0: int  # the square's top-left corner in the frame (whole pixels)
    y0: int
    factor: int  # frame pixels per patch pixel
    frame_index: int
    due: int = -1
    """The frame index from which the detector looks at the face again whatever its pixels say
    (-1: frame_index + REDETECT_EVERY)."""
    coarse: bool = False
    """Its face is a full look's detection (coarser keypoints than the face's own crop gives)."""
    box: tuple[int, int, int, int] = (0, 0, 0, 0)
    """The face's box in patch pixels (`_face_box`): the part compared."""
    texture: list[KeyTexture] = field(init=False, default_factory=list, compare=False, repr=False)
    """Its `KeyTexture`, made the first time a noisy frame asks (`_no_shift`) and kept with the key:
    it is the key's own, the same for every frame compared with it (a key lives up to REDETECT_EVERY
    frames). Not copied by `replace`: a key made from another makes its own."""

    @property
    def redetect_at(self) -> int:
        return self.due if self.due >= 0 else self.frame_index + REDETECT_EVERY

    @property
    def side(self) -> int:
        return int(self.patch.shape[0]) * self.factor


@dataclass(frozen=True, slots=True)
class KeyTexture:
    """What `_no_shift` needs of a key's box alone: its grey gradient (central differences, halved)
    over the box's inner pixels (their neighbours inside it), its sums of squares and products,
    and whether it has the texture to tell a shift from noise (MIN_TEXTURE)."""

    gx: np.ndarray  # (h − 2) × (w − 2), float32
    gy: np.ndarray
    gxx: float
    gyy: float
    gxy: float
    textured: bool

    @classmethod
    def of(cls, key: KeyPatch) -> KeyTexture:
        if not key.texture:
            bx0, by0, bx1, by1 = key.box
            box = key.patch[by0:by1, bx0:bx1]
            gx = (box[1:-1, 2:] - box[1:-1, :-2]) * np.float32(0.5)
            gy = (box[2:, 1:-1] - box[:-2, 1:-1]) * np.float32(0.5)
            gxx, gyy, gxy = float(np.vdot(gx, gx)), float(np.vdot(gy, gy)), float(np.vdot(gx, gy))  # float32 sums: a gate, not a measure
            weaker = (gxx + gyy) / 2 - math.hypot((gxx - gyy) / 2, gxy)
            key.texture.append(cls(gx, gy, gxx, gyy, gxy, weaker >= MIN_TEXTURE * max(gx.size, 1)))
        return key.texture[0]


def _geometry(face: Face, frame_hw: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """(x0, y0, n, factor) of the square around `face`, moved inside the frame where it would
    reach past an edge (a face at the edge is compared as well as any: the square is only where
    its pixels are looked at); None for a face too small to compare, or a square larger than the
    frame."""
    nominal = CROP_FACTOR * max(face.width, face.height, 1.0)
    if nominal < MIN_SIDE:
        return None
    factor = max(1, int(round(nominal / KEY_SIDE)))
    n = max(MIN_SIDE, int(round(nominal / factor)))
    side = n * factor
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    inside = _inside(int(round(cx - side / 2)), int(round(cy - side / 2)), side, frame_hw)
    return None if inside is None else (*inside, n, factor)


def _inside(x0: int, y0: int, side: int, frame_hw: tuple[int, int]) -> tuple[int, int] | None:
    """The corner of a `side` square at (x0, y0) moved the least to lie inside the frame (None:
    the square is larger than the frame)."""
    h, w = frame_hw
    if side > w or side > h:
        return None
    return min(max(0, x0), w - side), min(max(0, y0), h - side)


def _cut(frame: Frame, x0: int, y0: int, n: int, factor: int) -> np.ndarray | None:
    """The grey n × n patch of the square at (x0, y0) (n·factor frame pixels a side), or None
    when the square is not inside the frame."""
    side = n * factor
    h, w = frame.shape[:2]
    if x0 < 0 or y0 < 0 or x0 + side > w or y0 + side > h:
        return None
    return _block_grey(_grey(frame[y0 : y0 + side, x0 : x0 + side]), factor)


def _grey(pixels: np.ndarray) -> np.ndarray:
    """`pixels` (…, h, w, 3 BGR, or already grey …, h, w) as 8-bit grey, per pixel."""
    if pixels.ndim == 2 or pixels.shape[-1] != 3:
        return pixels
    if pixels.ndim == 3:  # one square (a view into the frame: converted where it lies)
        one: np.ndarray = cv2.cvtColor(pixels, cv2.COLOR_BGR2GRAY)
        return one
    lead, (h, w) = pixels.shape[:-3], pixels.shape[-3:-1]
    grey: np.ndarray = cv2.cvtColor(np.ascontiguousarray(pixels).reshape(-1, w, 3), cv2.COLOR_BGR2GRAY)
    return grey.reshape(*lead, h, w)


def _block_grey(grey: np.ndarray, factor: int) -> np.ndarray:
    """8-bit grey (…, h·factor, w·factor) as float32 (…, h, w): the mean of each factor × factor block,
    an area resize by a whole factor without its rounding to 8 bits, grey before averaging. One
    definition for a key, a face's square and a crowd's faces at once."""
    if factor == 1:
        return grey.astype(np.float32)
    *lead, hf, wf = grey.shape
    if hf % factor or wf % factor:
        raise ValueError(f"a {wf}×{hf} grey square is not whole {factor}-pixel blocks")
    # Each block's exact sum from the summed-area table read at the blocks' corners: every pixel
    # read once, one integer per pixel written. A box filter computes a sum at every pixel and keeps
    # one in factor² (a 1080p face's 660² square at factor 6: 0.31 → 0.09 ms; a crowd's 32 faces at
    # factor 2: 0.10 → 0.05; averaging the colour square: 1.3). Stacked squares (…) are one image:
    # every block lies inside its own square (each square's height is whole blocks). The mean is
    # the sum's, correctly rounded to float32.
    flat = np.ascontiguousarray(grey).reshape(-1, wf)
    depth = cv2.CV_32S if flat.size * 255 < 2**31 else cv2.CV_64F  # no sum can overflow
    corners = np.ascontiguousarray(cv2.integral(flat, sdepth=depth)[::factor, ::factor])
    across = corners[:, 1:] - corners[:, :-1]
    sums = across[1:] - across[:-1]  # whole numbers under 2²⁴: exact in float32, and so is their quotient's rounding
    return (sums.astype(np.float32) / np.float32(factor * factor)).reshape(*lead, hf // factor, wf // factor)


def key_patch(frame: Frame, face: Face, frame_index: int, due: int = -1, *, coarse: bool = False) -> KeyPatch | None:
    """The key patch of a face the detector just found in `frame` (None for a tiny face, or one
    whose square is larger than the frame: those are always re-detected). `due`: the frame index
    from which the detector looks at it again whatever its pixels say (default: REDETECT_EVERY on)."""
    geometry = _geometry(face, frame.shape[:2])
    if geometry is None:
        return None
    x0, y0, n, factor = geometry
    patch = _cut(frame, x0, y0, n, factor)
    if patch is None:
        return None
    return KeyPatch(face, patch, x0, y0, factor, frame_index, due, coarse, _face_box(face, x0, y0, n, factor))


_WINDOWS: dict[int, np.ndarray] = {}


def _window(n: int) -> np.ndarray:
    window = _WINDOWS.get(n)
    if window is None:
        window = _WINDOWS[n] = cv2.createHanningWindow((n, n), cv2.CV_32F)
    return window


def _block_max(diff: np.ndarray, box: tuple[int, int, int, int]) -> float:
    """The largest mean of `diff` over a BLOCK_GRID² grid of `box` (x0, y0, x1, y1 in patch pixels);
    inf for a box under BLOCK_GRID pixels a side (too few pixels to compare). One face's
    `_block_means`: the same computation for one face or each of a crowd's (`_still`)."""
    x0, y0, x1, y1 = box
    if y1 - y0 < BLOCK_GRID or x1 - x0 < BLOCK_GRID:
        return float("inf")
    return float(_block_means(diff[None, y0:y1, x0:x1], np.array([[y1 - y0, x1 - x0]]))[0].max())


def _block_means(diffs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The BLOCK_GRID × BLOCK_GRID block means of each `diffs[j]`'s top-left `sizes[j]` (h, w) region
    (each side ≥ BLOCK_GRID): an area resize (each block the mean of the pixels it covers, the
    pixels on a block's edge shared by their overlap, as OpenCV's INTER_AREA) written as two
    matrix products, so a crowd's faces of different sizes cost one batched product, not a resize
    call each (m × BLOCK_GRID × BLOCK_GRID, float32). Summed in float64 and rounded to float32:
    BLAS sums a padded row in another order than a face's own, and the float64 difference rounds
    away, so a block exactly at a limit (a picture a whole grey level brighter) is decided alike
    alone and in a crowd; other means agree within float32 rounding."""
    rows = np.zeros((len(sizes), BLOCK_GRID, diffs.shape[1]))
    cols = np.zeros((len(sizes), diffs.shape[2], BLOCK_GRID))
    for j, (h, w) in enumerate(sizes.tolist()):
        rows[j, :, :h] = _area_weights(h)
        cols[j, :w, :] = _area_weights(w).T
    means: np.ndarray = (rows @ diffs @ cols).astype(np.float32)
    return means


def _area_weights(n: int) -> np.ndarray:
    """BLOCK_GRID × n: block i's weight on each of n pixels — the share of the pixel inside
    [i·n/BLOCK_GRID, (i+1)·n/BLOCK_GRID), over the block's width (rows sum to 1)."""
    weights = _AREA_WEIGHTS.get(n)
    if weights is None:
        edges = np.arange(BLOCK_GRID + 1) * (n / BLOCK_GRID)
        pixels = np.arange(n)
        overlap = np.clip(np.minimum(edges[1:, None], pixels[None, :] + 1) - np.maximum(edges[:-1, None], pixels[None, :]), 0, None)
        weights = _AREA_WEIGHTS[n] = overlap / (n / BLOCK_GRID)
    return weights


_AREA_WEIGHTS: dict[int, np.ndarray] = {}


def _still(frame: Frame, keys: list[KeyPatch]) -> list[bool]:
    """Per key, its square not moved: whether every block of
    the face differs from the key by at most ZERO_LIMIT — the first check of `follow`, for many faces
    in one batch (each face's pixels cut once, converted and compared together: a crowd's faces
    cost one pass, not one call each). Only the face's box is read: the rest of the square is not
    compared at no shift."""
    if not keys:
        return []
    sizes = np.array([(kp.box[3] - kp.box[1], kp.box[2] - kp.box[0]) for kp in keys], np.int64).reshape(-1, 2)
    factors = np.array([kp.factor for kp in keys], np.int64)
    out = [False] * len(keys)  # a face under BLOCK_GRID pixels a side is never still (too few pixels to compare)
    order = np.lexsort((sizes.max(axis=1), factors))  # by factor, then size: faces of like size together, little padding
    order = order[sizes[order].min(axis=1) >= BLOCK_GRID]
    for factor in np.unique(factors[order]).tolist():
        same = order[factors[order] == factor]
        for chunk in np.array_split(same, max(1, len(same) // STILL_BATCH)):
            h, w = sizes[chunk].max(axis=0)
            now = np.zeros((len(chunk), h * factor, w * factor, *frame.shape[2:]), np.uint8)
            key = np.zeros((len(chunk), h, w), np.float32)
            for j, k in enumerate(chunk.tolist()):
                kp = keys[k]
                bx0, by0, bx1, by1 = kp.box
                ya, xa = kp.y0 + by0 * factor, kp.x0 + bx0 * factor
                now[j, : (by1 - by0) * factor, : (bx1 - bx0) * factor] = frame[ya : kp.y0 + by1 * factor, xa : kp.x0 + bx1 * factor]
                key[j, : by1 - by0, : bx1 - bx0] = kp.patch[by0:by1, bx0:bx1]
            signed = _block_grey(_grey(now), factor) - key
            blocks = _block_means(np.abs(signed), sizes[chunk]).max(axis=(1, 2))
            noisy = np.flatnonzero((blocks > ZERO_LIMIT) & (blocks <= BLOCK_LIMIT))
            unmoved = blocks <= ZERO_LIMIT
            if len(noisy):
                unmoved[noisy] = _no_shift([keys[k] for k in chunk[noisy].tolist()], signed[noisy])
            for k, still in zip(chunk.tolist(), unmoved.tolist()):
                out[k] = still
    return out


def _no_shift(keys: list[KeyPatch], signed: np.ndarray) -> np.ndarray:
    """Per face (its key, and now − key `signed` over its box at the top left, padded): whether what
    differs is no shift — the shift that best explains the difference by the key's own gradient
    (one Lucas–Kanade least-squares step over the box, edge pixels left out) is at most NOISE_SHIFT
    patch pixels, and the key has the texture to tell (`KeyTexture`). Sensor noise leaves it near 0
    (hundreds of pixels average it out); a face that moved a fraction of a pixel shows that fraction.
    Only the two products with this frame's difference are summed a frame: what the key alone
    gives is kept with it (crowd_selfie at 1080p before noise of 2 levels: 2.3 → 1.1 CPU-ms a frame)."""
    still = np.zeros(len(keys), bool)
    for j, key in enumerate(keys):
        texture = KeyTexture.of(key)
        if not texture.textured:
            continue
        h, w = texture.gx.shape
        d = signed[j, 1 : h + 1, 1 : w + 1]
        bx, by = float(np.vdot(texture.gx, d)), float(np.vdot(texture.gy, d))
        gxx, gyy, gxy = texture.gxx, texture.gyy, texture.gxy
        det = gxx * gyy - gxy * gxy
        sx, sy = -(gyy * bx - gxy * by) / det, -(gxx * by - gxy * bx) / det  # now(x) ≈ key(x − s) ≈ key(x) − s·∇key
        still[j] = math.hypot(sx, sy) <= NOISE_SHIFT
    return still


NOISE_SHIFT = 0.1
"""A face whose blocks differ from its key by more than ZERO_LIMIT (sensor noise: a level or two a
pixel) but at most BLOCK_LIMIT is taken as is, unmoved, while the shift its difference shows is at
most this many patch pixels (`_no_shift`): a still face before a real camera costs the batch, not a
phase correlation each (151 faces of crowd_selfie at 1080p with noise of 2 levels: see
docs/performance.md). A face that moved more is measured as before."""

MIN_TEXTURE = 1.0
"""The least mean squared grey gradient (levels² a pixel) along the key's weaker direction for
`_no_shift` to tell a shift from noise; a flatter face is measured by phase correlation."""


STILL_BATCH = 32
"""Faces compared together by `_still` (sorted by size, so each batch pads little)."""


def follow(frame: Frame, key: KeyPatch, last: Face, frame_index: int, *, backstop: bool = True) -> Face | None:
    """Where the key's face is in `frame` if its pixels only moved since the key frame (see the
    module doc), else None (re-detect it). `last` is where it was reported in the previous frame.
    `backstop=False` answers whether the pixels only moved even when the detector is due to look
    again (REDETECT_EVERY): the tracker re-detects the face then, and knows it did not change."""
    if backstop and frame_index >= key.redetect_at:
        return None
    return follow_many(frame, [(key, last)])[0]


def follow_many(frame: Frame, pairs: list[tuple[KeyPatch, Face]]) -> list[Face | None]:
    """`follow(frame, key, last, backstop=False)` for each (key, last) pair: the faces whose square
    did not move since the key frame are checked for a still picture together (`_still`), the
    rest one by one (phase correlation)."""
    corners = [_corner(frame, key, last) for key, last in pairs]
    batch = [k for k in range(len(pairs)) if corners[k] == (0, 0)]
    still = dict(zip(batch, _still(frame, [pairs[k][0] for k in batch])))
    out: list[Face | None] = []
    for k, (key, _) in enumerate(pairs):
        corner = corners[k]
        if corner is None:
            out.append(None)
        elif still.get(k, False):
            out.append(key.face)  # a still picture: the same face, the same place
        else:
            out.append(_shifted(frame, key, corner, zero_checked=k in still))
    return out


def _corner(frame: Frame, key: KeyPatch, last: Face) -> tuple[int, int] | None:
    """Where the key's square is cut in `frame`, from the key's corner (whole frame pixels): where the
    face was last reported, so the shift left to measure is about one frame's motion — moved inside
    the frame where it would reach past an edge (the shift is measured from there); None when it cannot be."""
    n, factor = key.patch.shape[0], key.factor
    kcx, kcy = (key.face.box[0] + key.face.box[2]) / 2, (key.face.box[1] + key.face.box[3]) / 2
    lcx, lcy = (last.box[0] + last.box[2]) / 2, (last.box[1] + last.box[3]) / 2
    corner = _inside(key.x0 + int(round(lcx - kcx)), key.y0 + int(round(lcy - kcy)), n * factor, frame.shape[:2])
    return None if corner is None else (corner[0] - key.x0, corner[1] - key.y0)


def _shifted(frame: Frame, key: KeyPatch, offset: tuple[int, int], *, zero_checked: bool) -> Face | None:
    """`follow` for one face whose square is cut at `offset` from the key's: a still picture (unless
    `zero_checked`: already told not still), else the phase-correlated shift, checked block by block."""
    n, factor, box = key.patch.shape[0], key.factor, key.box
    ox, oy = offset
    now = _cut(frame, key.x0 + ox, key.y0 + oy, n, factor)
    if now is None:
        return None
    if ox == 0 and oy == 0 and not zero_checked and _block_max(cv2.absdiff(key.patch, now), box) <= ZERO_LIMIT:
        return key.face  # a still picture: the same face, the same place
    (sx, sy), _response = cv2.phaseCorrelate(key.patch, now, _window(n))
    if not (np.isfinite(sx) and np.isfinite(sy)):
        return None
    dx, dy = ox + sx * factor, oy + sy * factor  # frame pixels since the key frame
    if np.hypot(dx, dy) > MAX_SHIFT * key.side:
        return None
    # The key patch moved by the measured (sub-pixel) shift, against the new one.
    moved = cv2.warpAffine(key.patch, np.array([[1, 0, sx], [0, 1, sy]], np.float32), (n, n), flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE)
    m = int(np.ceil(max(abs(sx), abs(sy))))
    inner = (max(box[0], m), max(box[1], m), min(box[2], n - m), min(box[3], n - m))
    if _block_max(cv2.absdiff(moved, now), inner) > BLOCK_LIMIT:
        return None
    x1, y1, x2, y2 = key.face.box
    kps = (key.face.kps + np.array([dx, dy], np.float32)).astype(np.float32)
    return Face(box=(x1 + dx, y1 + dy, x2 + dx, y2 + dy), score=key.face.score, kps=kps)


def _face_box(face: Face, x0: int, y0: int, n: int, factor: int) -> tuple[int, int, int, int]:
    """The face's box in the patch pixels of the n × n square at (x0, y0), inside the patch by a margin
    (a shift of half a frame pixel brings that much in from outside the square)."""
    margin = 1
    bx0 = int(np.floor((face.box[0] - x0) / factor))
    by0 = int(np.floor((face.box[1] - y0) / factor))
    bx1 = int(np.ceil((face.box[2] - x0) / factor))
    by1 = int(np.ceil((face.box[3] - y0) / factor))
    return max(margin, bx0), max(margin, by0), min(n - margin, bx1), min(n - margin, by1)


def spread_due(frame_index: int, k: int, n: int) -> int:
    """When the detector looks again at the k-th of `n` faces keyed together at `frame_index`:
    spread over the next REDETECT_EVERY frames (one face: REDETECT_EVERY frames on). Faces keyed
    together (a group's first detection; a change of light that made every face look again) would
    all be due on the same frame — a mosaic of the whole group and every face pasted anew on one
    frame in REDETECT_EVERY: the spikes a 29-face group's latency had."""
    return frame_index + REDETECT_EVERY - (k * REDETECT_EVERY // n if n > 1 else 0)


def renewed_keys(followed: dict[int, tuple[Face, KeyPatch]], frame: Frame, detected: list[tuple[Face, bool, KeyPatch | None]],
                 frame_index: int) -> dict[int, tuple[Face, KeyPatch]]:
    """The key patches for the next frame (id(face) → (face, key)): `followed` (the faces followed, with
    their keys), and a new one for each face a detector found in this frame (`detected`: the face,
    whether it was looked at because its cycle came round, the key a late look cut for it or None);
    every other is dropped. Faces keyed together are due again spread over the next REDETECT_EVERY
    frames (`spread_due`); a face looked at because its cycle came round keeps its place in the
    cycle (from the frame looked at). A face a late look found comes with its key (cut from that
    frame: `latelook`)."""
    keys = dict(followed)
    spread_out = [face for face, on_cycle, _ in detected if not on_cycle]
    spread = {id(face): k for k, face in enumerate(spread_out)}
    for face, on_cycle, late_key in detected:
        since = late_key.frame_index if late_key is not None and on_cycle else frame_index
        due = spread_due(since, spread.get(id(face), 0), len(spread_out))
        key = key_patch(frame, face, frame_index, due) if late_key is None else replace(late_key, due=due)
        if key is not None:
            keys[id(face)] = (face, key)
    return keys


class StableSince:
    """Per track's Face, the frame index since which its pixels only moved (`FaceReport.stable_since`:
    a swap made since then is the face as it is now)."""

    def __init__(self) -> None:
        self._since: dict[int, tuple[Face, int]] = {}  # id(track's Face) → (that Face, the index)

    def of(self, face: Face, frame_index: int) -> int:
        """The frame index since which `face` (a track's Face) only moved; `frame_index` when not known."""
        entry = self._since.get(id(face))
        return entry[1] if entry is not None and entry[0] is face else frame_index

    def keep(self, found: list[Face | None], since_before: list[int], unchanged: list[bool], frame_index: int) -> None:
        """Since when each track's pixels only moved, after this frame: a face followed, or
        re-detected where its pixels only moved (the detector's look every REDETECT_EVERY
        frames), keeps its track's; a face that changed, or was lost and found again, starts now."""
        since: dict[int, tuple[Face, int]] = {}
        for i, face in enumerate(found[: len(since_before)]):
            if face is not None:
                kept = i < len(unchanged) and unchanged[i]
                since[id(face)] = (face, since_before[i] if kept else frame_index)
        self._since = since
