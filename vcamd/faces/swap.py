"""The face swapper: the source input once, then aligned crops in, swapped crops out.

What a swapper family expects (crop template and size, normalisation, input names, the rule that
makes its `source` input, whether its output is de-normalised) is its row in
`vcamd.faces.specs.SWAPPERS`; the row is chosen by the model's name or, where only one family has
it, by its input signature. inswapper_128 (model-contracts.md): inputs `target` [N,3,128,128] RGB in
[0,1] and `source` [N,512] = normalize(ArcFace embedding @ emap), `emap` being the graph's last
initializer; output [N,3,128,128] RGB in [0,1]. Families of the "converted" rule (ghost, simswap,
hififace) take the embedding through their embedding converter (`EmbeddingConverter`); blendswap
and uniface take the source face as an image; a DeepFaceLab model takes no source. The input dtypes
are read from the session (the fp16 exports keep float32 inputs and outputs).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from vcamd.common.errors import FaceError, ModelError
from vcamd.common.types import Face, Frame
from vcamd.faces.align import Affine
from vcamd.faces.specs import (
    DFM_FACE_INPUT,
    DFM_MORPH,
    DFM_MORPH_INPUT,
    FAMILY_NAMES,
    ORT_FLOAT_DTYPES,
    SWAPPERS,
    CropSpec,
    SwapperSpec,
    blend_identity,
    dfm_blob,
    dfm_crops,
    family_named,
    swapper_candidates,
)
from vcamd.modelstore.wayout import how_to_get, ways_out
from vcamd.remote.wire import ServedElsewhere

if TYPE_CHECKING:
    from vcamd.faces.identity import SourceIdentity
    from vcamd.inference.runtime import Sessions

Latent = npt.NDArray[np.float32]
"""The swapper's `source` input for one identity: (1, D) float32 for the embedding families (one
row per face once the target's embedding is blended in), (1, 3, s, s) for the image families."""

SWAPPER_FIX = f"set [models] swapper to a swapper from `vcamd models list` (e.g. inswapper_128_fp16), then get it: {how_to_get()}"


def _signature_text(spec: SwapperSpec) -> str:
    size = spec.crop.size
    if spec.layout == "dfm":
        return f"{spec.family}: {DFM_FACE_INPUT} [1,H,H,3] (+ {DFM_MORPH_INPUT})"
    if spec.source.kind == "image":
        assert spec.source.image is not None
        side = spec.source.image.size
        return f"{spec.family}: {spec.target_input} [1,3,{size},{size}] + {spec.source_input} [1,3,{side},{side}]"
    return f"{spec.family}: {spec.target_input} [1,3,{size},{size}] + {spec.source_input} [1,{spec.identity_dim}]"


def choose_family(model: Path, inputs: dict[str, Sequence[object]], family: str | None = None) -> SwapperSpec:
    """The family row of a swapper model: `family` when given (`[models] swapper_family`), else the
    one the file's name names (`ghost_2_256.onnx`, any `.dfm`), else the only family with its input
    signature. ModelError naming the file and the fix when none fits or the signature is shared."""
    got = ", ".join(f"{name} {list(shape)}" for name, shape in inputs.items())
    if family:
        spec = family_named(family)
        if spec is None:
            raise ModelError(f"[models] swapper_family = {family!r} is not a swapper family vcamd knows",
                             fix=f"use one of: {', '.join(FAMILY_NAMES)} (or \"\" to tell it from the model's name)")
        if not spec.matches(inputs):
            raise ModelError(f"{model.name} does not have the inputs of a {spec.family} model (expected {_signature_text(spec)}; got {got})",
                             fix="set [models] swapper_family to the model's family, or \"\" to tell it from the model's name")
        return _sized(spec, inputs)
    named = family_named(model.name)
    if named is not None and named.matches(inputs):
        return _sized(named, inputs)
    found = swapper_candidates(inputs)
    if len(found) == 1:
        return _sized(found[0], inputs)
    if found:
        raise ModelError(
            f"{model.name}: its inputs ({got}) are those of several swapper families ({', '.join(s.family for s in found)}), "
            "which crop and normalise faces differently",
            fix=f"set [models] swapper_family to the one it is (one of: {', '.join(s.family for s in found)}), "
                "or give the file its model's name (e.g. ghost_2_256.onnx)",
        )
    known = "; ".join(_signature_text(s) for s in SWAPPERS)
    raise ModelError(f"{model.name} is not a face swapper vcamd knows (expected {known}; got inputs {got})", fix=SWAPPER_FIX)


