"""Cheap per-frame face positions between full-frame detections.

A full detection letterboxes the whole frame into the detector's 640-wide input. Between those, each
known face is re-detected in a square crop about twice its size, scaled to `track_size` (192² is
~11× fewer pixels than 640²), and the result is mapped back to frame coordinates. With more faces
than that ratio pays for, a full detection runs instead. The crop is cut
and scaled in one resize (one warpAffine near the frame's edges) that reads only the face's
region of the frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from vcamd.faces.detect import FaceDetector
from vcamd.types import Face, Frame

CROP_FACTOR = 2.0
"""Side of the tracking crop, relative to the larger side of the face box."""

SAME_FACE_IOU = 0.5
"""Two tracked results overlapping more than this are one face (tracks that converged)."""


@dataclass(frozen=True, slots=True)
class TrackCrop:
    """Square crop: crop pixel = (frame pixel - origin) * scale."""

    x0: float
    y0: float
    scale: float

    def to_frame(self, face: Face) -> Face:
        inv = 1.0 / self.scale
        x1, y1, x2, y2 = face.box
        box = (x1 * inv + self.x0, y1 * inv + self.y0, x2 * inv + self.x0, y2 * inv + self.y0)
        kps = (face.kps * np.float32(inv) + np.array([self.x0, self.y0], dtype=np.float32)).astype(np.float32)
        return Face(box=box, score=face.score, kps=kps)


class FaceTracker:
    """`update(frame, frame_index)` → faces, from a full detection or a cheap re-detection."""

    def __init__(self, detector: FaceDetector, track_size: int = 192, full_every: int = 10) -> None:
        self.detector = detector
        self.track_size = int(track_size)
        self.full_every = max(1, int(full_every))
        self._faces: list[Face] = []
        self._last_full: int | None = None
        self.full_detections = 0
        """How many full-frame detections ran (for stats and tests)."""

    def reset(self) -> None:
        """Forget the tracks: the next update runs a full detection."""
        self._faces = []
        self._last_full = None

    def update(self, frame: Frame, frame_index: int) -> list[Face]:
        due = self._last_full is None or frame_index - self._last_full >= self.full_every
        if due or not self._faces or not self._tracking_is_cheaper():
            return self._full(frame, frame_index)
        tracked = [self._redetect(frame, face) for face in self._faces]
        if any(face is None for face in tracked):
            return self._full(frame, frame_index)  # a face left its crop: look everywhere again
        self._faces = dedupe_faces([f for f in tracked if f is not None])
        return list(self._faces)

    def _tracking_is_cheaper(self) -> bool:
        """One crop per face costs (track_size / size)² of a full detection; with many faces
        (a group photo) one full detection is cheaper than all the crops."""
        return len(self._faces) * (self.track_size / self.detector.size) ** 2 < 1.0

    def _full(self, frame: Frame, frame_index: int) -> list[Face]:
        self._faces = self.detector.detect(frame)
        self._last_full = frame_index
        self.full_detections += 1
        return list(self._faces)

    def _redetect(self, frame: Frame, face: Face) -> Face | None:
        patch, crop = crop_around(frame, face, self.track_size)
        found = self.detector.detect(patch, input_size=self.track_size)
        return crop.to_frame(nearest_to_centre(found, self.track_size)) if found else None


def crop_around(frame: Frame, face: Face, size: int) -> tuple[Frame, TrackCrop]:
    """The size² tracking patch around `face` (CROP_FACTOR × its box), and how to map back.

    The patch is a private array, so a detector thread may keep using it after the frame has moved
    on. When the square lies inside the frame it is cut on whole pixels and scaled with one resize
    (about 3× cheaper than a warpAffine); near an edge one warpAffine cuts and scales it, filling
    what lies outside the frame with black. Both read only the face's region of the frame."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    side = CROP_FACTOR * max(face.width, face.height, 1.0)
    height, width = frame.shape[:2]
    # Whole pixels: the resize's own mapping is then exact (pixel centres, as below).
    side_px = max(1, round(side))
    x0, y0 = round(cx - side_px / 2), round(cy - side_px / 2)
    if x0 >= 0 and y0 >= 0 and x0 + side_px <= width and y0 + side_px <= height:
        scale = size / side_px
        patch = cv2.resize(frame[y0 : y0 + side_px, x0 : x0 + side_px], (size, size), interpolation=cv2.INTER_LINEAR)
        # resize maps patch pixel p to frame pixel (p + 0.5) / scale - 0.5 + x0.
        offset = 0.5 / scale - 0.5
        return patch, TrackCrop(x0=x0 + offset, y0=y0 + offset, scale=scale)
    crop = TrackCrop(x0=cx - side / 2, y0=cy - side / 2, scale=size / side)
    m = np.array([[crop.scale, 0, -crop.x0 * crop.scale], [0, crop.scale, -crop.y0 * crop.scale]], dtype=np.float32)
    patch = cv2.warpAffine(frame, m, (size, size), flags=cv2.INTER_LINEAR, borderValue=0)
    return patch, crop


def nearest_to_centre(found: list[Face], size: int) -> Face:
    """The face we follow is the detection nearest the patch's centre."""
    centre = size / 2
    return min(found, key=lambda f: ((f.box[0] + f.box[2]) / 2 - centre) ** 2 + ((f.box[1] + f.box[3]) / 2 - centre) ** 2)


def dedupe_faces(faces: list[Face]) -> list[Face]:
    """One face per place: greedily by score, a face overlapping a kept one by more than
    SAME_FACE_IOU is dropped (tracks that converged). Left to right.

    All pairwise overlaps come from one vectorised IoU matrix, so a group of 29 faces costs one
    small array operation per frame instead of hundreds of Python `_iou` calls."""
    if len(faces) < 2:
        return list(faces)
    by_score = sorted(faces, key=lambda f: -f.score)
    boxes = np.array([f.box for f in by_score], dtype=np.float64)
    x1, y1, x2, y2 = boxes.T
    areas = np.maximum(0.0, x2 - x1) * np.maximum(0.0, y2 - y1)
    iw = np.maximum(0.0, np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :]))
    ih = np.maximum(0.0, np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :]))
    inter = iw * ih
    union = areas[:, None] + areas[None, :] - inter
    same = inter > SAME_FACE_IOU * union  # iou > SAME_FACE_IOU, without dividing by an empty union
    dropped = np.zeros(len(by_score), dtype=bool)
    kept: list[Face] = []
    for i, face in enumerate(by_score):
        if dropped[i]:
            continue
        kept.append(face)
        dropped |= same[i]
    return sorted(kept, key=lambda f: f.box[0])
