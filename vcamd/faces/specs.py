"""What each face model expects: one row per model family.

A model sees a face through a crop: the face aligned to a 5-point template at a fixed size, its RGB
pixels normalised as (x - mean) / std. A swapper also needs its `source` input: the source identity
(an ArcFace embedding, mapped into the swapper's own space) or the source face itself (an aligned
crop); a DeepFaceLab model has no source at all (one trained identity). These facts live here once;
`Swapper`, `Recognizer`, `Enhancer` and `FaceEngine` read them, so a new family is one row here plus
its entries in `models/manifest.toml`. The contracts are written from FaceFusion 3.8.1's face
swapper, face enhancer and deep swapper and DeepFaceLive's DFM loader (read, not copied); the table
with its sources is in docs/models.md.

The rows are chosen for a model by name (the manifest's model name or the file's name, e.g.
`ghost_2_256` → the ghost_256 row; `[models] swapper_family` for other names) or, where only one
family has the model's input signature, by that signature: hyperswap, ghost, simswap_256 and
hififace all take `target` [1,3,256,256] + `source` [1,512], so only their names tell them apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.types import Frame, Points, as_float32, as_frame
from vcamd.faces.align import Affine, Template, estimate_affine, warp

ORT_FLOAT_DTYPES: dict[str, type[np.floating]] = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
"""ONNX Runtime's type strings for the float inputs our models take, and their numpy types."""

Blob = npt.NDArray[np.float32]
"""N×3×S×S float32, RGB, normalised: what a model's image input takes."""

Norm = float | tuple[float, float, float]
"""A normalisation constant in pixel units (0..255): one for all channels, or one per channel in
RGB order."""


def per_channel(value: Norm) -> tuple[float, float, float]:
    return (float(value),) * 3 if isinstance(value, (int, float)) else (float(value[0]), float(value[1]), float(value[2]))


@dataclass(frozen=True, slots=True)
class CropSpec:
    """How a model sees a face: template, crop side, and RGB normalisation (x - mean) / std, with
    mean and std in pixel units (one value, or one per channel in RGB order)."""

    template: Template
    size: int
    mean: Norm
    std: Norm

    @classmethod
    def unit(cls, template: Template, size: int, mean: Norm, std: Norm) -> CropSpec:
        """From a mean and std of pixels scaled to [0, 1] (how FaceFusion writes them: x / 255, then
        (x - mean) / std)."""
        if isinstance(mean, (int, float)) and isinstance(std, (int, float)):
            return cls(template, size, float(mean) * 255.0, float(std) * 255.0)
        m, s = per_channel(mean), per_channel(std)
        return cls(template, size, (m[0] * 255.0, m[1] * 255.0, m[2] * 255.0), (s[0] * 255.0, s[1] * 255.0, s[2] * 255.0))

    @property
    def channelwise(self) -> bool:
        return not (isinstance(self.mean, (int, float)) and isinstance(self.std, (int, float)))

    def align(self, frame: Frame, kps: Points) -> tuple[Frame, Affine]:
        """The face's aligned crop (BGR uint8) and the matrix M taking frame points into it
        (`frame`: BGR, or its `align.for_warps` copy when many crops are cut from it)."""
        m = estimate_affine(kps, self.size, self.template)
        return warp(frame, m, self.size), m

    def to_blob(self, crops: Sequence[Frame]) -> Blob:
        """Aligned BGR uint8 crops → one normalised RGB NCHW float32 batch (one OpenCV call, and one
        more pass for a per-channel std)."""
        size = (self.size, self.size)
        mean, std = self.mean, self.std
        if isinstance(mean, (int, float)) and isinstance(std, (int, float)):  # one value each: not `channelwise`
            return as_float32(cv2.dnn.blobFromImages(list(crops), 1.0 / float(std), size, (float(mean),) * 3, swapRB=True))
        blob = as_float32(cv2.dnn.blobFromImages(list(crops), 1.0, size, per_channel(mean), swapRB=True))
        blob *= (1.0 / np.asarray(per_channel(std), np.float32)).reshape(1, 3, 1, 1)
        return blob

    def to_crops(self, blob: npt.ArrayLike) -> list[Frame]:
        """The inverse of `to_blob` for a model's image output: BGR uint8 crops, rounded and saturated."""
        out = np.asarray(blob, dtype=np.float32)
        crops: list[Frame] = []
        one_mean, one_std = self.mean, self.std
        if isinstance(one_mean, (int, float)) and isinstance(one_std, (int, float)):  # one value each: not `channelwise`
            for planes in out:
                bgr = cv2.merge([planes[2], planes[1], planes[0]])  # NCHW RGB → HWC BGR in one pass
                crops.append(as_frame(cv2.addWeighted(bgr, float(one_std), bgr, 0.0, float(one_mean), dtype=cv2.CV_8U)))
            return crops
        mean, std = per_channel(one_mean), per_channel(one_std)
        for planes in out:
            channels = [cv2.addWeighted(planes[c], std[c], planes[c], 0.0, mean[c], dtype=cv2.CV_8U) for c in (2, 1, 0)]
            crops.append(as_frame(cv2.merge(channels)))
        return crops


