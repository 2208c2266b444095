"""Face restoration through ONNX Runtime (no torch): GFPGAN 1.2/1.3/1.4, CodeFormer, RestoreFormer++,
GPEN-BFR 256/512/1024/2048 — one contract with a row per family in `vcamd.faces.specs.ENHANCERS`.

Every one takes the face aligned to its template (FFHQ, or ArcFace-128 for GPEN-BFR-256) in a
square crop of its own size, RGB in [-1, 1], as `input`, and returns the restored crop in the same
space; CodeFormer also takes its fidelity `weight` (a double: 0 = the most restored, 1 = the most
faithful to the input; FaceFusion's default 0.5). `enhance_aligned(crop)` is the way in:
`FaceEngine.swap_faces` holds the face's crop in the enhancer's geometry (`Enhancer.crop`) with the
swapped face pasted in; it is restored and mixed with `strength` in crop space, so the result can
be composited later at the face's current position.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np

from vcamd.common.errors import ModelError
from vcamd.common.types import Frame, as_frame
from vcamd.common.wayout import how_to_get
from vcamd.faces.specs import ENHANCER_CROP, ENHANCERS, ORT_FLOAT_DTYPES, CropSpec, EnhancerSpec, enhancer_spec_for

if TYPE_CHECKING:
    from vcamd.inference.runtime import Sessions

ENHANCE_SIZE = ENHANCER_CROP.size
"""GFPGAN's crop side (the default enhancer); the face is aligned to the FFHQ template scaled to this size."""

DEFAULT_WEIGHT = 0.5
"""CodeFormer's fidelity weight when none is given (FaceFusion's default)."""


class Enhancer:
    """A face enhancer (ONNX): restore a face, blend with `strength` (0 = off, 1 = the restored
    face); `weight` is CodeFormer's fidelity (the others have none)."""

    def __init__(self, path: Path | str, sessions: Sessions, strength: float = 0.8, weight: float = DEFAULT_WEIGHT) -> None:
        if not 0.0 <= strength <= 1.0:
            raise ValueError(f"strength must be within [0, 1], got {strength}")
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"weight must be within [0, 1], got {weight}")
        self.path = Path(path)
        self.strength = float(strength)
        self.weight = float(weight)
        self.session = sessions.get(self.path, background=True)
        """Its ONNX Runtime session: the model's, or its checked int8 copy's (`FaceEngine.use_int8` switches it)."""
        self.spec, self._input_name, self._input_dtype = self._check_signature()

    @property
    def crop(self) -> CropSpec:
        """The enhancer's crop: template, side and normalisation."""
        return self.spec.crop

    def _check_signature(self) -> tuple[EnhancerSpec, str, type]:
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        fix = f"set [models] enhancer to one from `vcamd models list` (gfpgan_1.4, codeformer, gpen_bfr_512, …), then get it: {how_to_get()}"
        sizes = sorted({spec.crop.size for spec in ENHANCERS})
        expected = f"an `input` [1,3,S,S] (S = {', '.join(map(str, sizes))}; CodeFormer also a `weight`) and an image output of the same shape"
        images = [i for i in inputs if i.name != "weight"]
        if len(images) != 1 or not outputs:
            raise ModelError(
                f"{self.path.name} is not a face enhancer: expected {expected}, "
                f"got inputs {[i.name for i in inputs]} and {len(outputs)} output(s)",
                fix=fix,
            )
        inp, out = images[0], outputs[0]
        side = _square_side(list(inp.shape))
        spec = enhancer_spec_for(None if side == -1 else side, {i.name for i in inputs}, self.path.name) if side else None
        if spec is None or _square_side(list(out.shape)) not in (side, -1, spec.crop.size):
            raise ModelError(
                f"{self.path.name} is not a face enhancer vcamd knows: expected {expected}, "
                f"got input {list(inp.shape)} ({', '.join(i.name for i in inputs)}) and output {list(out.shape)}",
                fix=fix,
            )
        dtype = ORT_FLOAT_DTYPES.get(inp.type)
        if dtype is None:
            raise ModelError(f"{self.path.name}: input type {inp.type}, expected float or float16", fix=fix)
        return spec, inp.name, dtype

    # ---- the model --------------------------------------------------------------------------

    def restore(self, crop_bgr: Frame) -> Frame:
        """Run the model on a crop aligned as `self.crop` says (BGR); returns the restored BGR crop."""
        side = self.crop.size
        if crop_bgr.shape != (side, side, 3):
            raise ValueError(f"the enhancer takes a {side}×{side}×3 crop, got {crop_bgr.shape}")
        blob = self.crop.to_blob([crop_bgr])  # BGR uint8 → RGB, [-1, 1], NCHW
        feeds: dict[str, np.ndarray] = {self._input_name: blob.astype(self._input_dtype, copy=False)}
        if self.spec.weight_input is not None:
            feeds[self.spec.weight_input] = np.array([self.weight], np.float64)
        out = self.session.run(None, feeds)[0]
        out = np.asarray(out[:1], np.float32)
        if not np.isfinite(out).all():  # NaN/Inf would become arbitrary pixels: never a face to show
            raise ModelError(f"{self.path.name} returned NaN/Inf values", fix="check the model file (`vcamd models verify`) and the execution provider")
        return self.crop.to_crops(out)[0]

    # ---- the two ways in ----------------------------------------------------------------------

    def enhance_aligned(self, crop_bgr: Frame) -> Frame:
        """Restore a crop in the enhancer's geometry and mix it with the input by `strength`, in crop space."""
        if self.strength <= 0.0:
            return crop_bgr
        restored = self.restore(crop_bgr)
        if self.strength >= 1.0:
            return restored
        return as_frame(cv2.addWeighted(restored, self.strength, crop_bgr, 1.0 - self.strength, 0.0))


def _square_side(shape: list[object]) -> int:
    """S of an [N,3,S,S] image shape (N 1 or symbolic); -1 when the sides are symbolic; 0 when it is no such shape."""
    if len(shape) != 4 or shape[1] != 3 or (isinstance(shape[0], int) and shape[0] not in (-1, 1)):
        return 0
    h, w = shape[2], shape[3]
    if isinstance(h, int) and isinstance(w, int) and h > 0:
        return h if h == w else 0
    return -1
