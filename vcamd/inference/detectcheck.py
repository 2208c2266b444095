"""The privacy check of the face detector's int8 copy against the float detector, on the user's own
weights and frames: its thresholds, the looks it is made at (`Looks`) and its report
(`vcamd.models.int8detector.DetectorCheck` runs both detectors and fills a `LookFigures` a look).

The detector decides which faces get swapped or covered, so its copy is held to finding every face
the float detector finds, where the float detector found it — on every calibration look (the source
photo and camera frames at the full look's sizes, each face's crop at the tracker's sizes), the
images held out of the quantiser's feeds (`held_out`: every other camera frame) held to the same:

* **found** — every face the float detector scores at least the detection threshold has a face of
  the copy's overlapping its box by at least `DetectorThresholds.box_iou`, scoring at least the
  cover threshold (`[detection] cover_threshold`: at worst the face is covered, never shown raw);
* **placed** — that face's keypoints each within `DetectorThresholds.keypoints` of the float face's
  width of the float ones: the swapped face is pasted (and the cover drawn) where the face is;
* **faster** — the full look at least `DetectorThresholds.speedup` × faster than float's here (a copy
  that gains nothing is not worth a risk to the faces).

Faces the copy finds that the float detector does not (scoring the detection threshold where the
float one scores under the cover threshold) would be swapped or covered where nothing was: never a
raw face, but a face pasted on a wall. The copy is held to none of those that score the threshold
by `SURE_MARGIN` or more (a face the float detector would call sure); those nearer the threshold are
counted and shown (a copy's scores near the threshold wobble as the float one's do with the frame's
few pixels of padding: `vcamd.faces.detect.SURE_MARGIN`).

Why these numbers (docs/performance.md, "int8 on the CPU"): the camera's own MJPG (JPEG q75) moves
the float detector's keypoints by up to ~5 % of the face's width on the group photos' small faces
(a 20-px face: one pixel), and the tracker anchors crops found within 3.7 % (mean) of a face's
width (`live.tracking.cropplan.SMALL_TILE`); 0.1 of the width is twice the camera's own wobble on
the smallest faces and inside the paste's feathered edge. A box overlapping by 0.5 is the
detector's own "same face" (`vcamd.faces.detect.SAME_FACE_IOU`, the tracker's match).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vcamd.inference.fidelity import CopyReport

SURE_MARGIN = 0.1
"""An extra face scoring the threshold by this much is one the float detector would be sure of."""

HOLD_OUT_EVERY = 2
"""Of the calibration images (the source photo first, then camera frames), every `HOLD_OUT_EVERY`-th
from the second on is held out: the quantiser never sees it, the check looks at it as at every other
(`held_out`). A check on the images the quantiser was fed says little of frames it never saw, and the
copy runs on frames it never saw. Part of the detector's build key (`int8recipes.build_key`)."""


def held_out(index: int) -> bool:
    """Whether calibration image `index` (0: the source photo) is held out of the quantiser's feeds:
    the photo and every other camera frame are fed, the frames between are only checked."""
    return index % HOLD_OUT_EVERY == 1


@dataclass(frozen=True, slots=True)
class DetectorThresholds:
    box_iou: float = 0.5
    """Least overlap of the copy's box with the float face's."""
    keypoints: float = 0.1
    """Most any keypoint of the copy's face may lie from the float one's, as a share of the float face's width."""
    speedup: float = 1.2
    """Least float ÷ int8 time of the full look: a copy that is not faster here (SCRFD-500M's depthwise
    convolutions gain nothing in int8) would only risk the faces for nothing."""


DETECTOR_THRESHOLDS = DetectorThresholds()


@dataclass(frozen=True, slots=True)
class Looks:
    """The detector's settings the check is made at (the config's `[detection]` and `[watchdog]`):
    full looks at `size` and `low_size` (the rungs with reduced detection), each float face's crop at
    its size up to `track_size` and at `min_crop` (the tracker's smallest), mosaics of the faces'
    crops in `tile`-px tiles and in their own input size's (the tracker's runs for many faces), faces counted from
    `threshold`, found by the copy from `cover_threshold`. Part of the copy's build key: other
    settings, another check."""

    size: int = 640
    low_size: int = 320
    track_size: int = 192
    min_crop: int = 64
    tile: int = 48
    """Small faces' crops are tiled into one run (the tracker's mosaic, 4 columns): checked as such."""
    threshold: float = 0.5
    cover_threshold: float = 0.2


