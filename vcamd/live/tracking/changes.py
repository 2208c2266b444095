"""Where the picture changed since the full detector last looked there — so it looks only there.

A full detection (SCRFD over the whole frame at 640×384, ~50 ms of CPU on a small CPU) runs every
`full_every` frames to find faces nobody tracks yet. A new face cannot appear without changing the
pixels where it appears, and in a video call most of the picture — the room behind the person —
does not change from one detection to the next. So, as a surveillance recorder runs its object
detector only on the regions with motion, the tracker asks `ChangeMap.where_to_look` before each
periodic full detection:

* the map is a small colour thumbnail of what the detector last looked at: one cell per
  `cell × cell` block of the frame (about THUMB_CELLS cells across), each its mean colour;
* a cell whose mean moved by more than CHANGE_LIMIT in any channel since the detector last covered
  it has changed (a cell mean averages the camera's noise away; a face, a hand or a body moving in
  changes it by tens of levels);
* the detection then runs on the rectangle around the changed cells, grown by MARGIN_CELLS, cut
  from the frame downscaled exactly as for a whole-frame detection, its sides rounded up to
  multiples of REGION_STEP input pixels (a handful of shapes, one detector session each) and its
  corner on the detector's coarsest anchor grid: a face inside is seen by the same anchors at the
  same pixels as in the whole frame, only less of the frame is looked at. No changed cell:
  nothing new can be there, no run at all;
* changed cells that only show what the last whole look saw, moved (`SeenPicture.cells`: one shift of
  the picture explains them — a camera pan, a still picture sliding, the whole scene swaying)
  hold nothing that look did not see: only the rest (new content entering at an edge, anything
  that changed otherwise) is looked at; none left, no run. Not refreshed: they keep being
  compared with that look until the next whole one (the faces the look found move on screen as
  the tracker follows them; one it lost sends the next look to the whole frame anyway);
* the whole frame whenever the map cannot vouch for the rest: the first look, after a reset (new
  detector, camera, frame size), at another detection size, after a failed run or a region look
  that cut a face at its side (`FullDetection.vouches`: asked for at once), when the rectangle
  would be most of the frame anyway, and at least every STILL_WHOLE_EVERY-th look;
* at least every WHOLE_EVERY-th look, a backstop for changes too faint for the map (past
  STILL_LIMIT, the camera's noise, but not CHANGE_LIMIT). Told what the frame shows covered
  (`covered`: `unseen`'s boxes, unrecognisable until a look vouches for them, which `unseen` asks
  for once they hold still), it looks at every cell outside them that changed past STILL_LIMIT
  since the detector last looked there, moved or not; none, no run. A sliding picture's moved
  part is covered, so its looks are a region around what is shown, not the whole frame (at
  det_10g's cost the whole looks were ~2.4 CPU-ms of a 720p frame's ~9). Not told, it looks at
  the whole frame, unless the picture still shows what the last whole look saw (every cell
  within STILL_LIMIT of it): a look at it would see what that one saw — a still group at 720p
  paid ~27 ms of the detector's thread every second for nothing (docs/performance.md).

Only the cells a look covered are refreshed in the thumbnail, so a slow change adds up against what
the detector last saw there (never against the previous frame) until it shows. Pure: no threads,
no models; the tracker feeds it frames and acts on its answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from vcamd.common.types import Face, Frame, as_frame
from vcamd.faces.detect import SHAPE_STEP, input_shape_for

THUMB_CELLS = 80
"""About this many cells across the frame's long side (16-px cells at 1280 wide, 24 at 1920)."""

CHANGE_LIMIT = 6.0
"""A cell has changed when its mean moved by more than this (0–255 levels) in any colour channel.
MJPG noise on a still picture moves 16×16 cell means by under 1; a face moving in moves them by tens."""

MARGIN_CELLS = 2
"""The changed cells' bounding box is grown by this many cells each side before it is rounded up."""

