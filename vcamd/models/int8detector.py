"""The face detector's side of an int8 build (`vcamd.models.int8roles.RoleCheck`): what the quantiser
is fed, the looks both detectors make, and how their faces are matched (`vcamd.inference.detectcheck`
holds the thresholds and the report).

Its calibration images are whole frames, not aligned faces: the source photo and frames the camera
showed (`CalibrationFaces.crops` holds them, letterboxed into one shape: `faces.calibration.frames_for`). The
quantiser sees each one as the detector's full look sees it (letterboxed into the model's own
input) and each face's crop scaled to that input (the activations of a face filling a crop look);
the check runs both detectors through `vcamd.faces.detect.FaceDetector` at every size the loop
runs (`detectcheck.Looks`): the rewritten input shapes are the copy's too. The quantiser is fed the
source photo and every other camera frame; the check looks at all of them (`detectcheck.held_out`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from vcamd.common.types import Face, Frame
from vcamd.faces.mosaic import MOSAIC_MIN, tiled_crops
from vcamd.inference.detectcheck import (
    DETECTOR_THRESHOLDS,
    SURE_MARGIN,
    DetectorReport,
    DetectorThresholds,
    LookFigures,
    Looks,
    held_out,
)

if TYPE_CHECKING:
    from vcamd.config.schema import Config
    from vcamd.faces.calibration import CalibrationFaces
    from vcamd.inference.runtime import Sessions

CROP_SIDE = 2.0
"""A face's crop look: a square twice the face's box (the tracker's `CROP_FACTOR`)."""

CALIBRATION_CROPS = 4
"""Face crops per calibration image the quantiser sees besides the image (a crowd's hundred would only repeat)."""


def looks_for(cfg: Config) -> Looks:
    """The looks the detector's copy is checked at under this config: `[detection]` size, track
    size and thresholds, the size of the rungs with reduced detection (`[watchdog] lowres_scale`)."""
    from vcamd.common.quality import LADDER, detect_size

    reduced = next((level for level, r in LADDER.items() if r.reduced_detection), None)
    low = detect_size(cfg.detection.size, reduced, cfg.watchdog.lowres_scale) if reduced is not None else cfg.detection.size
    return Looks(size=cfg.detection.size, low_size=low, track_size=cfg.detection.track_size,
                 threshold=cfg.detection.threshold, cover_threshold=cfg.detection.cover_threshold)


@dataclass(frozen=True, slots=True)
class Look:
    name: str
    image: Frame
    size: int
    full: bool
    held_out: bool = False


def crop_look(frame: Frame, face: Face, size: int) -> Frame:
    """The square `CROP_SIDE` × the face's box around it, scaled to size² (black outside the frame)."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    side = CROP_SIDE * max(face.box[2] - face.box[0], face.box[3] - face.box[1], 1.0)
    scale = size / side
    m = np.array([[scale, 0, -(cx - side / 2) * scale], [0, scale, -(cy - side / 2) * scale]], np.float32)
    return np.asarray(cv2.warpAffine(frame, m, (size, size), flags=cv2.INTER_LINEAR, borderValue=0), np.uint8)


def mosaic_groups(found: list[Face], looks: Looks) -> dict[int, list[Face]]:
    """The mosaics a frame's faces are checked in, by tile side, as the tracker groups them: the faces
    whose crops run at `min_crop` (small faces) in `tile`-px tiles, those whose crops run at one larger
    input size in tiles of that size (the tracker tiles those too, where it costs no more pixels)
    — each from `MOSAIC_MIN` faces on."""
    groups: dict[int, list[Face]] = {}
    for face in found:
        own = crop_sizes(face, looks)[-1]
        groups.setdefault(looks.tile if own == looks.min_crop else own, []).append(face)
    return {tile: faces for tile, faces in groups.items() if len(faces) >= MOSAIC_MIN}


def crop_sizes(face: Face, looks: Looks) -> list[int]:
    """The crop inputs a face is looked at: its crop's own pixels (a multiple of 32, up to the track
    size: never scaled up) and the tracker's smallest."""
    side = CROP_SIDE * max(face.box[2] - face.box[0], face.box[3] - face.box[1], 1.0)
    own = int(min(looks.track_size, max(looks.min_crop, 32 * math.ceil(side / 32.0))))
    return sorted({own, looks.min_crop})