# ---- swappers ---------------------------------------------------------------------------------

SourceKind = Literal["emap", "embedding", "converted", "image", "none"]
"""What a swapper's `source` input is:
"emap" — normalize(embedding @ emap), emap being the graph's last initializer (inswapper);
"embedding" — the L2-normalised ArcFace embedding (hyperswap);
"converted" — the raw ArcFace embedding through the family's embedding converter model, then
  L2-normalised or not (`SourceRule.normalise`: simswap and hififace yes, ghost no);
"image" — the source face itself, aligned with `SourceRule.image` and taken as RGB / 255
  (blendswap, uniface);
"none" — no source: the model's own trained identity (DeepFaceLab .dfm)."""


@dataclass(frozen=True, slots=True)
class SourceRule:
    """How a swapper family's `source` input is made from the source face (once per source photo)."""

    kind: SourceKind
    normalise: bool = True
    """"converted": L2-normalise the converter's output."""
    image: CropSpec | None = None
    """"image": how the source face is cut and normalised."""
    blend: Literal["normalised", "raw", "none"] = "none"
    """How the target face's own embedding is mixed in by `[swap] weight` (`blend_identity`): the
    target's embedding L2-normalised first, taken raw (ghost), or not at all (image and none)."""


@dataclass(frozen=True, slots=True)
class SwapperSpec:
    """A swapper family: its crop, its `source` rule, its output's normalisation and input names."""

    family: str
    models: tuple[str, ...]
    """The published models of this family, by FaceFusion's (and the manifest's) names: a model
    or file of one of these names is this family."""
    crop: CropSpec
    source: SourceRule
    denorm: bool
    """The output is in the input's normalisation (x · std + mean, then clipped); False: it is RGB
    in [0, 1] whatever the input's normalisation (only clipped)."""
    converter: str | None = None
    """"converted": the embedding converter (its manifest name) whose space the family takes."""
    target_input: str = "target"
    source_input: str = "source"
    identity_dim: int = 512
    """The ArcFace embedding size the source rule starts from (embedding rules)."""
    layout: Literal["nchw", "dfm"] = "nchw"
    """"dfm": DeepFaceLab's NHWC BGR input `in_face:0` in [0, 1] (`dfm_blob`), outputs (face mask,
    face, source mask) — the size is the model's own (`sized`)."""

    @property
    def out_crop(self) -> CropSpec:
        """How the model's image output turns back into pixels (`CropSpec.to_crops`)."""
        return self.crop if self.denorm else replace(self.crop, mean=0.0, std=255.0)

    @property
    def uses_embedding(self) -> bool:
        return self.source.kind in ("emap", "embedding", "converted")

    def sized(self, size: int) -> SwapperSpec:
        """This family at a model's own crop side (DeepFaceLab models come in many)."""
        return self if size == self.crop.size else replace(self, crop=replace(self.crop, size=size))

    def matches(self, inputs: Mapping[str, Sequence[object]]) -> bool:
        """Whether a model's inputs (name → shape) are this family's signature."""
        if self.layout == "dfm":
            face = inputs.get(DFM_FACE_INPUT)
            extra = set(inputs) - {DFM_FACE_INPUT, DFM_MORPH_INPUT}
            return face is not None and not extra and len(face) == 4 and face[3] == 3 and isinstance(face[1], int) and face[1] == face[2]
        target, source = inputs.get(self.target_input), inputs.get(self.source_input)
        if len(inputs) != 2 or target is None or source is None or list(target[1:]) != [3, self.crop.size, self.crop.size]:
            return False
        if self.source.kind == "image":
            assert self.source.image is not None
            return list(source[1:]) == [3, self.source.image.size, self.source.image.size]
        return list(source[1:]) == [self.identity_dim]


DFM_FACE_INPUT = "in_face:0"
DFM_MORPH_INPUT = "morph_value:0"
DFM_MORPH = 0.75
"""DeepFaceLive's default morph factor for the models that take one (how far towards the trained face)."""
DFM_SHARPEN = (1.75, -0.75, 2.0)
"""FaceFusion's deep swapper sharpens the crop before the model: 1.75 · crop − 0.75 · Gaussian(σ = 2)."""