CUT_SLACK = 1.0
"""A detection whose box reaches to within this many detector input pixels of a region's side (not
the frame's edge) is cut by it: SCRFD's box for a face a side cuts ends past it, or up to ~0.3 px
inside (newton 21–53 px wide, cut by 5–40 %, SCRFD-500M and -2.5G, 2026-12-07)."""

REGION_STEP = 128
"""A region's sides in detector input pixels are multiples of this (one session per shape)."""

WHOLE_SHARE = 0.6
"""A region with at least this share of the whole frame's input pixels is looked at whole."""

WHOLE_EVERY = 3
"""At least every this many looks (1 s at 30 fps with full_every = 10), the backstop: what changed past
STILL_LIMIT and is shown uncovered is looked at (the whole frame when what is covered is not known)."""

STILL_LIMIT = 2.0
"""A picture whose every cell mean is within this (0–255 levels, any colour channel) of the last whole
look's shows what that look saw: a camera's noise moves a cell mean by under 1 (CHANGE_LIMIT); a face
coming in, a hand, a change of light move some cell by more. A change between this and CHANGE_LIMIT
is too faint for a region look and is what the backstop is for."""

STILL_WHOLE_EVERY = 30
"""Every picture is looked at whole at least every this many looks (10 s at 30 fps with full_every = 10):
a face the last whole look scored just under the cover threshold gets another look with the camera's
new noise, and a moving picture's moved part a new picture to be compared with."""

NUDGES = ((0.0, 0.0), (0.25, 0.0), (-0.25, 0.0), (0.0, 0.25), (0.0, -0.25),
          (0.25, 0.25), (-0.25, -0.25), (0.25, -0.25), (-0.25, 0.25))
"""The shift tried, and a quarter pixel either way in x, in y and in both: a cell matched by any of them
is the picture moved (a cell's mean is no change from the picture shifted by its own sub-pixel amount)."""

SHIFT_SCALE = 2
"""The shift is estimated on the pictures shrunk by this factor (`_grey`): a quarter of the phase
correlation's work (`cells` at 640×360, on the loop: 7.7 → 1.5–1.6 CPU-ms a look), its estimate off
by up to ~0.2 px (~0.12 at full size) on the bench's sliding picture and a pan — what NUDGES take up."""

MOVED_RESPONSE = 0.2
"""A phase correlation peak under this is no single shift of the picture (none is tried)."""


@dataclass(frozen=True, slots=True)
class Region:
    """A rectangle of the frame downscaled by `scale` for a full detection, in that image's pixels,
    half-open: small[y0:y1, x0:x1]. It may reach past the image's right and bottom edges by less
    than the anchor grid's step (padded as the detector pads a frame)."""

    x0: int
    y0: int
    x1: int
    y1: int
    scale: float = 1.0  # frame pixels → these pixels

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width): the detector input shape this region's run takes."""
        return self.y1 - self.y0, self.x1 - self.x0

    def contains(self, x: float, y: float) -> bool:
        """Whether the frame point (x, y) lies in the region."""
        return self.x0 <= x * self.scale < self.x1 and self.y0 <= y * self.scale < self.y1

    def frame_box(self) -> tuple[float, float, float, float]:
        """The region in frame pixels (x0, y0, x1, y1)."""
        k = 1.0 / self.scale
        return self.x0 * k, self.y0 * k, self.x1 * k, self.y1 * k


@dataclass(frozen=True, slots=True)
class Look:
    """Where the next full detection looks: `region` None is the whole frame."""

    region: Region | None

    @property
    def whole(self) -> bool:
        return self.region is None


WHOLE = Look(None)


