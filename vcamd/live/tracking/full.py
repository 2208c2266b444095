"""Full-frame detections on their own thread (`NewestWorker`): 50–200 ms on a CPU must never hold
up a published frame. The loop hands in a downscaled copy of the newest frame, or the region of it
where the picture changed, and picks the result up when ready."""


from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from vcamd.common.newest import NewestWorker
from vcamd.common.types import Face, Frame
from vcamd.faces.detect import input_shape_for
from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking.changes import WHOLE, Look, Region, RegionImage
from vcamd.live.tracking.cropplan import DetectCosts, Detecting
from vcamd.privacy.geometry import near_any

log = logging.getLogger(__name__)

Clock = Callable[[], float]


SEEN_MARGIN = 0.25
"""A region looked at a place when it holds the place's box grown by this share of its width and
height each side (the detector's box of the same face jitters by a few per cent; a face right at
a cut is seen with less of its context)."""


@dataclass(frozen=True, slots=True)
class FullDetection:
    faces: list[Face]  # frame coordinates
    frame_index: int  # the frame it was run on
    input_size: int  # the detector input size it ran at (of the whole frame: a region runs at the same scale)
    region: Region | None = None  # where it looked (`changes.ChangeMap`); None: the whole frame
    ok: bool = True  # False: the detector failed (nothing was really looked at)
    unsure: list[Face] | None = None
    """Faces scored in the unsure band (`unsure_band`), frame coordinates; None: not asked for."""
    cut: tuple[Face, ...] = ()
    """Detections a region's side cut (`RegionImage.cuts`; not in `faces`), frame coordinates of what
    the region saw of them: faces it did not see whole."""

    @property
    def whole(self) -> bool:
        return self.region is None

    @property
    def vouches(self) -> bool:
        """Whether the look vouches for what it covered: it ran, and no face reached past a side
        of its region (one that did is somewhere the region holds only part of: the next look is
        the whole frame, and until it lands what this one covered counts as not looked at)."""
        return self.ok and not self.cut

    def without_cut_of(self, known: list[Face]) -> FullDetection:
        """This detection with only the cut faces none of `known` accounts for: a cut face `near` a
        known one (`privacy.geometry`: the tracker's own rule for one face) is that face, which the
        tracker follows — a region beside a still face it tracks vouches all the same."""
        if not self.cut:
            return self
        unknown = tuple(c for c, is_known in zip(self.cut, near_any(list(self.cut), known), strict=True) if not is_known)
        return self if len(unknown) == len(self.cut) else replace(self, cut=unknown)

    def covers(self, face: Face) -> bool:
        """Whether this detection looked at all of `face`'s place: its box, grown by SEEN_MARGIN of
        its size each side, inside the region (or the frame's own edge on that side). A detection a
        region's side cuts is dropped (`changes.RegionImage.cuts`), so a region holding only a
        place's centre cannot say it is gone: a lost face or an unsure place there stays covered
        (an unsure fist on the still crowd cut so was dropped and shown raw)."""
        if self.region is None:
            return True
        x0, y0, x1, y1 = face.box
        mx, my = SEEN_MARGIN * (x1 - x0), SEEN_MARGIN * (y1 - y0)
        rx0, ry0, rx1, ry1 = self.region.frame_box()
        return ((rx0 <= 0 or x0 - mx >= rx0) and (ry0 <= 0 or y0 - my >= ry0)
                and x1 + mx <= rx1 and y1 + my <= ry1)


FullJob = tuple[Frame, Callable[[Face], tuple[Face, bool]], int, int, int, Region | None, tuple[float, float] | None]
"""(detector image, its detections → (frame coordinates, cut by the region's side), detector input
size, frame index, the whole frame's input size, the region looked at, the unsure band or None)."""


class FullDetector(NewestWorker[FullJob, FullDetection]):
    """Full detections on their own thread. The loop hands in a downscaled copy of the newest frame
    (the copy is the resize the detector would do anyway) — or of the region of it where the
    picture changed (`changes.ChangeMap`) — and picks the result up when ready."""

    def __init__(self, faces: Detecting, stats: LiveStats, clock: Clock) -> None:
        super().__init__("full-detector")
        self.faces = faces  # replaced between frames when the pipeline is rebuilt
        self._stats = stats
        self._clock = clock
        self.errors = 0
        self.runs = 0
        self.costs = DetectCosts()
        """CPU cost per detector input shape, shared with the tracker's crop re-detection."""

    def submit_downscaled(self, small: Frame, scale: float, frame_index: int, input_size: int, look: Look = WHOLE,
                          unsure: tuple[float, float] | None = None) -> None:
        """`small`: the frame as `changes.downscaled(frame, input_size)` gives it (a private copy).
        `unsure`: the band (`unsure_band`) whose faces the result reports apart, or None."""
        if look.region is None:
            place = (lambda f: (scaled(f, 1.0 / scale), False)) if scale != 1.0 else (lambda f: (f, False))
            self.submit((small, place, input_size, frame_index, input_size, None, unsure))
        else:  # the region's pixels of the same downscaled frame: the same faces, less to look at
            part = RegionImage.cut(small, look.region)
            self.submit((part.image, lambda f: (part.placed(f), part.cuts(f)), part.input_size, frame_index, input_size,
                         look.region, unsure))

    def take_result(self) -> FullDetection | None:
        return self.results.take(0)

    def _work(self, job: FullJob) -> FullDetection:
        image, place, run_size, index, size, region, unsure = job
        t0 = self._clock()
        ok = True
        try:
            found = timed_detect(self.faces, image, run_size, self.costs, None if unsure is None else unsure[1])
        except Exception as exc:  # treated as "nothing found"; the next attempt comes soon
            self.errors += 1
            if self.errors <= 3:
                log.error("face detection failed: %s", exc)
            found, ok = [], False
        self._stats.record_stage("full_detect", (self._clock() - t0) * 1000.0)
        self.runs += 1
        placed = [place(face) for face in found]
        faces = [face for face, cut_off in placed if not cut_off]
        cut = tuple(face for face, cut_off in placed if cut_off)
        if unsure is None:
            return FullDetection(faces, index, size, region, ok, cut=cut)
        sure = [face for face in faces if face.score >= unsure[0]]
        return FullDetection(sure, index, size, region, ok, [face for face in faces if face.score < unsure[0]], cut)


def timed_detect(faces: Detecting, image: Frame, size: int, costs: DetectCosts, threshold: float | None = None) -> list[Face]:
    """One detector run, its CPU time (this thread's: ONNX Runtime runs a one-thread session on the
    caller's) recorded against its input shape. `threshold`: the detector's own when None."""
    t0 = time.thread_time()
    found = faces.detect(image, size) if threshold is None else faces.detect(image, size, threshold)
    costs.record(input_shape_for(image.shape[:2], size), (time.thread_time() - t0) * 1000.0)
    return found


def scaled(face: Face, k: float) -> Face:
    x1, y1, x2, y2 = face.box
    return Face(box=(x1 * k, y1 * k, x2 * k, y2 * k), score=face.score, kps=(face.kps * np.float32(k)).astype(np.float32))