@dataclass(frozen=True, slots=True)
class LookFigures:
    """One calibration look (an image at one input size): the float faces against the copy's."""

    look: str
    """What was looked at, in words ("frame 2 at 640", "frame 2, face 5's crop at 64")."""
    faces: int
    """Faces the float detector scores at least the detection threshold."""
    missed: int
    """Of those, faces the copy does not find (box overlap, score at least the cover threshold)."""
    worst_iou: float
    lowest_score: float
    """The lowest score the copy gives a face it found (1.0: no face)."""
    worst_keypoints: float
    """The farthest keypoint of a face found, as a share of the float face's width."""
    extra_sure: int
    """Faces the copy scores at least threshold + SURE_MARGIN where the float detector finds none."""
    extra_near: int
    """The same, scoring under threshold + SURE_MARGIN."""
    held_out: bool = False
    """The look is of an image the quantiser was not fed (`held_out`): counted as any other."""


@dataclass(frozen=True)
class DetectorReport(CopyReport):
    """`FidelityReport`'s counterpart for the detector (`compare_detections`)."""

    faces: list[LookFigures]
    threshold: float = 0.5
    cover_threshold: float = 0.2
    thresholds: DetectorThresholds = field(default=DETECTOR_THRESHOLDS)
    float_ms: float = 0.0
    int8_ms: float = 0.0
    """The full look's time through each detector (the fastest of its runs on the calibration images)."""
    images: int = 0
    held_out_images: int = 0
    """Of the `images` looked at, those the quantiser was not fed (`held_out`)."""

    def _sum(self, name: str) -> int:
        return sum(int(getattr(f, name)) for f in self.faces)

    @property
    def worst_iou(self) -> float:
        return min(f.worst_iou for f in self.faces)

    @property
    def worst_keypoints(self) -> float:
        return max(f.worst_keypoints for f in self.faces)

    @property
    def lowest_score(self) -> float:
        return min(f.lowest_score for f in self.faces)

    def _missed(self) -> list[str]:
        t, out = self.thresholds, []
        if not self._sum("faces"):
            return ["the float detector finds no face on the calibration frames"]
        if missed := self._sum("missed"):
            where = next(f.look for f in self.faces if f.missed)
            out.append(f"{missed} of the float detector's {self._sum('faces')} faces not found (box overlap ≥ {t.box_iou:g}, "
                       f"score ≥ {self.cover_threshold:g}; first on {where})")
        if self.worst_keypoints > t.keypoints:
            out.append(f"keypoints off by {self.worst_keypoints:.3f} of the face's width > {t.keypoints:g}")
        if self.int8_ms <= 0 or self.float_ms / self.int8_ms < t.speedup:
            out.append(f"not faster here: the full look {self.int8_ms:.1f} ms in int8 against {self.float_ms:.1f} ms in float "
                       f"(needs {t.speedup:g}×)")
        if extra := self._sum("extra_sure"):
            out.append(f"{extra} face(s) scored ≥ {self.threshold + SURE_MARGIN:g} where the float detector finds none")
        return out

    def _met(self) -> str:
        t = self.thresholds
        return (f"all {self._sum('faces')} faces found (box overlap ≥ {self.worst_iou:.2f}, needs {t.box_iou:g}; "
                f"score ≥ {self.lowest_score:.2f}, needs {self.cover_threshold:g}), keypoints within {self.worst_keypoints:.3f} "
                f"of the face's width (at most {t.keypoints:g}), {self._sum('extra_near')} extra near the threshold")

    def summary(self) -> str:
        """One line, counting looks (a look finds many faces) and the images held out of calibration."""
        failures = self.failures()
        held = sum(f.faces for f in self.faces if f.held_out)
        looks = (f"{len(self.faces)} look{'s' if len(self.faces) != 1 else ''} on {self.images} images, {self.held_out_images} held out "
                 f"of calibration ({held} of the faces)")
        return f"failed on {looks}: {'; '.join(failures)}" if failures else f"{looks}: {self._met()}"

    def _face_json(self, face: LookFigures) -> dict[str, Any]:
        return asdict(face)

    def _table(self) -> tuple[str, list[str], str]:
        t = self.thresholds
        return ("look                                   faces  missed  worst box overlap  lowest score  keypoints  extra sure / near",
                [f"{f.look:<38} {f.faces:>5}  {f.missed:>6}  {f.worst_iou:17.2f}  {f.lowest_score:12.2f}  {f.worst_keypoints:9.3f}  "
                 f"{f.extra_sure:>10} / {f.extra_near}" for f in self.faces],
                f"needs: every face found with a box overlap ≥ {t.box_iou:g} and a score ≥ {self.cover_threshold:g}, keypoints "
                f"within {t.keypoints:g} of its width, no extra face scoring ≥ {self.threshold + SURE_MARGIN:g}")