SWAPPERS: tuple[SwapperSpec, ...] = (
    # inswapper_128 (and its fp16 export): ArcFace template at 128 (insightface norm_crop2), RGB in [0, 1].
    SwapperSpec("inswapper_128", ("inswapper_128", "inswapper_128_fp16"), CropSpec("arcface", 128, 0.0, 255.0),
                SourceRule("emap", blend="normalised"), denorm=False),
    # FaceFusion's own (2025, fp16 weights): the normalised ArcFace embedding, [-1, 1] in and out.
    SwapperSpec("hyperswap_256", ("hyperswap_1a_256", "hyperswap_1b_256", "hyperswap_1c_256"),
                CropSpec.unit("arcface_128", 256, 0.5, 0.5), SourceRule("embedding", blend="normalised"), denorm=True),
    # GHOST (sber-swap): its converter's output taken as it is, [-1, 1] in and out.
    SwapperSpec("ghost_256", ("ghost_1_256", "ghost_2_256", "ghost_3_256"), CropSpec.unit("arcface_112_v1", 256, 0.5, 0.5),
                SourceRule("converted", normalise=False, blend="raw"), denorm=True, converter="crossface_ghost"),
    # SimSwap 256: ImageNet normalisation in, RGB in [0, 1] out.
    SwapperSpec("simswap_256", ("simswap_256",), CropSpec.unit("arcface_112_v1", 256, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
                SourceRule("converted", blend="normalised"), denorm=False, converter="crossface_simswap"),
    SwapperSpec("simswap_unofficial_512", ("simswap_unofficial_512",), CropSpec.unit("arcface_112_v1", 512, 0.0, 1.0),
                SourceRule("converted", blend="normalised"), denorm=False, converter="crossface_simswap"),
    SwapperSpec("hififace_unofficial_256", ("hififace_unofficial_256",), CropSpec.unit("mtcnn_512", 256, 0.5, 0.5),
                SourceRule("converted", blend="normalised"), denorm=True, converter="crossface_hififace"),
    # The source is a face image: blendswap's own identity encoder takes the ArcFace-aligned 112² face.
    SwapperSpec("blendswap_256", ("blendswap_256",), CropSpec.unit("ffhq_512", 256, 0.0, 1.0),
                SourceRule("image", image=CropSpec.unit("arcface_112_v2", 112, 0.0, 1.0)), denorm=False),
    SwapperSpec("uniface_256", ("uniface_256",), CropSpec.unit("ffhq_512", 256, 0.5, 0.5),
                SourceRule("image", image=CropSpec.unit("ffhq_512", 256, 0.0, 1.0)), denorm=True),
    # DeepFaceLab / DeepFaceLive .dfm: one trained identity, no source; BGR NHWC in [0, 1], its own size.
    SwapperSpec("deepfacelab", (), CropSpec("dfl_whole_face", 224, 0.0, 255.0), SourceRule("none"), denorm=False,
                target_input=DFM_FACE_INPUT, source_input="", layout="dfm"),
)
"""Every swapper family vcamd can run."""

FAMILY_NAMES: tuple[str, ...] = tuple(spec.family for spec in SWAPPERS)


def family_named(name: str) -> SwapperSpec | None:
    """The row of a family name (`ghost_256`) or of one of its models' names (`ghost_2_256`, a
    file `ghost_2_256.onnx`); None for any other name. A `.dfm` file is a DeepFaceLab model."""
    stem = Path(name).stem if name.endswith((".onnx", ".dfm")) else name
    if name.endswith(".dfm"):
        return SWAPPERS[-1]
    return next((spec for spec in SWAPPERS if stem == spec.family or stem in spec.models), None)


def swapper_candidates(inputs: Mapping[str, Sequence[object]]) -> list[SwapperSpec]:
    """The families whose signature these inputs (name → shape) are — several for the
    `target` [1,3,256,256] + `source` [1,512] signature (hyperswap, ghost, simswap, hififace)."""
    return [spec for spec in SWAPPERS if spec.matches(inputs)]


def swapper_spec_for(inputs: Mapping[str, Sequence[object]]) -> SwapperSpec | None:
    """The swapper family whose signature these inputs (name → shape) are, when only one family
    has it; None otherwise (none, or several: then the model's name must say which)."""
    found = swapper_candidates(inputs)
    return found[0] if len(found) == 1 else None


def blend_identity(source: npt.ArrayLike, target: npt.ArrayLike, weight: float, rule: SourceRule) -> npt.NDArray[np.float32]:
    """FaceFusion's face swapper weight: the source input mixed with the target face's own
    embedding, source · (1 − w) + target · w with w = interp(weight, [0, 1] → [0.35, −0.35])
    (weight 0.5: the source as it is; 1: pushed 35 % away from the target; 0: 35 % of the target
    kept). The target embedding is L2-normalised first where the family's rule says so."""
    w = np.float32(np.interp(weight, [0.0, 1.0], [0.35, -0.35]))
    src = np.asarray(source, np.float32).reshape(1, -1)
    tgt = np.asarray(target, np.float32).reshape(1, -1)
    if rule.blend == "normalised":
        tgt = tgt / np.linalg.norm(tgt)
    return (src * (np.float32(1.0) - w) + tgt * w).astype(np.float32)


def dfm_blob(crops: Sequence[Frame]) -> npt.NDArray[np.float32]:
    """Aligned BGR uint8 crops → a DeepFaceLab model's `in_face:0`: sharpened (`DFM_SHARPEN`), BGR,
    NHWC, in [0, 1]."""
    a, b, sigma = DFM_SHARPEN
    sharp = [cv2.addWeighted(crop, a, cv2.GaussianBlur(crop, (0, 0), sigma), b, 0.0) for crop in crops]
    return (np.stack(sharp).astype(np.float32) * np.float32(1.0 / 255.0))


def dfm_crops(face: npt.ArrayLike) -> list[Frame]:
    """A DeepFaceLab model's face output (NHWC BGR in [0, 1]) → BGR uint8 crops."""
    out = np.asarray(face, np.float32)
    return [np.clip(np.rint(planes * 255.0), 0, 255).astype(np.uint8) for planes in out]


# ---- the recognizer and the enhancers ------------------------------------------------------------

ARCFACE_PIXELS = (127.5, 127.5)
"""ArcFace's (mean, std) in pixel units: one value each."""
RECOGNIZER_CROP = CropSpec("arcface", 112, *ARCFACE_PIXELS)
"""ArcFace recognizers (w600k_r50): 112² ArcFace crop, (x - 127.5) / 127.5. Exports that normalise
inside the graph take raw pixels instead: see `vcamd.faces.identity.graph_normalisation`."""


@dataclass(frozen=True, slots=True)
class EnhancerSpec:
    """A face enhancer family: its crop (every one takes RGB in [-1, 1] and returns the same), and
    whether it takes a fidelity `weight` input (CodeFormer)."""

    family: str
    models: tuple[str, ...]
    crop: CropSpec
    weight_input: str | None = None

    def matches(self, size: int | None, inputs: set[str]) -> bool:
        """Whether a model taking `size`² crops (None: a symbolic size) with these inputs is this family."""
        return size in (None, self.crop.size) and (self.weight_input in inputs if self.weight_input else len(inputs) == 1)


ENHANCERS: tuple[EnhancerSpec, ...] = (
    EnhancerSpec("gfpgan", ("gfpgan_1.2", "gfpgan_1.3", "gfpgan_1.4"), CropSpec("ffhq", 512, 127.5, 127.5)),
    EnhancerSpec("codeformer", ("codeformer",), CropSpec("ffhq", 512, 127.5, 127.5), weight_input="weight"),
    EnhancerSpec("restoreformer_plus_plus", ("restoreformer_plus_plus",), CropSpec("ffhq", 512, 127.5, 127.5)),
    EnhancerSpec("gpen_bfr_256", ("gpen_bfr_256",), CropSpec("arcface_128", 256, 127.5, 127.5)),
    EnhancerSpec("gpen_bfr_512", ("gpen_bfr_512",), CropSpec("ffhq", 512, 127.5, 127.5)),
    EnhancerSpec("gpen_bfr_1024", ("gpen_bfr_1024",), CropSpec("ffhq", 1024, 127.5, 127.5)),
    EnhancerSpec("gpen_bfr_2048", ("gpen_bfr_2048",), CropSpec("ffhq", 2048, 127.5, 127.5)),
)
"""Every enhancer family. The 512² families without a weight input share one contract (GFPGAN,
RestoreFormer++, GPEN-BFR-512): a model's signature picks the crop; its name, only the label."""

ENHANCER_CROP = ENHANCERS[0].crop
"""GFPGAN 1.4 (the default enhancer): FFHQ template at 512, RGB in [-1, 1]."""

SWAP_SIZE = SWAPPERS[0].crop.size
"""The default swapper's crop side (the stand-ins and benchmarks build this one)."""


def enhancer_spec_for(size: int | None, inputs: set[str], name: str = "") -> EnhancerSpec | None:
    """The enhancer family of a model taking `size`² crops (None: its graph leaves the size open)
    with these input names: by its name when it is a known model's (`gpen_bfr_512.onnx`), else the
    first family with that signature (GFPGAN's for an open 512-or-anything graph)."""
    stem = Path(name).stem
    named = next((spec for spec in ENHANCERS if stem in spec.models or stem == spec.family), None)
    if named is not None and named.matches(size, inputs):
        return named
    return next((spec for spec in ENHANCERS if spec.matches(size, inputs)), None)