@dataclass
class DetectorCheck:
    model: Path
    faces: CalibrationFaces
    providers: list[str]
    threads: int
    looks: Looks
    thresholds: DetectorThresholds = DETECTOR_THRESHOLDS
    _looks: list[Look] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from vcamd.inference.runtime import Sessions

        detector = self._detector(Sessions(self.providers, self.threads))
        self._native_hw: tuple[int, int] = detector.native_hw or (self.looks.size, self.looks.size)
        self._input_name: str = detector.input_name
        self._found: list[list[Face]] = []
        looks: list[Look] = []
        for i, frame in enumerate(self.faces.crops):
            out = held_out(i)
            image = f"image {i + 1}{' (held out)' if out else ''}"
            for size in sorted({self.looks.size, self.looks.low_size}, reverse=True):
                looks.append(Look(f"{image} at {size}", frame, size, True, out))
            found = [f for f in detector.detect(frame, self.looks.size) if f.score >= self.looks.threshold]
            self._found.append(found)
            for j, face in enumerate(found, 1):
                looks += [Look(f"{image}, face {j}'s crop at {s}", crop_look(frame, face, s), s, False, out) for s in crop_sizes(face, self.looks)]
            for tile, faces in mosaic_groups(found, self.looks).items():
                tiles = tiled_crops([crop_look(frame, face, tile) for face in faces], tile)
                looks.append(Look(f"{image}, a mosaic of {len(faces)} faces' crops in {tile}-px tiles", tiles, max(tiles.shape[:2]), False, out))
        self._looks = looks
        self._times: list[float] = []

    def _detector(self, sessions: Sessions) -> Any:
        from vcamd.faces.detect import FaceDetector

        return FaceDetector(self.model, sessions, self.looks.size, self.looks.threshold)

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        """Each calibration image not held out (`detectcheck.held_out`) as the full look feeds it, and up
        to `CALIBRATION_CROPS` of its faces' crops (the largest), each scaled to the model's own input."""
        from vcamd.faces.detect import letterbox_blob

        h, w = self._native_hw
        for i, (frame, found) in enumerate(zip(self.faces.crops, self._found)):
            if held_out(i):
                continue
            yield {self._input_name: letterbox_blob(frame, (h, w))}
            for face in sorted(found, key=lambda f: -f.area)[:CALIBRATION_CROPS]:
                yield {self._input_name: letterbox_blob(crop_look(frame, face, min(h, w)), (h, w))}

    def outputs(self, sessions: Sessions) -> tuple[list[Any], float]:
        """Each look's faces (found at the cover threshold), and the full look's CPU ms at `size` (the
        fastest of its runs, one run first to allocate). The first call is the float detector's (`_attempts`),
        each later one a copy's: their times go into the report (`DetectorThresholds.speedup`).

        CPU time, not wall time: float's runs and the copy's are seconds apart (the build between), and
        on a busy machine wall time measured the load that came and went — a test run beside three
        others timed the copy at 98.5 ms against float's 55.7 and kept float. With one thread ONNX
        Runtime runs on the calling thread (its CPU time is the run's); with more, the check runs in a
        process of its own (`vcamd.models.quantize`'s child), whose CPU time is the runs'."""
        import time

        clock = time.thread_time if self.threads == 1 else time.process_time
        detector = self._detector(sessions)
        found, times = [], []
        full = [look for look in self._looks if look.full and look.size == self.looks.size]
        for look in full[:1] + full:
            t0 = clock()
            detector.detect(look.image, look.size, self.looks.cover_threshold)
            times.append((clock() - t0) * 1000.0)
        for look in self._looks:
            found.append(detector.detect(look.image, look.size, self.looks.cover_threshold))
        ms = min(times[1:]) if len(times) > 1 else 0.0
        self._times.append(ms)
        return found, ms

    def compare(self, floats: list[Any], int8s: list[Any]) -> DetectorReport:
        figures = [compare_look(look.name, f, q, self.looks, self.thresholds, held_out=look.held_out)
                   for look, f, q in zip(self._looks, floats, int8s)]
        images = len(self.faces.crops)
        return DetectorReport(figures, self.looks.threshold, self.looks.cover_threshold, self.thresholds,
                              float_ms=round(self._times[0], 2), int8_ms=round(self._times[-1], 2),
                              images=images, held_out_images=sum(map(held_out, range(images))))


def compare_look(name: str, floats: Sequence[Face], int8s: Sequence[Face], looks: Looks,
                 thresholds: DetectorThresholds = DETECTOR_THRESHOLDS, *, held_out: bool = False) -> LookFigures:
    """One look's figures: the float detector's faces against the copy's (both found at the cover
    threshold); `held_out`: of an image the quantiser was not fed (held to the same)."""
    from vcamd.faces.detect import iou

    missed, ious, scores, offsets = 0, [1.0], [1.0], [0.0]
    for face in (f for f in floats if f.score >= looks.threshold):
        best = max(int8s, key=lambda other: iou(face.box, other.box), default=None)
        overlap = iou(face.box, best.box) if best is not None else 0.0
        if best is None or overlap < thresholds.box_iou or best.score < looks.cover_threshold:
            missed += 1
            continue
        ious.append(overlap)
        scores.append(best.score)
        width = max(face.box[2] - face.box[0], 1.0)
        offsets.append(float(np.linalg.norm(np.asarray(best.kps) - np.asarray(face.kps), axis=1).max()) / width)
    extra = [f.score for f in int8s if f.score >= looks.threshold
             and not any(iou(f.box, other.box) >= thresholds.box_iou for other in floats)]
    sure = sum(score >= looks.threshold + SURE_MARGIN for score in extra)
    return LookFigures(name, sum(f.score >= looks.threshold for f in floats), missed, round(min(ious), 4), round(min(scores), 4),
                       round(max(offsets), 4), sure, len(extra) - sure, held_out)
