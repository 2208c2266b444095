"""What changed away from the known faces since a detection looked there: covered until one does.

Between two full detections the tracker only follows the faces it knows (`tracker`): a face that
comes in beside them — sliding in from the edge, or there at once — is in no one's crop, and
until the next full detection lands (every `full_every` frames, plus its own time on its thread,
and fewer and smaller at the watchdog's `low_res` and `frame_skip` rungs) the engine cannot say
it is there. The rule is "when you cannot say where the faces are, cover", so:

* every frame's mean colour per cell (`cell_means`, ~16-px cells at 1280 wide) is compared
  with what the last completed detection that looked at that cell saw (the thumbnail of the frame
  it ran on — not of the previous frame, so a slow change adds up); a cell that changed since that
  look stays changed until a look sees it again, even when it comes back to what the look saw: a
  face that left its place and comes back to it is as unseen as a newcomer (the tracker may still
  place it where it went: a frame-skipping rung reuses the last positions);
* cells that changed by more than `changes.CHANGE_LIMIT` form groups (8-connected); a group wholly
  inside one known face's zone (its box grown FACE_ZONE_SCALE×: the face's own motion, swapped or
  covered anyway) is that face's; every other group — a newcomer, a hand, a body, a pan — is
  covered whole (its cells' box grown by MARGIN_CELLS, obscured as `obscure` obscures a face; a
  box wholly inside another group's box is left to that one: the same pixels, covered once);
* once the covered change holds still from one frame to the next (`settled`), the tracker is
  asked to look at once (`LiveTracker.look_soon`: its change map sends the full detector to the
  changed rectangle only) — while it still moves, a look could not uncover it (the next frame
  differs from the one looked at again) and the periodic full detections find a face in it; the
  cells a completed look covered are refreshed from the frame it looked at: what it saw there is
  vouched for, and uncovered;
* only a look that ran at least as fine as the best rung's full detection (`sizes.vouch_size`)
  vouches. The reduced rungs' looks (low_res, frame_skip: half the input size) still find the
  faces they can — tracked and swapped — but miss the small ones and the ones cut by the frame's
  edge that the full size finds: on a panning crowd at 320 px, a 65-px face at the bottom edge
  was published raw in the very frame a detection had "looked at" (benchmarks/newcomer_rungs.py).
  What changed stays covered there until a look at the vouching size lands (`look_soon` asks
  for one at that size once the change holds still).

A moving hand or body so costs a cover for as long as it moves plus one detection, and one extra
detection each time it comes to rest; a still picture costs nothing. Pure: no threads, no models (the loop feeds it frames and the detections that landed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

from vcamd.common.types import Face, Frame, as_frame
from vcamd.live.tracking.changes import CHANGE_LIMIT, THUMB_CELLS, cells_within, largest_change
from vcamd.live.tracking.full import FullDetection
from vcamd.privacy.rule import Box

FACE_ZONE_SCALE = 1.5
"""A group of changed cells wholly inside a known face's box grown this much (a square of its
larger side) is that face moving. Tighter than compose's miss cover (2×): a face beside it that
reaches out of the zone by one cell is covered whole. (A face a quarter of a known face's width,
wholly inside this zone beside it, would be taken for that face's motion: a limit.)"""

MARGIN_CELLS = 1
"""A covered group's box is grown by this many cells each side: a face's edge that changed by less
than the limit in its cell (a dark chin on a dark collar) is inside the cover all the same."""

SETTLED_LIMIT = 3.0
"""A covered cell holds still when its mean moved by at most this from the frame before (camera
noise in a cell mean stays under 2; a picture sliding 2 px a frame moves many by more)."""

KEEP_FRAMES = 120
"""Thumbnails of this many recent frames are kept, for detections that land late (4 s at 30 fps;
a detection of an older frame refreshes nothing, and the next one is asked for at once)."""

UNVOUCHED = np.inf
"""What a cell no vouching look has seen reads as: changed from anything (covered)."""


@dataclass
class CoverTally:
    """How much of the picture this cover took (benchmarks/newcomer.py; stats)."""

    frames: int = 0  # frames checked
    covered: int = 0  # frames with a cover
    share_sum: float = 0.0  # sum over covered frames of the covered share of the frame
    share_max: float = 0.0
    run: int = 0  # covered frames in a row, now
    runs: list[int] = field(default_factory=list)  # lengths of finished runs of covered frames

    def record(self, share: float) -> None:
        self.frames += 1
        if share > 0.0:
            self.covered += 1
            self.share_sum += share
            self.share_max = max(self.share_max, share)
            self.run += 1
        elif self.run:
            self.runs.append(self.run)
            self.run = 0


class UnseenChanges:
    """Where the picture changed since a completed detection looked there, away from known faces."""

    def __init__(self) -> None:
        self._seen: np.ndarray | None = None  # per cell: what the last look there saw
        self._since: np.ndarray | None = None  # per cell: changed from `_seen` in a frame since that look
        self._newest: np.ndarray | None = None  # the last remembered thumbnail (its change is in `_since`)
        self._thumbs: dict[int, np.ndarray] = {}  # frame index → its thumbnail, for looks landing
        self._frame_hw: tuple[int, int] | None = None
        self._previous: np.ndarray | None = None  # the last frame's thumbnail (`settled`)
        self.settled = False
        """The last `covers` answer's changed cells hold still since the frame before: a look now would uncover them."""
        self.tally = CoverTally()

    def looked(self, detections: list[FullDetection], vouch_size: int = 0) -> None:
        """Detections that landed: the cells each one wholly looked at now read as the frame it ran
        on showed them (a failed run, or one whose region cut a face, vouches for nothing:
        `FullDetection.vouches`). A detection at an input size under `vouch_size` vouches for
        nothing (it misses faces the full size sees); while no look has vouched yet, every cell
        reads as changed (`UNVOUCHED`): covered, positions known or not."""
        for detection in sorted(detections, key=lambda d: d.frame_index):
            thumb = self._thumbs.get(detection.frame_index)
            if not detection.vouches or thumb is None:
                continue
            if detection.input_size < vouch_size:
                if self._seen is None or self._seen.shape != thumb.shape:
                    self._seen = np.full_like(thumb, UNVOUCHED)
                continue
            if self._seen is None or self._seen.shape != thumb.shape:
                if detection.region is not None:
                    continue  # nothing to refresh a part of: the next whole look sets it
                self._seen, self._since = thumb.copy(), None
            cells = ((0, 0, thumb.shape[1], thumb.shape[0]) if detection.region is None
                     else self._cells_inside(detection.region.frame_box(), thumb.shape[:2]))
            x0, y0, x1, y1 = cells
            self._seen[y0:y1, x0:x1] = thumb[y0:y1, x0:x1]
            self._changed_after(detection.frame_index, cells)

    def _changed_after(self, frame_index: int, cells: Box) -> None:
        """The cells a look at `frame_index` refreshed: changed since only where a frame after it
        (one already remembered: the look landed late) differed from what it saw."""
        seen = self._seen
        if seen is None:
            return
        if self._since is None or self._since.shape != seen.shape[:2]:
            self._since = np.zeros(seen.shape[:2], bool)
        x0, y0, x1, y1 = cells
        since = self._since[y0:y1, x0:x1]
        since[...] = False
        for index, later in self._thumbs.items():
            if index > frame_index and later.shape == seen.shape:
                since |= largest_change(later[y0:y1, x0:x1], seen[y0:y1, x0:x1]) > CHANGE_LIMIT

    def remember(self, frame: Frame, frame_index: int) -> np.ndarray:
        """This frame's thumbnail, kept for a detection of it that lands later (call before the
        tracker runs on it, and before anything is drawn on it)."""
        h, w = frame.shape[:2]
        if self._frame_hw != (h, w):  # another frame size: nothing seen before compares
            self._frame_hw, self._seen, self._since, self._thumbs = (h, w), None, None, {}
        thumb = self._newest = cell_means(frame)
        self._thumbs[frame_index] = thumb
        if self._seen is not None and self._seen.shape == thumb.shape:  # every frame, covered or not (`covers`)
            now = largest_change(thumb, self._seen) > CHANGE_LIMIT
            self._since = now if self._since is None or self._since.shape != now.shape else self._since | now
        for old in [i for i in self._thumbs if i <= frame_index - KEEP_FRAMES]:
            del self._thumbs[old]
        return thumb

    def covers(self, thumb: np.ndarray, faces: list[Face]) -> list[Box]:
        """The boxes (frame pixels, x0, y0, x1, y1) to cover in the frame `thumb` was made of:
        each group of cells changed since a look saw them that is not wholly inside one face's zone.
        Empty before any look landed (the frame is covered whole then: positions unknown)."""
        seen, (h, w) = self._seen, self._frame_hw or (0, 0)
        previous, self._previous, self.settled = self._previous, thumb, False
        if seen is None or seen.shape != thumb.shape:
            self.tally.record(0.0)
            return []
        since = self._since if self._since is not None and self._since.shape == thumb.shape[:2] else None
        if since is None or thumb is not self._newest:  # not folded into `_since` by `remember`: add it
            now = largest_change(thumb, seen) > CHANGE_LIMIT
            since = now if since is None else since | now
        changed = since.astype(np.uint8)
        if not changed.any():
            self.tally.record(0.0)
            return []
        th, tw = changed.shape
        count, labels, stats, _ = cv2.connectedComponentsWithStats(changed, connectivity=8)
        groups = stats[1:, :4]  # per group of changed cells: x, y, width, height in cells
        # A group is a face's own motion only inside one face's zone: a crowd's zones together may
        # cover the whole frame, and a pan or a newcomer among them is no one face's.
        zones = np.array([_grown(face, FACE_ZONE_SCALE) for face in faces], np.float64).reshape(-1, 4) * [tw / w, th / h, tw / w, th / h]
        inside = ((np.floor(zones[None, :, 0]) <= groups[:, None, 0]) & (np.floor(zones[None, :, 1]) <= groups[:, None, 1])
                  & (groups[:, None, 0] + groups[:, None, 2] <= np.ceil(zones[None, :, 2]))
                  & (groups[:, None, 1] + groups[:, None, 3] <= np.ceil(zones[None, :, 3]))).any(axis=1)
        covered = np.nonzero(~inside)[0] + 1  # the labels of the groups covered
        boxes: list[Box] = [(math.floor(max(0, cx - MARGIN_CELLS) * w / tw), math.floor(max(0, cy - MARGIN_CELLS) * h / th),
                             math.ceil(min(tw, cx + cw + MARGIN_CELLS) * w / tw), math.ceil(min(th, cy + ch + MARGIN_CELLS) * h / th))
                            for cx, cy, cw, ch in stats[covered, :4].tolist()]
        if boxes and previous is not None and previous.shape == thumb.shape:
            in_cover = np.zeros(count, bool)
            in_cover[covered] = True  # per label: covered; then per cell (`settled`: do the covered cells hold still?)
            moving = largest_change(thumb, previous) > SETTLED_LIMIT
            self.settled = not (moving & in_cover[labels]).any()
        boxes = outermost(boxes)
        self.tally.record(_share(boxes, (h, w)))
        return boxes

    def _cells_inside(self, box: tuple[float, float, float, float], thumb_hw: tuple[int, int]) -> Box:
        """The cells wholly inside a frame rectangle (a cell partly outside was not wholly looked at)."""
        return cells_within(box, self._frame_hw or (1, 1), thumb_hw)


def cell_means(frame: Frame) -> np.ndarray:
    """The frame's mean colour per cell (about `changes.THUMB_CELLS` across its long side), float32,
    from a quarter of its pixels: a bilinear shrink to a quarter of each side first (each pixel
    the mean of a 2×2 at the centre of its 4×4 block), then the area mean per cell. A 16-px cell
    averages 64 pixels instead of 256 — camera noise in a cell mean stays well under
    CHANGE_LIMIT — for a third of the cost of the area shrink alone, every frame (720p: 0.5 vs
    1.5 CPU-ms; 1080p: 1.0 vs 4.0)."""
    h, w = frame.shape[:2]
    cell = max(1, round(max(h, w) / THUMB_CELLS))
    size = (max(1, round(w / cell)), max(1, round(h / cell)))
    if cell >= 8:
        frame = as_frame(cv2.resize(frame, (w // 4, h // 4), interpolation=cv2.INTER_LINEAR))
    means = cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
    return (means if means.ndim == 3 else means[:, :, None]).astype(np.float32)


def outermost(boxes: list[Box]) -> list[Box]:
    """`boxes` less each one wholly inside another (of two the same, the first is kept): the same
    pixels covered, each once. A picture sliding across the frame changes many small groups of cells
    inside its own changed outline (its texture's cells, one by one): 8 of 10 boxes on the bench's
    sliding clip, each a mosaic of its own drawn over the big one's for nothing."""
    if len(boxes) < 2:
        return boxes
    b = np.array(boxes)
    holds = ((b[:, None, 0] <= b[None, :, 0]) & (b[:, None, 1] <= b[None, :, 1])
             & (b[:, None, 2] >= b[None, :, 2]) & (b[:, None, 3] >= b[None, :, 3]))  # [i, j]: box i holds box j
    same = (b[:, None] == b[None, :]).all(axis=2)
    first = np.arange(len(boxes))[:, None] < np.arange(len(boxes))[None, :]
    inside = ((holds & ~same) | (same & first)).any(axis=0)
    return [box for box, dropped in zip(boxes, inside) if not dropped]


def _grown(face: Face, scale: float) -> tuple[float, float, float, float]:
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    half = max(face.width, face.height) * scale / 2
    return cx - half, cy - half, cx + half, cy + half


def _share(boxes: list[Box], frame_hw: tuple[int, int]) -> float:
    """The share of the frame the boxes cover (overlaps counted once)."""
    if not boxes:
        return 0.0
    h, w = frame_hw
    mask = np.zeros((h // 8 + 1, w // 8 + 1), np.uint8)  # 8-px resolution is plenty for a figure
    for x0, y0, x1, y1 in boxes:
        mask[y0 // 8 : -(-y1 // 8), x0 // 8 : -(-x1 // 8)] = 1
    return float(mask[: -(-h // 8), : -(-w // 8)].mean())
