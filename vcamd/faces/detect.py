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
  session per shape) — unless the graph has shapes fixed inside it too (some exports bake the
  640² sizes into Resize/Reshape constants): a rewritten shape that cannot be created, fails,
  returns outputs that do not fit its anchor grid, or finds other faces than the model's own
  shape on the same frame makes that model fall back to its own input shape (the frame
  letterboxed at the same scale into the model's square, as insightface runs it), logged once
  (`own_shape_reason`, `vcamd doctor`). Until a rewritten shape has been compared with the own
  shape on a frame with a face, each rewritten run is checked that way (one more run);
* the blob is built from the resized frame's colour planes straight into the input array (no
  letterbox canvas, no `cv2.dnn.blobFromImage` pass over it);
* only anchors scoring above the threshold are decoded (insightface decodes every anchor, then
  drops most of them); anchor centres are built once per shape; everything stays float32.

`tests/faces/test_detect.py` checks the results against insightface's own `SCRFD.detect`.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.errors import ModelError
from vcamd.common.types import Face, Frame

if TYPE_CHECKING:
    import onnxruntime

    from vcamd.inference.runtime import Sessions

log = logging.getLogger(__name__)

NMS_THRESHOLD = 0.4
"""Overlap above which two detections are the same face (insightface's default)."""

INPUT_MEAN = 127.5
INPUT_STD = 128.0
"""SCRFD's input normalisation (insightface's `SCRFD.input_mean` / `input_std`)."""

SHAPE_STEP = 32
"""The input's sides are multiples of the largest anchor stride of the 3-stride models."""

SAME_FACE_IOU = 0.5
"""A face found at a rewritten input shape is the own shape's face when their boxes overlap this much."""