class ChangeMap:
    """What the full detector last saw, cell by cell, and where the picture changed since."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget what was seen (a new detector, a new camera): the next look is the whole frame."""
        self._thumb: np.ndarray | None = None
        self._seen_as: tuple[tuple[int, int], float] | None = None  # (downscaled size, scale) of the thumbnail
        self._whole_seen: SeenPicture | None = None  # the downscaled frame the last whole look ran on
        self._since_whole = 0
        self._since_backstop = 0  # looks since the last whole look or the last backstop that looked
        self.wanted: tuple[int, int] | None = None
        """The detector input shape the last answer wanted but found not `ready` (to be built)."""
        self.looks = {"whole": 0, "region": 0, "moved": 0, "none": 0, "still": 0, "unshown": 0}
        """How often each answer was given (stats, tests)."""

    def where_to_look(self, small: Frame, scale: float,
                      ready: Callable[[tuple[int, int]], bool] = lambda _shape: True, *, whole: bool = False,
                      covered: Sequence[tuple[float, float, float, float]] | None = None) -> Look | None:
        """Where a full detection should look in `small` — the frame downscaled by `scale` as the
        detector sees it (`downscaled`): WHOLE, a region, or None (nothing changed: no run).
        `whole` asks for the whole frame (the caller knows a reason). `covered`: the boxes of
        the frame (its pixels) shown covered until a look vouches for them (`unseen`), which the
        backstop need not look at; None: nothing is known covered. A region whose detector
        input shape is not `ready` (its session not built yet) is looked at whole meanwhile, and
        named in `wanted`. The answer is taken as done: the cells it covers are refreshed now
        (`failed()` undoes that if the run fails)."""
        self.wanted = None
        thumb = thumbnail(small)
        old = self._thumb
        seen_as = (small.shape[:2], scale)  # another frame size or detection size: not comparable
        if whole or old is None or self._seen_as != seen_as or self._since_whole + 1 >= STILL_WHOLE_EVERY:
            return self._looked_whole(small, thumb, seen_as)
        change = largest_change(thumb, old)
        changed = change > CHANGE_LIMIT
        unshown = np.zeros_like(changed)  # the backstop's cells: changed past the camera's noise, shown uncovered
        if self._since_backstop + 1 >= WHOLE_EVERY:  # the backstop
            if self._whole_seen is not None and self._whole_seen.holds_still(thumb):
                self.looks["still"] += 1  # it would see what the last whole look saw
            elif covered is None:
                return self._looked_whole(small, thumb, seen_as)
            else:
                unshown = (change > STILL_LIMIT) & ~cells_covered(covered, scale, small.shape[:2], change.shape)
                self.looks["still" if not unshown.any() else "unshown"] += 1
        if not (changed | unshown).any():
            self.looks["none"] += 1
            self._since_whole += 1
            self._since_backstop += 1
            return None
        if self._whole_seen is not None and changed.any():
            changed &= ~self._whole_seen.cells(small, thumb, changed)[0]
        changed |= unshown  # shown as it is: looked at, moved or not (a faint change is no shift's to explain)
        if not changed.any():
            self.looks["moved"] += 1
            self._since_whole += 1
            self._since_backstop += 1
            return None
        region = changed_region(small.shape[:2], changed, scale)
        if region is None:
            return self._looked_whole(small, thumb, seen_as)
        if not ready(region.shape):
            self.wanted = region.shape
            return self._looked_whole(small, thumb, seen_as)
        x0, y0, x1, y1 = cells_inside(region, small.shape[:2], thumb.shape[:2])
        old[y0:y1, x0:x1] = thumb[y0:y1, x0:x1]
        self._since_whole += 1
        self._since_backstop = 0 if unshown.any() else self._since_backstop + 1
        self.looks["region"] += 1
        return Look(region)

    def failed(self) -> None:
        """The last look's detection failed, or its region cut a face: what it covered was not
        really seen (the next look is the whole frame)."""
        self._thumb = self._whole_seen = None

    def _looked_whole(self, small: Frame, thumb: np.ndarray, seen_as: tuple[tuple[int, int], float]) -> Look:
        self._thumb, self._seen_as, self._since_whole, self._whole_seen = thumb, seen_as, 0, SeenPicture(small, thumb)
        self._since_backstop = 0
        self.looks["whole"] += 1
        return WHOLE


