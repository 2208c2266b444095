"""GFPGAN 1.4 face restoration through ONNX Runtime (no torch).

The model takes a face aligned to the FFHQ 5-point template in a 512×512 crop, RGB in [-1, 1]
(`vcamd.faces.specs.ENHANCER_CROP`), and returns the restored crop in the same space.
`enhance_aligned(crop512)` is the way in: `FaceEngine.swap_faces` holds the face's FFHQ crop with
the swapped face pasted in; it is restored and mixed with `strength` in crop space, so the result
can be composited later at the face's current position.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np

from vcamd.errors import ModelError
from vcamd.faces.specs import ENHANCER_CROP, ORT_FLOAT_DTYPES
from vcamd.modelstore.wayout import how_to_get
from vcamd.types import Frame

if TYPE_CHECKING:
    from vcamd.runtime import Sessions

ENHANCE_SIZE = ENHANCER_CROP.size
"""GFPGAN's crop side; the face is aligned to the FFHQ template scaled to this size."""


class Enhancer:
    """GFPGAN 1.4 (ONNX): restore a face, blend with `strength` (0 = off, 1 = the restored face)."""

    def __init__(self, path: Path | str, sessions: Sessions, strength: float = 0.8) -> None:
        if not 0.0 <= strength <= 1.0:
            raise ValueError(f"strength must be within [0, 1], got {strength}")
        self.path = Path(path)
        self.strength = float(strength)
        self._session = sessions.get(self.path, background=True)
        self._input_name, self._input_dtype = self._check_signature()

    def _check_signature(self) -> tuple[str, type]:
        inputs, outputs = self._session.get_inputs(), self._session.get_outputs()
        fix = f"set [models] enhancer to gfpgan_1.4 ({how_to_get(['gfpgan_1.4'])}) or a GFPGAN 1.4 ONNX export"

        def square_image(shape: list[object]) -> bool:
            if len(shape) != 4 or shape[1] != 3:
                return False
            return all(not isinstance(d, int) or d in (-1, ENHANCE_SIZE) for d in shape[2:]) and (
                not isinstance(shape[0], int) or shape[0] in (-1, 1)
            )

        if len(inputs) != 1 or not outputs:
            raise ModelError(
                f"{self.path.name} is not a GFPGAN enhancer: expected 1 image input and an image output, "
                f"got {len(inputs)} input(s) and {len(outputs)} output(s)",
                fix=fix,
            )
        inp, out = inputs[0], outputs[0]
        if not square_image(list(inp.shape)) or not square_image(list(out.shape)):
            raise ModelError(
                f"{self.path.name} is not a GFPGAN enhancer: expected input and output [1,3,512,512], "
                f"got input {list(inp.shape)} and output {list(out.shape)}",
                fix=fix,
            )
        dtype = ORT_FLOAT_DTYPES.get(inp.type)
        if dtype is None:
            raise ModelError(f"{self.path.name}: input type {inp.type}, expected float or float16", fix=fix)
        return inp.name, dtype

    # ---- the model --------------------------------------------------------------------------

    def restore(self, crop_bgr: Frame) -> Frame:
        """Run GFPGAN on a 512×512 FFHQ-aligned BGR crop; returns the restored BGR crop."""
        if crop_bgr.shape != (ENHANCE_SIZE, ENHANCE_SIZE, 3):
            raise ValueError(f"the enhancer takes a {ENHANCE_SIZE}×{ENHANCE_SIZE}×3 crop, got {crop_bgr.shape}")
        blob = ENHANCER_CROP.to_blob([crop_bgr])  # BGR uint8 → RGB, [-1, 1], NCHW
        out = self._session.run(None, {self._input_name: blob.astype(self._input_dtype, copy=False)})[0]
        out = np.asarray(out[:1], np.float32)
        if not np.isfinite(out).all():  # NaN/Inf would become arbitrary pixels: never a face to show
            raise ModelError(f"{self.path.name} returned NaN/Inf values", fix="check the model file (`vcamd models verify`) and the execution provider")
        return ENHANCER_CROP.to_crops(out)[0]

    # ---- the two ways in ----------------------------------------------------------------------

    def enhance_aligned(self, crop_bgr: Frame) -> Frame:
        """Restore an FFHQ-512 crop and mix it with the input by `strength`, in crop space."""
        if self.strength <= 0.0:
            return crop_bgr
        restored = self.restore(crop_bgr)
        if self.strength >= 1.0:
            return restored
        return cv2.addWeighted(restored, self.strength, crop_bgr, 1.0 - self.strength, 0.0)