SURE_MARGIN = 0.1
"""Faces scoring this far above the threshold must be found at both shapes; those nearer the
threshold may come and go with the padding's few pixels of context."""


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
        self._native_hw: tuple[int, int] | None = (int(shape[2]), int(shape[3])) if all(isinstance(d, int) and d > 0 for d in shape[2:4]) else None
        self._input_name = session.get_inputs()[0].name
        outputs = session.get_outputs()
        self._layout = _Layout(len(outputs), batched=len(outputs[0].shape) == 3)
        self._output_names = [o.name for o in outputs]
        self._sessions_by_hw: dict[tuple[int, int], onnxruntime.InferenceSession] = {}
        self._centres: dict[tuple[int, int, int], npt.NDArray[np.float32]] = {}
        self._lock = threading.Lock()
        self.own_shape_reason: str | None = None
        """Why this fixed-size model runs only at its own input shape (None: it takes any shape)."""
        self._rewrite_trusted = self._native_hw is None
        """A rewritten shape found the own shape's faces on a frame with a face (or no rewriting needed)."""
        self._session((self.size, self.size))  # build the full-frame session now, so a bad model fails at load

    @property
    def native_hw(self) -> tuple[int, int] | None:
        """The (height, width) the model's graph fixes; None: it takes any shape."""
        return self._native_hw

    @property
    def input_name(self) -> str:
        return str(self._input_name)

    def copy_sessions(self, copy: Path) -> dict[tuple[int, int], onnxruntime.InferenceSession]:
        """Sessions of the model's int8 copy `copy` for every input shape this detector has run so
        far (made here: the int8 build's thread, not the loop's); from now on `sessions` makes any
        other shape from the copy too (`Sessions.copy_sessions`). ModelError when one cannot be loaded."""
        shapes = list(self._sessions_by_hw) or [(self.size, self.size)]
        own = [None if self._native_hw is None or hw == self._native_hw else hw for hw in shapes]
        made = self.sessions.copy_sessions(self.path, copy, own)
        return {hw: made[key] for hw, key in zip(shapes, own)}

    def use_sessions(self, sessions_by_hw: dict[tuple[int, int], onnxruntime.InferenceSession]) -> None:
        """Run from the next detection on these sessions (`copy_sessions`: the int8 copy's); a shape
        not among them is made by `sessions` when first asked for (between two frames, the loop's
        thread: a detection running meanwhile finishes on the session it had)."""
        self._sessions_by_hw = dict(sessions_by_hw)

    def _check_signature(self, session: onnxruntime.InferenceSession) -> None:
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if len(inputs) != 1 or len(outputs) not in (9, 15) or len(inputs[0].shape) != 4:
            raise ModelError(
                f"{self.path.name} is not an SCRFD detector with keypoints (expected 1 image input and 9 outputs: "
                f"scores, boxes, keypoints per stride; got {len(inputs)} input(s), {len(outputs)} output(s))",
                fix="set [models] detector to buffalo_l (det_10g.onnx) or another SCRFD *_kps model",
            )

    def _session(self, hw: tuple[int, int]) -> onnxruntime.InferenceSession:
        session = self._sessions_by_hw.get(hw)
        if session is None:
            if self._native_hw is None or self._native_hw == hw:
                session = self.sessions.get(self.path)
            else:
                session = self.sessions.get_resized(self.path, hw)
            self._sessions_by_hw[hw] = session
        return session

    def input_shape(self, frame_hw: tuple[int, int], input_size: int | None = None) -> tuple[int, int]:
        """The (height, width) the detector's input takes for a frame of this size (see module doc):
        the model's own shape once it has fallen back to it."""
        return self._canvas(input_shape_for(frame_hw, int(input_size or self.size)))

    def _canvas(self, fit_hw: tuple[int, int]) -> tuple[int, int]:
        if self.own_shape_reason is not None and self._native_hw is not None:
            return self._native_hw
        return fit_hw

    def detect(self, frame: Frame, input_size: int | None = None, threshold: float | None = None) -> list[Face]:
        """Faces in the frame, left to right. The frame is letterboxed (top-left) into the input
        shape `input_shape` gives: its long side `input_size`. `threshold` replaces the detector's
        own for this call (the live full detection asks for the faces it is unsure of too; a
        lower threshold adds faces, it never drops one the detector's own would keep: NMS keeps
        the higher score)."""
        fit_hw = input_shape_for(frame.shape[:2], int(input_size or self.size))
        threshold = self.threshold if threshold is None else float(threshold)
        in_hw = self._canvas(fit_hw)
        if self._native_hw is None or in_hw == self._native_hw:
            return self._faces(frame, fit_hw, in_hw, threshold)
        if not self._rewrite_trusted:
            return self._compared(frame, fit_hw, threshold)
        try:
            return self._faces(frame, fit_hw, in_hw, threshold)
        except NonFiniteScores:
            raise  # the model failed on this frame, whatever its input shape
        except (ModelError, _OffGrid) as exc:  # this shape's session cannot be built, or computes another grid
            self._fall_back(in_hw, exc)
            return self._faces(frame, fit_hw, self._native_hw, threshold)

    def _compared(self, frame: Frame, fit_hw: tuple[int, int], threshold: float) -> list[Face]:
        """The faces at the rewritten shape `fit_hw` when they are the faces the model's own shape
        finds on this frame (then, once a frame had a face, the rewriting is trusted); else the
        own shape's, and the model falls back to its own shape from now on."""
        assert self._native_hw is not None
        own = self._faces(frame, fit_hw, self._native_hw, threshold)
        try:
            rewritten = self._faces(frame, fit_hw, fit_hw, threshold)
        except NonFiniteScores:
            raise  # the model failed on this frame (the own shape's finite scores were this run's luck)
        except Exception as exc:  # noqa: BLE001 — the own shape just ran: whatever fails here is the rewriting
            self._fall_back(fit_hw, exc)
            return own
        if not same_faces(own, rewritten, threshold + SURE_MARGIN):
            self._fall_back(fit_hw, f"it finds {len(rewritten)} face(s) where its own shape finds {len(own)} on the same frame")
            return own
        if own:
            self._rewrite_trusted = True
        return rewritten

    def shape_verdict(self) -> tuple[bool, str | None]:
        """What comparing the rewritten shapes with the own shape has said so far: (trusted, own_shape_reason)."""
        return self._rewrite_trusted, self.own_shape_reason

    def adopt_shape_verdict(self, trusted: bool, own_shape_reason: str | None) -> None:
        """Take the verdict a read of the source photo reached with this model file (kept with the
        photo's face, `vcamd.faces.source_cache`), so a start that does not detect on the photo
        again does not move that comparison onto the first camera frame."""
        if own_shape_reason is not None and self._native_hw is not None:
            with self._lock:
                if self.own_shape_reason is not None:
                    return
                self.own_shape_reason = own_shape_reason
            log.warning("%s: runs at its own input shape %d×%d only (the frame letterboxed into it; slower): %s",
                        self.path.name, self._native_hw[1], self._native_hw[0], own_shape_reason)
        elif trusted:
            self._rewrite_trusted = True

    def _fall_back(self, hw: tuple[int, int], why: object) -> None:
        """From now on run this model at its own input shape only; logged once."""
        assert self._native_hw is not None
        with self._lock:
            if self.own_shape_reason is not None:
                return
            text = why.message if isinstance(why, ModelError) else str(why)
            lines = text.strip().splitlines() or [type(why).__name__]
            self.own_shape_reason = f"rewritten to {hw[1]}×{hw[0]}, {lines[0][:300]}"
        log.warning("%s: runs at its own input shape %d×%d only (the frame letterboxed into it; slower): %s",
                    self.path.name, self._native_hw[1], self._native_hw[0], self.own_shape_reason)

    def _faces(self, frame: Frame, fit_hw: tuple[int, int], in_hw: tuple[int, int], threshold: float) -> list[Face]:
        """The faces of one run: the frame letterboxed to fit `fit_hw`, at the top left of an
        input of shape `in_hw` (the same, or the model's own shape when larger)."""
        in_h, in_w = in_hw
        blob, det_scale = self._blob(frame, min(fit_hw[0], in_h), min(fit_hw[1], in_w), in_h, in_w)
        outs = self._session(in_hw).run(self._output_names, {self._input_name: blob})
        self._check_grid(outs, in_h, in_w)
        if not all(np.isfinite(outs[i]).all() for i in range(len(self._layout.strides))):
            # NaN scores compare false with every threshold: "no face here", when the model failed.
            raise NonFiniteScores(f"{self.path.name} returned NaN/Inf face scores",
                                  fix="check the model file (`vcamd models verify`) and the execution provider")
        boxes, scores, kps = self._decode(outs, in_h, in_w, threshold)
        if scores.size == 0:
            return []
        boxes /= det_scale
        kps /= det_scale
        order = np.argsort(-scores, kind="stable")
        boxes, scores, kps = boxes[order], scores[order], kps[order]
        keep = nms(boxes, scores, NMS_THRESHOLD)
        faces = [
            Face(box=_box(boxes[i]), score=float(scores[i]), kps=kps[i].copy())
            for i in keep
        ]
        faces.sort(key=lambda f: f.box[0])
        return faces

    def _check_grid(self, outs: list[np.ndarray], in_h: int, in_w: int) -> None:
        """Each score output has one value per anchor of its stride's grid (a graph with a size
        fixed inside it may compute the grid of its own shape instead)."""
        layout = self._layout
        for i, stride in enumerate(layout.strides):
            expected = (in_h // stride) * (in_w // stride) * layout.anchors
            if outs[i].size != expected:
                raise _OffGrid(f"its stride-{stride} scores have {outs[i].size} values for the {expected} anchors of a {in_w}×{in_h} input")

    @staticmethod
    def _blob(frame: Frame, fit_h: int, fit_w: int, in_h: int, in_w: int) -> tuple[npt.NDArray[np.float32], float]:
        """The NCHW float blob (RGB, (x − 127.5) / 128) of shape `in_h`×`in_w`, the frame resized
        to fit `fit_h`×`fit_w` at its top left (the padding is what a black pixel gives), and the
        scale from frame to input pixels.

        Built from the resized frame's planes with one multiply-subtract each, written straight
        into the blob: ~5× less CPU than `cv2.dnn.blobFromImage` on a letterboxed canvas, and the
        same values (1/128 is exact in float32)."""
        h, w = frame.shape[:2]
        if h / w > fit_h / fit_w:
            new_h, new_w = fit_h, int(fit_h / (h / w))
        else:
            new_w, new_h = fit_w, int(fit_w * (h / w))
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


def letterbox_blob(image: Frame, hw: tuple[int, int]) -> npt.NDArray[np.float32]:
    """The detector's input for `image` letterboxed (top left) into an input of shape `hw`, as `detect` feeds it."""
    return FaceDetector._blob(image, hw[0], hw[1], hw[0], hw[1])[0]


class NonFiniteScores(ModelError):
    """A run's face scores hold NaN or Inf: the model failed (a face there or not is not known), which
    a caller must not read as "no face" — the live tracker covers the frame as for a detector that raises."""


class _OffGrid(ValueError):
    """A run's outputs do not fit the anchor grid of its input shape."""


def _box(row: np.ndarray) -> tuple[float, float, float, float]:
    x1, y1, x2, y2 = (float(v) for v in row)
    return x1, y1, x2, y2


def same_faces(a: list[Face], b: list[Face], sure_score: float) -> bool:
    """Whether two runs on one frame found the same faces: every face scoring at least
    `sure_score` in either has a face in the other overlapping it by SAME_FACE_IOU."""
    return all(
        any(iou(face.box, other.box) >= SAME_FACE_IOU for other in others)
        for faces, others in ((a, b), (b, a)) for face in faces if face.score >= sure_score
    )


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Intersection over union of two (x0, y0, x1, y1) boxes."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


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