def downscaled(frame: Frame, input_size: int) -> tuple[Frame, float]:
    """The frame as a full detection at `input_size` sees it: a private copy at most `input_size`
    on its long side (the resize the detector would do anyway), and its scale. The change map and
    the detection's regions are in its pixels."""
    h, w = frame.shape[:2]
    scale = min(1.0, input_size / max(h, w))
    if scale >= 1.0:
        return frame.copy(), 1.0
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return area_shrunk(frame, size), scale


def area_shrunk(image: Frame, size: tuple[int, int]) -> Frame:
    """`image` resized to `size` (width, height) by area averaging: cv2.resize's INTER_AREA,
    bit for bit, in less time at an odd whole factor. OpenCV's area resize runs a fast path only
    at even factors; at k = 3, 5, … (1080p → 640×360 is k = 3) each output pixel's k×k mean is a
    k×k box blur anchored at its top-left pixel, sampled every k pixels by INTER_NEAREST
    (3.9 → 1.9 ms at 1080p here; at even factors the blur is the slower one)."""
    height, width = image.shape[:2]
    k = width // size[0]
    if k >= 3 and k % 2 == 1 and width == k * size[0] and height == k * size[1]:
        return as_frame(cv2.resize(cv2.blur(image, (k, k), anchor=(0, 0)), size, interpolation=cv2.INTER_NEAREST))
    return as_frame(cv2.resize(image, size, interpolation=cv2.INTER_AREA))


def thumbnail(frame: Frame) -> np.ndarray:
    """The frame's mean colour per cell (about THUMB_CELLS cells across its long side), float32."""
    h, w = frame.shape[:2]
    cell = max(1, round(max(h, w) / THUMB_CELLS))
    small = cv2.resize(frame, (max(1, round(w / cell)), max(1, round(h / cell))), interpolation=cv2.INTER_AREA)
    return (small if small.ndim == 3 else small[:, :, None]).astype(np.float32)


