"""SCRFD face detection through insightface's decoder on our own ONNX Runtime sessions.

insightface's `SCRFD` class maps the 9 outputs by position, so any export works whatever its
output names (`score_8`…, `out0`…, numeric). Only the detector runs per frame — never
insightface's FaceAnalysis, which would also run landmark, gender/age and recognition models.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vcamd.errors import ModelError
from vcamd.types import Face, Frame

if TYPE_CHECKING:
    from insightface.model_zoo.scrfd import SCRFD

    from vcamd.runtime import Sessions

NMS_THRESHOLD = 0.4
"""Overlap above which two detections are the same face (insightface's default)."""


class FaceDetector:
    """`detect(frame, input_size)` → faces (box, score, 5 keypoints), sorted left to right.

    Models exported with a fixed input size (like the 640² `scrfd_*_kps` files) are rewritten to
    other sizes on demand (one cached session per size), so tracking can run the same detector on a
    small crop; models with a dynamic input (det_10g) use one session for every size.
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
        self._decoders: dict[int, SCRFD] = {}
        self._decoder(self.size)  # build the full-frame decoder now, so a bad model fails at load

    def _check_signature(self, session: object) -> None:
        inputs, outputs = session.get_inputs(), session.get_outputs()  # type: ignore[attr-defined]
        if len(inputs) != 1 or len(outputs) not in (9, 15) or len(inputs[0].shape) != 4:
            raise ModelError(
                f"{self.path.name} is not an SCRFD detector with keypoints (expected 1 image input and 9 outputs: "
                f"scores, boxes, keypoints per stride; got {len(inputs)} input(s), {len(outputs)} output(s))",
                fix="set [models] detector to buffalo_l (det_10g.onnx) or another SCRFD *_kps model",
            )

    def _decoder(self, size: int) -> SCRFD:
        decoder = self._decoders.get(size)
        if decoder is None:
            from insightface.model_zoo.scrfd import SCRFD

            if self._native_hw is None or self._native_hw == (size, size):
                session = self.sessions.get(self.path)
            else:
                session = self.sessions.get_resized(self.path, (size, size))
            # No model_file: insightface would otherwise build its own extra sessions per size.
            decoder = SCRFD(model_file=None, session=session)
            decoder.nms_thresh = NMS_THRESHOLD
            decoder.det_thresh = self.threshold
            self._decoders[size] = decoder
        return decoder

    def detect(self, frame: Frame, input_size: int | None = None) -> list[Face]:
        """Faces in the frame, left to right. The frame is letterboxed into a square of input_size."""
        size = int(input_size or self.size)
        boxes, kpss = self._decoder(size).detect(frame, input_size=(size, size), det_thresh=self.threshold)
        faces = [
            Face(box=tuple(float(v) for v in det[:4]), score=float(det[4]), kps=np.asarray(kps, dtype=np.float32))
            for det, kps in zip(boxes, kpss)
        ]
        faces.sort(key=lambda f: f.box[0])
        return faces
