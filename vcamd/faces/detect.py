"""SCRFD face detection on our own ONNX Runtime sessions.

The model's outputs are read by position, as insightface's `SCRFD` reads them, so any export works
whatever its output names (`score_8`…, `out0`…, numeric). Only the detector runs per frame — never
insightface's FaceAnalysis, which would also run landmark, gender/age and recognition models.

Pre- and post-processing are insightface's `SCRFD.detect` maths (letterbox resize, blob with
mean 127.5 / std 128 and RGB order, distance-to-box/keypoint decoding, NMS at 0.4) done with less
work per call, because they run on every frame (a crop re-detection) and their cost adds up:

* the frame is letterboxed into a rectangle of its own aspect ratio, the long side `input_size`
  and the short one rounded up to a multiple of 32 (the largest stride), instead of a square:
  the same scale, so the same faces, but a 16:9 frame fills 640×384 rather than 640×640 and the
  model's run costs ~40 % less. Fixed-size exports are rewritten to that shape (one cached
  session per shape);
* the blob is built from the resized frame's colour planes straight into the input array (no
  letterbox canvas, no `cv2.dnn.blobFromImage` pass over it);
* only anchors scoring above the threshold are decoded (insightface decodes every anchor, then
  drops most of them); anchor centres are built once per shape; everything stays float32.

`tests/faces/test_detect.py` checks the results against insightface's own `SCRFD.detect`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.errors import ModelError
from vcamd.types import Face, Frame

if TYPE_CHECKING:
    from vcamd.runtime import Sessions

NMS_THRESHOLD = 0.4
"""Overlap above which two detections are the same face (insightface's default)."""

INPUT_MEAN = 127.5
INPUT_STD = 128.0
"""SCRFD's input normalisation (insightface's `SCRFD.input_mean` / `input_std`)."""

SHAPE_STEP = 32
"""The input's sides are multiples of the largest anchor stride of the 3-stride models."""


def input_shape_for(frame_hw: tuple[int, int], size: int) -> tuple[int, int]:
    """(height, width) of the detector input for a frame: the long side `size`, the short side
    the frame's aspect ratio, rounded up to a multiple of SHAPE_STEP (never above `size`)."""
    h, w = frame_hw
    if h >= w:
        return size, min(size, _round_up(size * w / h))
    return min(size, _round_up(size * h / w)), size


def _round_up(value: float) -> int:
    return max(SHAPE_STEP, int(np.ceil(value / SHAPE_STEP)) * SHAPE_STEP)


class _Layout:
    """How one model's outputs are laid out: strides, anchors per cell, where each output sits."""

    def __init__(self, outputs: int, batched: bool) -> None:
        self.fmc = 3 if outputs == 9 else 5
        self.strides = (8, 16, 32) if self.fmc == 3 else (8, 16, 32, 64, 128)
        self.anchors = 2 if self.fmc == 3 else 1
        self.batched = batched


class FaceDetector:
    """`detect(frame, input_size)` → faces (box, score, 5 keypoints), sorted left to right.

    Models exported with a fixed input size (like the 640² `scrfd_*_kps` files) are rewritten to
    other shapes on demand (one cached session per shape), so tracking can run the same detector
    on a small crop; models with a dynamic input (det_10g) use one session for every shape.
    Safe to call from several threads at once (the caches only ever gain entries).
    """

    def __init__(self, path: Path | str, sessions: Sessions, size: int = 640, threshold: float = 0.5) -> None:
        self.path = Path(path)
        self.sessions = sessions
        self.size = int(size)
        self.threshold = float(threshold)
        session = sessions.get(self.path)
        self._check_signature(session)
        shape = session.get_inputs()[0].shape
        self._native_hw = tuple(shape[2:4]) if all(isinstance(d, int) and d > 0 for d in shape[2:4]) else None
        self._input_name = session.get_inputs()[0].name
        outputs = session.get_outputs()
        self._layout = _Layout(len(outputs), batched=len(outputs[0].shape) == 3)
        self._output_names = [o.name for o in outputs]
        self._sessions_by_hw: dict[tuple[int, int], object] = {}
        self._centres: dict[tuple[int, int, int], npt.NDArray[np.float32]] = {}
        self._lock = threading.Lock()
        self._session((self.size, self.size))  # build the full-frame session now, so a bad model fails at load

    def _check_signature(self, session: object) -> None:
        inputs, outputs = session.get_inputs(), session.get_outputs()  # type: ignore[attr-defined]
        if len(inputs) != 1 or len(outputs) not in (9, 15) or len(inputs[0].shape) != 4:
            raise ModelError(
                f"{self.path.name} is not an SCRFD detector with keypoints (expected 1 image input and 9 outputs: "
                f"scores, boxes, keypoints per stride; got {len(inputs)} input(s), {len(outputs)} output(s))",
                fix="set [models] detector to buffalo_l (det_10g.onnx) or another SCRFD *_kps model",
            )

    def _session(self, hw: tuple[int, int]):
        session = self._sessions_by_hw.get(hw)
        if session is None:
            if self._native_hw is None or self._native_hw == hw:
                session = self.sessions.get(self.path)
            else:
                session = self.sessions.get_resized(self.path, hw)
            self._sessions_by_hw[hw] = session
        return session

    def input_shape(self, frame_hw: tuple[int, int], input_size: int | None = None) -> tuple[int, int]:
        """The (height, width) the detector's input takes for a frame of this size (see module doc)."""
        return input_shape_for(frame_hw, int(input_size or self.size))

    def detect(self, frame: Frame, input_size: int | None = None, threshold: float | None = None) -> list[Face]:
        """Faces in the frame, left to right. The frame is letterboxed (top-left) into the input
        shape `input_shape` gives: its long side `input_size`. `threshold` replaces the detector's
        own for this call (the live full detection asks for the faces it is unsure of too; a
        lower threshold adds faces, it never drops one the detector's own would keep: NMS keeps
        the higher score)."""
        size = int(input_size or self.size)
        in_h, in_w = input_shape_for(frame.shape[:2], size)
        blob, det_scale = self._blob(frame, in_h, in_w)
        outs = self._session((in_h, in_w)).run(self._output_names, {self._input_name: blob})
        boxes, scores, kps = self._decode(outs, in_h, in_w, self.threshold if threshold is None else float(threshold))
        if scores.size == 0:
            return []
        boxes /= det_scale
        kps /= det_scale
        order = np.argsort(-scores, kind="stable")
        boxes, scores, kps = boxes[order], scores[order], kps[order]
        keep = nms(boxes, scores, NMS_THRESHOLD)
        faces = [
            Face(box=tuple(float(v) for v in boxes[i]), score=float(scores[i]), kps=kps[i].copy())
            for i in keep
        ]
        faces.sort(key=lambda f: f.box[0])
        return faces

    def _blob(self, frame: Frame, in_h: int, in_w: int) -> tuple[npt.NDArray[np.float32], float]:
        """The letterboxed NCHW float blob (RGB, (x − 127.5) / 128; the padding is what a black
        pixel gives), and the scale from frame to input pixels.

        Built from the resized frame's planes with one multiply-subtract each, written straight
        into the blob: ~5× less CPU than `cv2.dnn.blobFromImage` on a letterboxed canvas, and the
        same values (1/128 is exact in float32)."""
        h, w = frame.shape[:2]
        if h / w > in_h / in_w:
            new_h, new_w = in_h, int(in_h / (h / w))
        else:
            new_w, new_h = in_w, int(in_w * (h / w))
        det_scale = new_h / h
        resized = cv2.resize(frame, (new_w, new_h))
        blob = np.empty((1, 3, in_h, in_w), np.float32)
        offset = np.float32(INPUT_MEAN / INPUT_STD)
        if new_h < in_h:
            blob[0, :, new_h:, :] = -offset
        if new_w < in_w:
            blob[0, :, :new_h, new_w:] = -offset
        scale = np.float32(1.0 / INPUT_STD)
        for channel, plane in enumerate(reversed(cv2.split(resized))):  # BGR → RGB
            out = blob[0, channel, :new_h, :new_w]
            np.multiply(plane, scale, out=out, dtype=np.float32)
            out -= offset
        return blob, det_scale

    def _anchor_centres(self, in_h: int, in_w: int, stride: int) -> npt.NDArray[np.float32]:
        key = (in_h, in_w, stride)
        centres = self._centres.get(key)
        if centres is None:
            gh, gw = in_h // stride, in_w // stride
            ys, xs = np.mgrid[:gh, :gw]
            centres = (np.stack([xs, ys], axis=-1).astype(np.float32) * stride).reshape(-1, 2)
            centres = np.repeat(centres, self._layout.anchors, axis=0)
            with self._lock:
                self._centres[key] = centres
        return centres

    def _decode(self, outs: list[np.ndarray], in_h: int, in_w: int, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Boxes (n, 4), scores (n,), keypoints (n, 5, 2) of the anchors scoring ≥ threshold, in
        input pixels, strides in model order (as insightface concatenates them)."""
        layout = self._layout
        boxes, scores, kpss = [], [], []
        for i, stride in enumerate(layout.strides):
            score, dist, kd = outs[i], outs[i + layout.fmc], outs[i + 2 * layout.fmc]
            if layout.batched:
                score, dist, kd = score[0], dist[0], kd[0]
            pos = np.flatnonzero(score.reshape(-1) >= threshold)
            if pos.size == 0:
                continue
            centres = self._anchor_centres(in_h, in_w, stride)[pos]
            d = dist.reshape(-1, 4)[pos] * np.float32(stride)
            boxes.append(np.concatenate([centres - d[:, :2], centres + d[:, 2:]], axis=1))
            kpss.append(kd.reshape(-1, 5, 2)[pos] * np.float32(stride) + centres[:, None, :])
            scores.append(score.reshape(-1)[pos])
        if not scores:
            return np.empty((0, 4), np.float32), np.empty(0, np.float32), np.empty((0, 5, 2), np.float32)
        return np.concatenate(boxes), np.concatenate(scores).astype(np.float32, copy=False), np.concatenate(kpss)


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> list[int]:
    """Greedy non-maximum suppression, insightface's `SCRFD.nms` (areas with the +1 pixel
    convention); `boxes` must already be sorted by descending score."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.arange(len(scores))
    keep: list[int] = []
    while order.size > 0:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]) + 1)
        inter = w * h
        order = rest[inter / (areas[i] + areas[rest] - inter) <= threshold]
    return keep