def largest_change(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per cell of two (rows, cols, channels) float32 cell-mean images: the largest difference in
    any channel. (numpy's max over a last axis of 3 is ~15× slower than this, 0.15 ms a thumbnail.)"""
    diff = np.abs(a - b)
    largest: np.ndarray = diff[:, :, 0]
    for channel in range(1, diff.shape[2]):
        largest = np.maximum(largest, diff[:, :, channel])
    return largest


def cells_within(box: tuple[float, float, float, float], image_hw: tuple[int, int], thumb_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """The cells (x0, y0, x1, y1, half-open, inside the grid) of a thumbnail grid over an `image_hw`
    image that lie wholly inside `box` (its pixels): a cell only partly inside was not wholly looked
    at, or covered, there."""
    (h, w), (th, tw) = image_hw, thumb_hw
    x0, y0, x1, y1 = box
    return (max(0, math.ceil(x0 * tw / w)), max(0, math.ceil(y0 * th / h)),
            min(tw, math.floor(x1 * tw / w)), min(th, math.floor(y1 * th / h)))


def cells_covered(boxes: Sequence[tuple[float, float, float, float]], scale: float, small_hw: tuple[int, int], thumb_hw: tuple[int, int]) -> np.ndarray:
    """Per cell of the downscaled frame's thumbnail grid: whether it lies wholly inside one of `boxes`
    (frame pixels; `scale`: frame → downscaled pixels). A cell only partly inside one shows the rest."""
    mask = np.zeros(thumb_hw, bool)
    for x0, y0, x1, y1 in boxes:
        cx0, cy0, cx1, cy1 = cells_within((x0 * scale, y0 * scale, x1 * scale, y1 * scale), small_hw, thumb_hw)
        mask[cy0:cy1, cx0:cx1] = True  # empty when no cell is wholly inside
    return mask


def cells_inside(region: Region, small_hw: tuple[int, int], thumb_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """The cells wholly inside a region (`cells_within`): a cell only partly inside was not wholly
    looked at, so it keeps its old value and shows its change next time."""
    return cells_within((region.x0, region.y0, region.x1, region.y1), small_hw, thumb_hw)


def changed_region(small_hw: tuple[int, int], changed: np.ndarray, scale: float) -> Region | None:
    """The region to look at for these changed cells, or None when that is most of the frame
    (WHOLE_SHARE): then the whole frame. The changed cells' box, grown by MARGIN_CELLS, in the
    downscaled frame's pixels; its sides rounded up to REGION_STEP; placed around the changes
    with its corner on the anchor grid (SHAPE_STEP), inside the image but for less than a step."""
    sh, sw = small_hw
    th, tw = changed.shape
    ys, xs = np.nonzero(changed)
    x0, x1 = max(0, xs.min() - MARGIN_CELLS) * sw / tw, min(tw, xs.max() + 1 + MARGIN_CELLS) * sw / tw
    y0, y1 = max(0, ys.min() - MARGIN_CELLS) * sh / th, min(th, ys.max() + 1 + MARGIN_CELLS) * sh / th
    full_h, full_w = input_shape_for((sh, sw), max(sh, sw))
    rx, width = _span(x0, x1, sw, full_w)
    ry, height = _span(y0, y1, sh, full_h)
    if width * height >= WHOLE_SHARE * full_w * full_h:
        return None
    return Region(rx, ry, rx + width, ry + height, scale)


def _span(lo: float, hi: float, limit: int, full: int) -> tuple[int, int]:
    """(start, side) of a span covering [lo, hi): the start on the anchor grid (SHAPE_STEP), the
    side a multiple of REGION_STEP (or `full`, the whole input's side), the spare room shared on
    both sides, inside [0, limit) but for less than one grid step past `limit` (what the
    detector's letterbox pads anyway)."""
    start = SHAPE_STEP * math.floor(lo / SHAPE_STEP)
    side = min(full, REGION_STEP * math.ceil((hi - start) / REGION_STEP))
    start -= SHAPE_STEP * math.floor((side - (hi - start)) / 2 / SHAPE_STEP)
    last = SHAPE_STEP * math.ceil((limit - side) / SHAPE_STEP)
    return int(max(0, min(start, last))), side


@dataclass(frozen=True, slots=True)
class RegionImage:
    """A region as the detector sees it — cut from the frame downscaled exactly as for a
    whole-frame detection, so its pixels are the whole frame's own — and how a detection in it
    maps back to the frame."""

    image: Frame
    region: Region
    small_hw: tuple[int, int]  # the downscaled frame's size

    @classmethod
    def cut(cls, small: Frame, region: Region) -> RegionImage:
        """`region` of `small` (the frame downscaled by `region.scale`); the part past its right
        or bottom edge padded black, as the detector's letterbox pads a frame."""
        sh, sw = small.shape[:2]
        h, w = region.shape
        view = small[region.y0 : min(region.y1, sh), region.x0 : min(region.x1, sw)]
        if view.shape[:2] == (h, w):
            return cls(view, region, (sh, sw))  # a view: `small` is already the detector's private copy
        image = np.zeros((h, w, *small.shape[2:]), small.dtype)
        image[: view.shape[0], : view.shape[1]] = view
        return cls(image, region, (sh, sw))

    @property
    def input_size(self) -> int:
        """The detector input size for this image: its long side (its shape is the input shape)."""
        return int(max(self.image.shape[:2]))

    def cuts(self, face: Face) -> bool:
        """Whether the detection reaches past a side of the region that is not the frame's edge, or
        to within CUT_SLACK of it: a face cut by the region (its box and keypoints are not whole,
        and the faces there are the rest of the frame's business; a cut face's box often ends at
        the side, a fraction of a pixel inside)."""
        r, (sh, sw) = self.region, self.small_hw
        h, w = r.shape
        x1, y1, x2, y2 = face.box
        return ((r.x0 > 0 and x1 < CUT_SLACK) or (r.y0 > 0 and y1 < CUT_SLACK) or (r.x1 < sw and x2 > w - CUT_SLACK)
                or (r.y1 < sh and y2 > h - CUT_SLACK))

    def placed(self, face: Face) -> Face:
        """The detection in frame coordinates, cut or not."""
        r = self.region
        x1, y1, x2, y2 = face.box
        k = 1.0 / r.scale
        box = ((x1 + r.x0) * k, (y1 + r.y0) * k, (x2 + r.x0) * k, (y2 + r.y0) * k)
        kps = ((face.kps + np.array([r.x0, r.y0], np.float32)) * np.float32(k)).astype(np.float32)
        return Face(box=box, score=face.score, kps=kps)


class SeenPicture:
    """A picture a look saw, kept to tell whether a later frame still shows it (`holds_still`) and
    which of its cells show it moved (`cells`)."""

    def __init__(self, seen: Frame, means: np.ndarray) -> None:
        self.seen = seen
        self._means = means.copy()  # its cell means (`thumbnail`); the map's own copy takes later looks' cells
        self._grey = _grey(seen)
        self._window = cv2.createHanningWindow(self._grey.shape[::-1], cv2.CV_32F)

    def holds_still(self, means: np.ndarray) -> bool:
        """Whether a later frame's cell means (`thumbnail`) are all within STILL_LIMIT of this picture's."""
        return means.shape == self._means.shape and float(largest_change(means, self._means).max()) <= STILL_LIMIT

    def cells(self, now: Frame, means: np.ndarray, changed: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
        """Which cells of `now` (same size; `means`: its cell means, float32, the grid's shape)
        show this picture moved: one shift for the whole picture (the strongest peak of their phase
        correlation), the picture shifted by it, and per cell whether `now` is no change from it by
        the map's own rule — no cell mean apart by more than CHANGE_LIMIT in any channel (a
        sub-pixel error in the shift moves an edge's pixels, hardly a cell's mean). A cell whose
        pixels come from outside the picture (entering at an edge) is new content: never matched.
        `changed`: the cells asked about (the others' answers are not looked for). Returns (the
        mask, the shift (dx, dy) in these images' pixels: now(x) ≈ seen(x − d)); nothing matched
        when the peak is faint (MOVED_RESPONSE) or the sizes differ."""
        th, tw = changed.shape
        matched = np.zeros((th, tw), bool)
        if now.shape != self.seen.shape:
            return matched, (0.0, 0.0)
        h, w = now.shape[:2]
        (dx, dy), response = cv2.phaseCorrelate(self._grey, _grey(now), self._window)
        if response < MOVED_RESPONSE:
            return matched, (0.0, 0.0)
        dx, dy = dx * SHIFT_SCALE, dy * SHIFT_SCALE
        # Every pixel of a cell, shifted back, must come from inside the picture (pixel i from i − d;
        # within half a pixel of its edge: the estimate's sub-pixel error, what BORDER_REPLICATE fills in).
        xs, ys = np.arange(tw + 1) * w / tw - dx, np.arange(th + 1) * h / th - dy
        inside = ((ys[:-1] >= -0.5) & (ys[1:] <= h + 0.5))[:, None] & ((xs[:-1] >= -0.5) & (xs[1:] <= w + 0.5))[None, :]
        asked = changed & inside
        for ex, ey in NUDGES:  # the peak's sub-pixel estimate is off by up to ~0.2 px: a strong edge's cells show it
            move = np.array([[1, 0, dx + ex], [0, 1, dy + ey]], np.float32)
            shifted = cv2.warpAffine(self.seen, move, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            matched |= largest_change(means, cv2.resize(shifted, (tw, th), interpolation=cv2.INTER_AREA).reshape(means.shape).astype(np.float32)) <= CHANGE_LIMIT
            if not (asked & ~matched).any():
                break
        return matched & asked, (float(dx), float(dy))


def _grey(image: Frame) -> np.ndarray:
    """What the shift is estimated on: the image in grey, shrunk by SHIFT_SCALE (area), float32."""
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 and image.shape[2] == 3 else image.reshape(image.shape[:2])
    h, w = image.shape[:2]
    size = (max(1, w // SHIFT_SCALE), max(1, h // SHIFT_SCALE))
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA).astype(np.float32)