def _sized(spec: SwapperSpec, inputs: dict[str, Sequence[object]]) -> SwapperSpec:
    if spec.layout != "dfm":
        return spec
    side = inputs[DFM_FACE_INPUT][1]
    assert isinstance(side, int)
    return spec.sized(side)


class EmbeddingConverter:
    """An embedding converter (FaceFusion's crossface_ghost/simswap/hififace): a raw ArcFace
    embedding, `input` [1,512], into a swapper family's own identity space, [1,D]."""

    def __init__(self, path: Path | str, sessions: Sessions) -> None:
        self.path = Path(path)
        self.session = sessions.get(self.path)
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        shape = list(inputs[0].shape) if len(inputs) == 1 else []
        out = list(outputs[0].shape) if len(outputs) == 1 else []
        if (len(inputs) != 1 or inputs[0].name != "input" or len(shape) != 2 or shape[1] != 512 or len(out) != 2
                or not isinstance(out[1], int) or inputs[0].type not in ORT_FLOAT_DTYPES):
            raise ModelError(
                f"{self.path.name} is not an embedding converter (expected input `input` [1,512] and one output [1,D]; "
                f"got inputs {[(i.name, i.shape) for i in inputs]}, outputs {[o.shape for o in outputs]})",
                fix="set [models] converter to the swapper family's converter (crossface_ghost, crossface_simswap, "
                    f"crossface_hififace; {how_to_get(['NAME'])}), or \"\" for the family's own",
            )
        self.dim = int(out[1])
        self._dtype = ORT_FLOAT_DTYPES[inputs[0].type]

    def convert(self, embedding: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """(1, D): the embedding in the swapper's space (not normalised: the family's rule says)."""
        emb = np.asarray(embedding, self._dtype).reshape(1, 512)
        out = np.asarray(self.session.run(None, {"input": emb})[0], np.float32).reshape(1, -1)
        if not np.isfinite(out).all():
            raise ModelError(f"{self.path.name} returned NaN/Inf values", fix="check the model file (`vcamd models verify`)")
        return out


class Swapper:
    """A swapper family from `vcamd.faces.specs.SWAPPERS` on an ONNX Runtime session;
    `.source_for(identity)` once per source photo, `.swap(crops, source)` per batch of faces."""

    def __init__(self, path: Path | str, sessions: Sessions, *, family: str | None = None,
                 converter: EmbeddingConverter | None = None, keep_optimized: bool = False) -> None:
        """`family`: the row to use (`[models] swapper_family`); None tells it from the model's
        name or signature (`choose_family`). `converter`: the family's embedding converter (the
        "converted" families need one). `keep_optimized`: load the session from the model's
        optimised graph kept on disk (`vcamd.inference.ortcache`, built on the first load) — for swapping,
        where every start waits for this model; not for a check of the file (`vcamd doctor`, a
        download's verification)."""
        self.path = Path(path)
        self.session = sessions.get(self.path, keep_optimized=keep_optimized, background=True)
        self.core_split = sessions.core_split
        """The cores the session's pool is pinned to, and its caller must follow (`vcamd.inference.cores`)."""
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = self.session.get_outputs()
        spec = choose_family(self.path, {name: i.shape for name, i in inputs.items()}, family)
        wanted_outputs = 3 if spec.layout == "dfm" else 1
        image_out = len(outputs) >= wanted_outputs and len(outputs[1 if spec.layout == "dfm" else 0].shape) == 4
        if not image_out or not all(i.type in ORT_FLOAT_DTYPES for i in inputs.values()):
            got = ", ".join(f"{i.name} {i.shape} {i.type}" for i in self.session.get_inputs())
            raise ModelError(
                f"{self.path.name} looks like a {spec.family} swapper but its outputs or input types are not "
                f"(expected float inputs and {'(mask, face, mask)' if spec.layout == 'dfm' else 'an image'} output; "
                f"got inputs {got} and {len(outputs)} output(s))",
                fix=SWAPPER_FIX,
            )
        self.spec = spec
        self.target_name, self.source_name = spec.target_input, spec.source_input
        self.target_dtype = ORT_FLOAT_DTYPES[inputs[spec.target_input].type]
        self.source_dtype = ORT_FLOAT_DTYPES[inputs[spec.source_input].type] if spec.source_input in inputs else np.float32
        self.morph = DFM_MORPH_INPUT in inputs
        """A DeepFaceLab model that takes a morph factor (`DFM_MORPH`)."""
        batch = inputs[spec.target_input].shape[0]
        self.batched = not (isinstance(batch, int) and batch > 0)
        """True when the batch dim is symbolic: several faces go through in one run."""
        self.converter = converter if spec.source.kind == "converted" else None
        self.emap: npt.NDArray[np.float32] | None = None
        if spec.source.kind == "emap":
            dim = spec.identity_dim
            if isinstance(self.session, ServedElsewhere):  # the file is on a Triton server ([models] server): so is its emap
                self.emap = self.session.initializer("emap", (dim, dim))
            elif keep_optimized:  # kept with the graph: a start that loads the kept graph leaves the model file unread
                from vcamd.inference.ortcache import kept_array

                self.emap = kept_array(self.path.expanduser().resolve(), "emap", lambda: _read_emap(self.path, dim), (dim, dim))
            else:
                self.emap = _read_emap(self.path, dim)

    def require_converter(self) -> None:
        """ModelError when the family takes its identity through an embedding converter and none was
        given (the file alone is a fine swapper — `vcamd models verify` checks it so — but it cannot swap)."""
        if self.spec.source.kind == "converted" and self.converter is None:
            raise ModelError(
                f"{self.path.name} ({self.spec.family}) takes its source identity through an embedding converter, and none is set",
                fix=f"set [models] converter = {self.spec.converter!r} ({how_to_get([self.spec.converter or 'NAME'])}), or \"\" with a "
                    "swapper named as its model (e.g. ghost_2_256) for its family's own",
            )

    @property
    def crop(self) -> CropSpec:
        return self.spec.crop

    @property
    def needs_source(self) -> bool:
        """False for a model with its own trained identity (DeepFaceLab): it swaps without a photo."""
        return self.spec.source.kind != "none"

    def latent(self, embedding: npt.ArrayLike, raw: npt.ArrayLike | None = None) -> Latent:
        """The model's `source` input for this identity (the embedding families): computed once per
        source, never per frame. `embedding` is L2-normalised; `raw`, the recognizer's output before
        that (what the embedding converters take; the normalised one stands in without it)."""
        dim = self.spec.identity_dim
        emb = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if emb.shape[0] != dim:
            raise FaceError(
                f"the recognizer gives {emb.shape[0]}-d embeddings; the swapper needs {dim}-d (ArcFace w600k_r50)",
                fix="set [models] recognizer to buffalo_l",
            )
        kind = self.spec.source.kind
        if kind == "emap":
            assert self.emap is not None
            latent = (emb @ self.emap).reshape(1, dim)  # normalize(embedding @ emap)
            return (latent / np.linalg.norm(latent)).astype(np.float32)
        if kind == "embedding":
            return (emb / np.linalg.norm(emb)).reshape(1, dim).astype(np.float32)
        if kind == "converted":
            self.require_converter()
            assert self.converter is not None
            converted = self.converter.convert(emb if raw is None else raw)
            return (converted / np.linalg.norm(converted)).astype(np.float32) if self.spec.source.normalise else converted
        raise ValueError(f"{self.spec.family} takes no source embedding")

    def source_for(self, identity: SourceIdentity) -> Latent | None:
        """The `source` input for a source face: its latent, its aligned image, or None (a model
        with its own identity)."""
        rule = self.spec.source
        if rule.kind == "none":
            return None
        if rule.kind == "image":
            assert rule.image is not None
            if identity.photo is None:
                raise FaceError(f"{self.spec.family} swaps from the source photo itself, and it is not at hand", fix="set the source face again")
            crop, _ = rule.image.align(identity.photo, identity.face.kps)
            return rule.image.to_blob([crop])
        return self.latent(identity.embedding, identity.raw_embedding)

    def blended(self, source: Latent, target_raw: npt.ArrayLike, weight: float) -> Latent:
        """`source` with the target face's own embedding mixed in by `[swap] weight`
        (`specs.blend_identity`); `source` as it is for the families that take no embedding."""
        if self.spec.source.blend == "none":
            return source
        return blend_identity(source, target_raw, weight, self.spec.source)

    def align(self, frame: Frame, face: Face) -> tuple[Frame, Affine]:
        """The face's aligned crop in this swapper's geometry and its matrix M."""
        return self.spec.crop.align(frame, face.kps)

    def swap(self, crops: list[Frame], source: Latent | None) -> list[Frame]:
        """Swap aligned BGR uint8 crops to the source identity; returns crops of the same kind.
        `source`: one row for every crop, or one row per crop (a blended identity per face)."""
        if not crops:
            return []
        side = self.spec.crop.size
        for crop in crops:
            if crop.shape != (side, side, 3) or crop.dtype != np.uint8:
                raise ValueError(f"swap() wants {side}×{side}×3 uint8 crops, got {crop.shape} {crop.dtype}")
        if self.spec.layout == "dfm":
            return self._swap_dfm(crops)
        if source is None:
            raise FaceError(f"{self.spec.family} needs a source face", fix="set [swap] source_face")
        blob = self.spec.crop.to_blob(crops).astype(self.target_dtype, copy=False)
        rows = np.asarray(source, dtype=self.source_dtype)
        if rows.shape[0] == 1:
            rows = np.repeat(rows, len(crops), axis=0)
        elif rows.shape[0] != len(crops):
            raise ValueError(f"swap() got {rows.shape[0]} source rows for {len(crops)} crops")
        if self.batched:
            outs = [self._run({self.target_name: blob, self.source_name: rows})]
        else:
            outs = [self._run({self.target_name: blob[i : i + 1], self.source_name: rows[i : i + 1]}) for i in range(len(crops))]
        out = np.concatenate(outs, axis=0).astype(np.float32, copy=False)
        self._check(out)
        return self.spec.out_crop.to_crops(out)

    def _swap_dfm(self, crops: list[Frame]) -> list[Frame]:
        """DeepFaceLab: sharpened BGR NHWC in [0, 1]; outputs (face mask, face, source mask), the
        face taken. The masks are not used: the face is pasted with the same feathered mask as
        every swap, so no part of the camera's face is left out (nor shown raw) by a mask the
        model got wrong."""
        blob = dfm_blob(crops).astype(self.target_dtype, copy=False)
        faces = []
        for i in range(len(crops)):
            feeds = {self.target_name: np.ascontiguousarray(blob[i : i + 1])}
            if self.morph:
                feeds[DFM_MORPH_INPUT] = np.array([DFM_MORPH], np.float32)
            faces.append(np.asarray(self.session.run(None, feeds)[1], np.float32))
        out = np.concatenate(faces, axis=0)
        self._check(out)
        return dfm_crops(out)

    def _check(self, out: np.ndarray) -> None:
        if not np.isfinite(out).all():  # NaN/Inf would become arbitrary pixels: never a face to show
            raise ModelError(f"{self.path.name} returned NaN/Inf values", fix="check the model file (`vcamd models verify`) and the execution provider")

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        feeds = {name: np.ascontiguousarray(value) for name, value in feeds.items()}
        first: np.ndarray = self.session.run(None, feeds)[0]  # an ONNX Runtime session: untyped
        return first


def _read_emap(path: Path, dim: int) -> npt.NDArray[np.float32]:
    """The dim×dim `emap`: the graph's last initializer, read at load straight from the file
    (`vcamd.inference.onnxwire`: milliseconds, where parsing the whole 554 MB model took seconds)."""
    from vcamd.inference.onnxwire import WireError, last_initializer

    try:
        emap = last_initializer(path)
    except OSError as exc:
        raise ModelError(f"{path.name} is not a readable ONNX model ({exc.strerror or exc})", fix=ways_out(pull_note=" to download it again")) from None
    except WireError as exc:
        # Also `emap` stored as external data pointing outside the model's folder: never followed.
        raise ModelError(f"{path.name}: cannot read its `emap` initializer ({exc})", fix=ways_out(pull_note=" to download it again")) from None
    if emap is None:
        raise ModelError(f"{path.name} has no initializers, so no `emap`", fix="use inswapper_128(.onnx / _fp16.onnx)")
    if emap.shape != (dim, dim):
        raise ModelError(
            f"{path.name}: the last initializer has shape {emap.shape}, not the {dim}×{dim} `emap` of inswapper_128",
            fix=f"use inswapper_128(.onnx / _fp16.onnx): {how_to_get()}",
        )
    return emap.astype(np.float32)
