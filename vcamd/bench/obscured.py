"""How recognisable an obscured face still is, measured with the real SCRFD detectors and MobileFaceNet.

One definition shared by tests/privacy/test_obscure.py and benchmarks/privacy.py (the table in
docs/reliability.md): plain functions, no pytest.

For each face in a scene (found by either SCRFD detector at 0.5 on the raw picture):
- the face's head box (the face box grown `scale`×, as the live engine does) is obscured;
- **detector**: both SCRFD models look at the obscured picture, the whole of it at 640 and a crop
  around each obscured face at 320 (the face then fills far more of the detector's input, as when
  the live tracker looks at a crop). The best score of any detection centred inside an obscured
  box is reported; detectors run at a low threshold so scores under 0.5 are seen too;
- **recogniser**: MobileFaceNet embeds the obscured pixels aligned with the keypoints of the raw
  face (where the face was) and the cosine with the raw face's embedding is reported. For scale,
  `baseline` is the cosine between the raw face and the same picture down- and up-sampled by 0.75
  (what a camera re-capture does): a face the recogniser still knows scores high there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import cv2
import numpy as np

from vcamd.common.types import Face, Frame
from vcamd.faces.detect import FaceDetector, iou
from vcamd.faces.identity import Recognizer
from vcamd.inference.runtime import Sessions
from vcamd.privacy.obscure import obscure_region

DETECTOR_MODELS = ("scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx")
DETECTION_THRESHOLD = 0.5
"""A face 'is found' at this score (the project's and insightface's default)."""
REPORT_THRESHOLD = 0.2
"""Detectors run this low while measuring, so the best score under 0.5 can be reported."""
MAX_COSINE = 0.3
"""Obscured vs raw face: at most this (same person ≈ 0.95, strangers ≈ 0.2)."""
ENGINE_HEAD_SCALE = 1.6
"""The head box the live engine obscured around a face before the split (MISS_REGION_SCALE); the
split engine covers a miss with 2.0× and a lost face with 2.6×. A smaller box is the harder case:
more of the head is left around the mosaic."""
HEAD_SCALES = (ENGINE_HEAD_SCALE, 1.2)
"""Asserted at 1.6× and at a tighter 1.2×, for margin (2.0× and 2.6× measure no better a face)."""

Box = tuple[int, int, int, int]
Obscurer = Callable[[Frame, Box], object]  # obscures the box in place; what it returns is not read


@dataclass(frozen=True)
class Models:
    detectors: dict[str, FaceDetector]
    """Built with REPORT_THRESHOLD."""
    recognizer: Recognizer


def load_models(assets: Path, sessions: Sessions | None = None) -> Models:
    sessions = sessions or Sessions(["cpu"], threads=2)
    models = assets / "models"
    detectors = {name: FaceDetector(models / name, sessions, threshold=REPORT_THRESHOLD) for name in DETECTOR_MODELS}
    return Models(detectors, Recognizer(models / "mobilefacenet.onnx", sessions))


def scale_to_height(image: Frame, height: int = 720) -> Frame:
    scale = height / image.shape[0]
    return cast(Frame, cv2.resize(image, (round(image.shape[1] * scale), height), interpolation=cv2.INTER_AREA))


def portrait_scene(portrait: Frame, face: Face, face_fraction: float, size: tuple[int, int] = (1280, 720), grey: int = 110) -> Frame:
    """The portrait scaled so its face box is `face_fraction` of the frame height, face centred."""
    width, height = size
    scale = height * face_fraction / face.height
    image = cv2.resize(portrait, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    cx, cy = (face.box[0] + face.box[2]) / 2 * scale, (face.box[1] + face.box[3]) / 2 * scale
    m = np.array([[1, 0, width / 2 - cx], [0, 1, height / 2 - cy]], np.float32)
    return cast(Frame, cv2.warpAffine(image, m, (width, height), borderMode=cv2.BORDER_CONSTANT, borderValue=(grey, grey, grey)))



def find_faces(models: Models, scene: Frame) -> list[Face]:
    """Every face either detector finds at 0.5 (a face found by both counted once)."""
    faces: list[Face] = []
    for detector in models.detectors.values():
        for face in detector.detect(scene):
            if face.score >= DETECTION_THRESHOLD and all(iou(face.box, f.box) <= 0.5 for f in faces):
                faces.append(face)
    return faces


def head_box(face: Face, scale: float, shape: tuple[int, ...]) -> Box:
    """The square around the face box grown `scale`×, clipped: the engine's rule for one face."""
    h, w = shape[:2]
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    half = max(face.width, face.height) * scale / 2
    return max(0, int(cx - half)), max(0, int(cy - half)), min(w, int(cx + half) + 1), min(h, int(cy + half) + 1)


def _inside(face: Face, box: Box) -> bool:
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    return box[0] <= cx <= box[2] and box[1] <= cy <= box[3]


@dataclass(frozen=True)
class FaceResult:
    width: float
    cosine: float
    """Obscured vs raw, aligned at the raw face's keypoints."""
    baseline: float
    """Raw vs the raw picture resampled (what a recognisable face scores)."""


