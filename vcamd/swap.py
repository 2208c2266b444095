"""The face swapper (inswapper_128): source latent once, then aligned 128² crops in, swapped crops out.

Contract (model-contracts.md): inputs `target` [N,3,128,128] RGB in [0,1] and `source` [N,512] =
normalize(ArcFace embedding @ emap), where `emap` is the graph's last initializer; output
[N,3,128,128] RGB in [0,1]. fp16 exports take float16: the input dtypes are read from the session.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from vcamd.errors import FaceError, ModelError
from vcamd.faces.align import Affine, estimate_affine, warp
from vcamd.types import Face, Frame

if TYPE_CHECKING:
    from vcamd.runtime import Sessions

CROP_SIZE = 128
LATENT_DIM = 512

Latent = npt.NDArray[np.float32]
"""(1, 512) float32, L2-normalised: the source identity in the swapper's own space."""

_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class Swapper:
    """inswapper_128 on an ONNX Runtime session; `.swap(crops, latent)` runs one batch when it can."""

    def __init__(self, path: Path | str, sessions: Sessions) -> None:
        self.path = Path(path)
        self.session = sessions.get(self.path)
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = self.session.get_outputs()
        target, source = inputs.get("target"), inputs.get("source")
        ok = (
            target is not None
            and source is not None
            and len(inputs) == 2
            and len(outputs) == 1
            and list(target.shape[1:]) == [3, CROP_SIZE, CROP_SIZE]
            and list(source.shape[1:]) == [LATENT_DIM]
            and len(outputs[0].shape) == 4
            and target.type in _ORT_DTYPES
            and source.type in _ORT_DTYPES
        )
        if not ok:
            got = ", ".join(f"{i.name} {i.shape} {i.type}" for i in self.session.get_inputs())
            raise ModelError(
                f"{self.path.name} is not an inswapper_128 model (expected inputs target [1,3,128,128] and "
                f"source [1,512], one output [1,3,128,128]; got inputs {got} and {len(outputs)} output(s))",
                fix="set [models] swapper to inswapper_128_fp16 or inswapper_128 (`vcamd models pull`)",
            )
        self.target_name, self.source_name = target.name, source.name
        self.target_dtype = _ORT_DTYPES[target.type]
        self.source_dtype = _ORT_DTYPES[source.type]
        batch = target.shape[0]
        self.batched = not (isinstance(batch, int) and batch > 0)
        """True when the batch dim is symbolic: several faces go through in one run."""
        self.emap = _read_emap(self.path)

    def latent(self, embedding: npt.ArrayLike) -> Latent:
        """normalize(embedding @ emap): computed once per source identity, never per frame."""
        emb = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if emb.shape[0] != LATENT_DIM:
            raise FaceError(
                f"the recognizer gives {emb.shape[0]}-d embeddings; the swapper needs {LATENT_DIM}-d (ArcFace w600k_r50)",
                fix="set [models] recognizer to buffalo_l",
            )
        latent = (emb @ self.emap).reshape(1, LATENT_DIM)
        return (latent / np.linalg.norm(latent)).astype(np.float32)

    @staticmethod
    def align(frame: Frame, face: Face) -> tuple[Frame, Affine]:
        """The face's 128² ArcFace-aligned crop (insightface norm_crop2 geometry) and its matrix M."""
        m = estimate_affine(face.kps, CROP_SIZE, "arcface")
        return warp(frame, m, CROP_SIZE), m

    def swap(self, crops: list[Frame], latent: Latent) -> list[Frame]:
        """Swap aligned 128×128 BGR uint8 crops to the source identity; returns crops of the same kind."""
        if not crops:
            return []
        for crop in crops:
            if crop.shape != (CROP_SIZE, CROP_SIZE, 3) or crop.dtype != np.uint8:
                raise ValueError(f"swap() wants {CROP_SIZE}×{CROP_SIZE}×3 uint8 crops, got {crop.shape} {crop.dtype}")
        rgb = np.stack(crops)[..., ::-1]  # BGR → RGB, one copy for the whole batch below
        blob = (rgb.transpose(0, 3, 1, 2).astype(np.float32) * np.float32(1 / 255)).astype(self.target_dtype, copy=False)
        source = np.asarray(latent, dtype=self.source_dtype).reshape(1, LATENT_DIM)
        if self.batched:
            outs = [self._run(blob, np.repeat(source, len(crops), axis=0))]
        else:
            outs = [self._run(blob[i : i + 1], source) for i in range(len(crops))]
        out = np.concatenate(outs, axis=0).astype(np.float32, copy=False)
        if not np.isfinite(out).all():  # NaN/Inf would become arbitrary pixels: never a face to show
            raise ModelError(f"{self.path.name} returned NaN/Inf values", fix="check the model file (`vcamd models verify`) and the execution provider")
        bgr = (np.clip(out, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8).transpose(0, 2, 3, 1)[..., ::-1]
        return [np.ascontiguousarray(c) for c in bgr]

    def _run(self, target: np.ndarray, source: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.target_name: np.ascontiguousarray(target), self.source_name: source})[0]


def _read_emap(path: Path) -> npt.NDArray[np.float32]:
    """The 512×512 `emap`: the graph's last initializer (read once, at load)."""
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import numpy_helper

    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except (DecodeError, OSError, ValueError) as exc:
        raise ModelError(f"{path.name} is not a readable ONNX model ({exc})", fix="re-download it with `vcamd models pull`") from None
    if not model.graph.initializer:
        raise ModelError(f"{path.name} has no initializers, so no `emap`", fix="use inswapper_128(.onnx / _fp16.onnx)")
    try:
        emap = numpy_helper.to_array(model.graph.initializer[-1], base_dir=str(path.parent))
    except (onnx.checker.ValidationError, OSError, ValueError) as exc:
        # e.g. `emap` stored as external data pointing outside the model's folder: never followed.
        raise ModelError(f"{path.name}: cannot read its `emap` initializer ({exc})", fix="re-download it with `vcamd models pull`") from None
    del model
    if emap.shape != (LATENT_DIM, LATENT_DIM):
        raise ModelError(
            f"{path.name}: the last initializer has shape {emap.shape}, not the 512×512 `emap` of inswapper_128",
            fix="use inswapper_128(.onnx / _fp16.onnx) from `vcamd models pull`",
        )
    return emap.astype(np.float32)
