"""What each face model expects: one row per model family.

A model sees a face through a crop: the face aligned to a 5-point template at a fixed size, its RGB
pixels normalised as (x - mean) / std. The swapper also needs a rule turning the source identity
(an ArcFace embedding) into its `source` input. These facts live here once; `Swapper`, `Recognizer`,
`Enhancer` and `FaceEngine` read them, so a second swapper family (simswap, hyperswap, …) is one
more `SwapperSpec` row plus its entry in `models/manifest.toml`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.faces.align import Affine, Template, estimate_affine, warp
from vcamd.types import Frame, Points

ORT_FLOAT_DTYPES: dict[str, type[np.floating]] = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
"""ONNX Runtime's type strings for the float inputs our models take, and their numpy types."""

Blob = npt.NDArray[np.float32]
"""N×3×S×S float32, RGB, normalised: what a model's image input takes."""


@dataclass(frozen=True, slots=True)
class CropSpec:
    """How a model sees a face: template, crop side, and RGB normalisation (x - mean) / std."""

    template: Template
    size: int
    mean: float
    std: float

    def align(self, frame: Frame, kps: Points) -> tuple[Frame, Affine]:
        """The face's aligned crop (BGR uint8) and the matrix M taking frame points into it
        (`frame`: BGR, or its `align.for_warps` copy when many crops are cut from it)."""
        m = estimate_affine(kps, self.size, self.template)
        return warp(frame, m, self.size), m

    def to_blob(self, crops: Sequence[Frame]) -> Blob:
        """Aligned BGR uint8 crops → one normalised RGB NCHW float32 batch (one OpenCV call)."""
        size = (self.size, self.size)
        return cv2.dnn.blobFromImages(list(crops), 1.0 / self.std, size, (self.mean,) * 3, swapRB=True)

    def to_crops(self, blob: npt.ArrayLike) -> list[Frame]:
        """The inverse of `to_blob` for a model's image output: BGR uint8 crops, rounded and saturated."""
        out = np.asarray(blob, dtype=np.float32)
        crops = []
        for planes in out:
            bgr = cv2.merge([planes[2], planes[1], planes[0]])  # NCHW RGB → HWC BGR in one pass
            crops.append(cv2.addWeighted(bgr, self.std, bgr, 0.0, self.mean, dtype=cv2.CV_8U))
        return crops


LatentRule = Literal["emap"]
"""How a swapper turns the source embedding into its `source` input:
"emap" — normalize(embedding @ emap), emap being the graph's last initializer (inswapper)."""


@dataclass(frozen=True, slots=True)
class SwapperSpec:
    """A swapper family: its crop, its two input names, and the identity it takes."""

    family: str
    crop: CropSpec
    target_input: str
    source_input: str
    identity_dim: int  # the ArcFace embedding size its latent rule starts from
    latent_rule: LatentRule

    def matches(self, inputs: dict[str, Sequence[object]]) -> bool:
        """Whether a model's inputs (name → shape) are this family's signature."""
        target, source = inputs.get(self.target_input), inputs.get(self.source_input)
        return (
            len(inputs) == 2
            and target is not None
            and source is not None
            and list(target[1:]) == [3, self.crop.size, self.crop.size]
            and list(source[1:]) == [self.identity_dim]
        )


SWAPPERS: tuple[SwapperSpec, ...] = (
    # inswapper_128 (and its fp16 export): ArcFace template at 128 (insightface norm_crop2), RGB in [0, 1].
    SwapperSpec("inswapper_128", CropSpec("arcface", 128, 0.0, 255.0), "target", "source", 512, "emap"),
)
"""Every swapper family vcamd can run, looked up by the loaded model's signature."""

RECOGNIZER_CROP = CropSpec("arcface", 112, 127.5, 127.5)
"""ArcFace recognizers (w600k_r50): 112² ArcFace crop, (x - 127.5) / 127.5. Exports that normalise
inside the graph take raw pixels instead: see `vcamd.faces.identity.graph_normalisation`."""

ENHANCER_CROP = CropSpec("ffhq", 512, 127.5, 127.5)
"""GFPGAN 1.4: FFHQ template at 512, RGB in [-1, 1]."""

SWAP_SIZE = SWAPPERS[0].crop.size
"""The default swapper's crop side (the stand-ins and benchmarks build this one)."""


def swapper_spec_for(inputs: dict[str, Sequence[object]]) -> SwapperSpec | None:
    """The swapper family whose signature these inputs (name → shape) are, or None."""
    return next((spec for spec in SWAPPERS if spec.matches(inputs)), None)