@dataclass(frozen=True)
class SceneResult:
    name: str
    scale: float
    faces: list[FaceResult]
    max_score: dict[str, float]
    """Per detector: best score of a detection centred in an obscured box (0.0: none at REPORT_THRESHOLD)."""

    @property
    def max_cosine(self) -> float:
        return max(f.cosine for f in self.faces)

    @property
    def min_baseline(self) -> float:
        return min(f.baseline for f in self.faces)


def best_detection_in(models: Models, picture: Frame, raw: Frame, faces: list[Face], boxes: list[Box]) -> dict[str, float]:
    """Per detector, the best score of a face centred inside one of `boxes` (the obscured head boxes
    of `faces`): over the whole picture at 640 and over a crop twice each box's size at 320.

    In a crowd a head box also covers part of a neighbour nobody obscured (a face too small for
    the 640 pass that the 320 crop enlarges). Such a detection, found at the same place in the
    same view of the raw picture and not one of `faces`, is the neighbour, not the obscured face."""
    h, w = picture.shape[:2]
    best = dict.fromkeys(models.detectors, 0.0)
    views: list[tuple[slice, slice, int]] = [(slice(0, h), slice(0, w), 640)]
    for x0, y0, x1, y1 in boxes:
        half = max(x1 - x0, y1 - y0)
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        views.append((slice(max(0, cy - half), min(h, cy + half)), slice(max(0, cx - half), min(w, cx + half)), 320))

    def in_frame(face: Face, ys: slice, xs: slice) -> Face:
        b = face.box
        return Face(box=(b[0] + xs.start, b[1] + ys.start, b[2] + xs.start, b[3] + ys.start), score=face.score, kps=face.kps)

    for name, detector in models.detectors.items():
        for ys, xs, size in views:
            found = [in_frame(f, ys, xs) for f in detector.detect(picture[ys, xs], size)]
            found = [f for f in found if any(_inside(f, box) for box in boxes)]
            if not found:
                continue
            neighbours = [
                g for g in (in_frame(f, ys, xs) for f in detector.detect(raw[ys, xs], size))
                if all(iou(g.box, face.box) < 0.3 for face in faces)
            ]
            for face in found:
                if not any(iou(face.box, g.box) > 0.5 for g in neighbours):
                    best[name] = max(best[name], face.score)
    return best


def measure(models: Models, name: str, scene: Frame, faces: list[Face], scale: float, obscure: Obscurer = obscure_region) -> SceneResult:
    """Obscure every face's head box in a copy of `scene` and measure what is left."""
    boxes = [head_box(face, scale, scene.shape) for face in faces]
    obscured = scene.copy()
    for box in boxes:
        obscure(obscured, box)
    h, w = scene.shape[:2]
    resampled = cast(Frame, cv2.resize(cv2.resize(scene, (round(w * 0.75), round(h * 0.75)), interpolation=cv2.INTER_AREA), (w, h),
                                       interpolation=cv2.INTER_LINEAR))
    recognizer = models.recognizer
    results = []
    for face in faces:
        raw = recognizer.embed(scene, face)
        results.append(FaceResult(
            width=face.width,
            cosine=float(raw @ recognizer.embed(obscured, face)),
            baseline=float(raw @ recognizer.embed(resampled, face)),
        ))
    return SceneResult(name, scale, results, best_detection_in(models, obscured, scene, faces, boxes))


def pixelate_16px(frame: Frame, box: Box) -> None:
    """The obscuring the engine used before (16-px blocks): kept to show the measurement catches it."""
    x0, y0, x1, y1 = box
    roi = frame[y0:y1, x0:x1]
    small = cv2.resize(roi, (max(1, (x1 - x0) // 16), max(1, (y1 - y0) // 16)), interpolation=cv2.INTER_AREA)
    roi[...] = cv2.resize(small, (x1 - x0, y1 - y0), interpolation=cv2.INTER_LINEAR)


PORTRAIT_FRACTIONS = (1 / 2, 1 / 3, 1 / 6, 1 / 12)
"""Newton's face as these fractions of a 1280×720 frame's height (1/3: the issue's case)."""


def scenes(assets: Path, models: Models, *, crowd: bool = False) -> dict[str, Frame]:
    """The measured pictures by name: Newton's portrait as is, at 720p and with its face at several
    fractions of a 720p frame; the 29-face Solvay photo as is and at 720p; optionally the crowd selfie."""
    images = assets / "images"
    newton = cast(Frame, cv2.imread(str(images / "newton.png")))
    solvay = cast(Frame, cv2.imread(str(images / "solvay_conference_1927.png")))
    (newton_face,) = find_faces(models, newton)
    named = {"newton.png": newton, "newton.png @720p": scale_to_height(newton)}
    for fraction in PORTRAIT_FRACTIONS:
        named[f"newton, face 1/{round(1 / fraction)} of 720p"] = portrait_scene(newton, newton_face, fraction)
    named["solvay_conference_1927.png"] = solvay
    named["solvay_conference_1927.png @720p"] = scale_to_height(solvay)
    if crowd:
        named["crowd_selfie.jpg @720p"] = scale_to_height(cast(Frame, cv2.imread(str(images / "crowd_selfie.jpg"))))
    return named
