"""The face swapper: source latent once, then aligned crops in, swapped crops out.

What a swapper family expects (crop template and size, normalisation, input names, latent rule)
is its row in `vcamd.faces.specs.SWAPPERS`. inswapper_128 (model-contracts.md): inputs `target`
[N,3,128,128] RGB in [0,1] and `source` [N,512] = normalize(ArcFace embedding @ emap), `emap`
being the graph's last initializer; output [N,3,128,128] RGB in [0,1]. The input dtypes are read
from the session (the fp16 export keeps float32 inputs and output).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from vcamd.errors import FaceError, ModelError
from vcamd.faces.align import Affine
from vcamd.faces.specs import ORT_FLOAT_DTYPES, SWAPPERS, CropSpec, swapper_spec_for
from vcamd.modelstore.wayout import how_to_get, ways_out
from vcamd.remote.wire import ServedElsewhere
from vcamd.types import Face, Frame

if TYPE_CHECKING:
    from vcamd.runtime import Sessions

Latent = npt.NDArray[np.float32]
"""(1, D) float32, L2-normalised: the source identity in the swapper's own space."""


class Swapper:
    """A swapper family from `vcamd.faces.specs.SWAPPERS`, recognised by the model's signature, on
    an ONNX Runtime session; `.swap(crops, latent)` runs one batch when it can."""

    def __init__(self, path: Path | str, sessions: Sessions, *, keep_optimized: bool = False) -> None:
        """`keep_optimized`: load the session from the model's optimised graph kept on disk
        (`vcamd.ortcache`, built on the first load) — for swapping, where every start waits for
        this model; not for a check of the file (`vcamd doctor`, a download's verification)."""
        self.path = Path(path)
        self.session = sessions.get(self.path, keep_optimized=keep_optimized, background=True)
        self.core_split = sessions.core_split
        """The cores the session's pool is pinned to, and its caller must follow (`vcamd.cores`)."""
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = self.session.get_outputs()
        spec = swapper_spec_for({name: i.shape for name, i in inputs.items()})
        ok = (
            spec is not None
            and len(outputs) == 1
            and len(outputs[0].shape) == 4
            and all(i.type in ORT_FLOAT_DTYPES for i in inputs.values())
        )
        if not ok:
            got = ", ".join(f"{i.name} {i.shape} {i.type}" for i in self.session.get_inputs())
            known = "; ".join(
                f"{s.family}: {s.target_input} [1,3,{s.crop.size},{s.crop.size}] + {s.source_input} [1,{s.identity_dim}]" for s in SWAPPERS
            )
            raise ModelError(
                f"{self.path.name} is not a face swapper vcamd knows (expected {known}, one image output; "
                f"got inputs {got} and {len(outputs)} output(s))",
                fix=f"set [models] swapper to inswapper_128_fp16 or inswapper_128 ({how_to_get()})",
            )
        assert spec is not None
        self.spec = spec
        self.target_name, self.source_name = spec.target_input, spec.source_input
        self.target_dtype = ORT_FLOAT_DTYPES[inputs[spec.target_input].type]
        self.source_dtype = ORT_FLOAT_DTYPES[inputs[spec.source_input].type]
        batch = inputs[spec.target_input].shape[0]
        self.batched = not (isinstance(batch, int) and batch > 0)
        """True when the batch dim is symbolic: several faces go through in one run."""
        dim = spec.identity_dim  # spec.latent_rule == "emap"
        if isinstance(self.session, ServedElsewhere):  # the file is on a Triton server ([models] server): so is its emap
            self.emap = self.session.initializer("emap", (dim, dim))
        elif keep_optimized:  # kept with the graph: a start that loads the kept graph leaves the model file unread
            from vcamd.ortcache import kept_array

            self.emap = kept_array(self.path.expanduser().resolve(), "emap", lambda: _read_emap(self.path, dim), (dim, dim))
        else:
            self.emap = _read_emap(self.path, dim)

    @property
    def crop(self) -> CropSpec:
        return self.spec.crop

    def latent(self, embedding: npt.ArrayLike) -> Latent:
        """The model's `source` input for this identity: computed once per source, never per frame."""
        dim = self.spec.identity_dim
        emb = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if emb.shape[0] != dim:
            raise FaceError(
                f"the recognizer gives {emb.shape[0]}-d embeddings; the swapper needs {dim}-d (ArcFace w600k_r50)",
                fix="set [models] recognizer to buffalo_l",
            )
        latent = (emb @ self.emap).reshape(1, dim)  # "emap": normalize(embedding @ emap)
        return (latent / np.linalg.norm(latent)).astype(np.float32)

    def align(self, frame: Frame, face: Face) -> tuple[Frame, Affine]:
        """The face's aligned crop in this swapper's geometry and its matrix M."""
        return self.spec.crop.align(frame, face.kps)

    def swap(self, crops: list[Frame], latent: Latent) -> list[Frame]:
        """Swap aligned BGR uint8 crops to the source identity; returns crops of the same kind."""
        if not crops:
            return []
        side = self.spec.crop.size
        for crop in crops:
            if crop.shape != (side, side, 3) or crop.dtype != np.uint8:
                raise ValueError(f"swap() wants {side}×{side}×3 uint8 crops, got {crop.shape} {crop.dtype}")
        blob = self.spec.crop.to_blob(crops).astype(self.target_dtype, copy=False)
        source = np.asarray(latent, dtype=self.source_dtype).reshape(1, -1)
        if self.batched:
            outs = [self._run(blob, np.repeat(source, len(crops), axis=0))]
        else:
            outs = [self._run(blob[i : i + 1], source) for i in range(len(crops))]
        out = np.concatenate(outs, axis=0).astype(np.float32, copy=False)
        if not np.isfinite(out).all():  # NaN/Inf would become arbitrary pixels: never a face to show
            raise ModelError(f"{self.path.name} returned NaN/Inf values", fix="check the model file (`vcamd models verify`) and the execution provider")
        return self.spec.crop.to_crops(out)

    def _run(self, target: np.ndarray, source: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.target_name: np.ascontiguousarray(target), self.source_name: source})[0]


def _read_emap(path: Path, dim: int) -> npt.NDArray[np.float32]:
    """The dim×dim `emap`: the graph's last initializer, read at load straight from the file
    (`vcamd.onnxwire`: milliseconds, where parsing the whole 554 MB model took seconds)."""
    from vcamd.onnxwire import WireError, last_initializer

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
