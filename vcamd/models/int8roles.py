"""What differs between the roles' int8 copies (`vcamd.inference.precision.INT8_ROLES`): which model a
file is, the crop its calibration faces are aligned to, what the quantiser is fed, how the model is
run on the faces, and how its float and int8 outputs are compared (`vcamd.inference.fidelity`).
`vcamd.models.quantize` builds, checks and keeps every role's copy the same way through `RoleCheck`.

* **swapper** — each face swapped to the source identity (the aligned crop and the source's latent:
  what the live swap feeds it); checked by PSNR and the recogniser's identity (`fidelity.compare`).
* **enhancer** — each face aligned to the enhancer's own crop (GFPGAN: FFHQ 512²) and restored at
  full strength; the restored crops checked the swapper's way (`fidelity.compare`): an int8
  enhancer must never change who the face looks like.
* **detector** — whole images (the source photo, camera frames), looked at as the live loop looks:
  every face the float detector finds must be found, and placed, by the copy (`vcamd.models.int8detector`).
* **parser** — each face aligned to the FFHQ 512² crop (what the parser reads with the enhancer on;
  CelebAMask-HQ's own alignment); the class maps checked over the face's area (`fidelity.compare_parses`).

Each model is run through vcamd's own class for it (`Swapper`, `Enhancer`, `FaceParser`), on a
`Sessions` that runs either the model file or its copy (`Sessions.run_copy`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from vcamd.common.errors import ModelError
from vcamd.common.wayout import ways_out
from vcamd.inference.detectcheck import DetectorReport, Looks
from vcamd.inference.fidelity import FidelityReport, ParserReport, compare, compare_parses
from vcamd.inference.precision import family_has_int8, no_int8_for

if TYPE_CHECKING:
    from vcamd.common.types import Frame
    from vcamd.faces.calibration import CalibrationFaces
    from vcamd.faces.specs import CropSpec, SwapperSpec
    from vcamd.inference.runtime import Sessions

Report = FidelityReport | ParserReport | DetectorReport


def role_of(model: Path) -> str:
    """Which role's model `model` is, by its inputs and outputs (read without loading it): "swapper",
    "enhancer" or "parser". ModelError for a file that is none of them (or not a readable model)."""
    from vcamd.faces.enhance import ENHANCE_SIZE
    from vcamd.faces.parse import CLASSES, INPUT_NAME, PARSER_SIZE
    from vcamd.faces.specs import enhancer_spec_for, swapper_spec_for
    from vcamd.inference.onnxwire import WireError, signature

    try:
        inputs, outputs = signature(model)
    except (OSError, WireError) as exc:
        raise ModelError(f"{model.name} is not a readable ONNX model ({exc})", fix=ways_out(pull_note=" to download it again")) from None
    if swapper_spec_for(inputs) is not None:
        return "swapper"
    if len(inputs) == 1 and len(outputs) in (9, 15):  # SCRFD: scores, boxes, keypoints per stride (`faces.detect`)
        return "detector"
    shapes = list(outputs.values())
    if list(inputs) == [INPUT_NAME] and len(shapes) == 1 and shapes[0][1:] == [CLASSES, PARSER_SIZE, PARSER_SIZE]:
        return "parser"
    images = [dims for name, dims in inputs.items() if name != "weight"]
    side = images[0][2] if len(images) == 1 and len(images[0]) == 4 else None
    if enhancer_spec_for(side if isinstance(side, int) else ENHANCE_SIZE, set(inputs), model.name) is not None:
        return "enhancer"
    raise ModelError(f"{model.name} is not a face swapper, enhancer, parser or detector vcamd knows; those are the models with an int8 copy",
                     fix="name the swapper, the enhancer, the face parser or the detector (or leave MODEL out: the config's)")


def swapper_spec(model: Path) -> SwapperSpec:
    """The swapper's family, for a swapper with an int8 copy; ModelError for any other model."""
    from vcamd.faces.specs import swapper_spec_for
    from vcamd.inference.onnxwire import WireError, signature

    try:
        inputs, _ = signature(model)
    except (OSError, WireError) as exc:
        raise ModelError(f"{model.name} is not a readable ONNX model ({exc})", fix=ways_out(pull_note=" to download it again")) from None
    spec = swapper_spec_for(inputs)
    if spec is None:
        raise ModelError(f"{model.name} is not a face swapper vcamd knows",
                         fix="name the swapper (or leave MODEL out: the [models] swapper)")
    if not family_has_int8(spec.family):
        raise ModelError(f"{model.name}: {no_int8_for(spec.family)}", fix="leave [models] precision at \"auto\" or \"float\" for this swapper")
    return spec


def calibration_crop(role: str, model: Path) -> CropSpec:
    """The crop a `role` model's calibration faces are aligned to. ModelError when `model` is not one."""
    if role == "swapper":
        return swapper_spec(model).crop
    if role == "enhancer":
        from vcamd.faces.enhance import ENHANCE_SIZE
        from vcamd.faces.specs import enhancer_spec_for
        from vcamd.inference.onnxwire import signature

        inputs, _ = signature(model)
        side = next((dims[2] for name, dims in inputs.items() if name != "weight" and len(dims) == 4), None)
        spec = enhancer_spec_for(side if isinstance(side, int) else ENHANCE_SIZE, set(inputs), model.name)
        if spec is None:
            raise ModelError(f"{model.name} is not a face enhancer vcamd knows", fix="name the enhancer (`vcamd models list`)")
        return spec.crop
    from vcamd.faces.parse import PARSER_CROP

    return PARSER_CROP


class RoleCheck(Protocol):
    """One role's side of a build: its feeds, its runs, its comparison, its table."""

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        """The quantiser's calibration feeds: the model's inputs for each face."""
        ...

    def outputs(self, sessions: Sessions) -> tuple[list[Any], float]:
        """The model's output for each face through `sessions`, and the median ms a face."""
        ...

    def compare(self, floats: list[Any], int8s: list[Any]) -> Report: ...


def check_for(role: str, model: Path, recognizer: Path, faces: CalibrationFaces, providers: list[str], threads: int,
              looks: Looks | None = None) -> RoleCheck:
    """The `role` model's `RoleCheck` on the calibration `faces` (aligned to `calibration_crop`; the
    detector's: whole images, checked at `looks`)."""
    if role == "detector":
        from vcamd.models.int8detector import DetectorCheck

        return DetectorCheck(model, faces, providers, threads, looks or Looks())
    if role == "swapper":
        return SwapperCheck(model, recognizer, faces, providers, threads)
    if role == "enhancer":
        return EnhancerCheck(model, recognizer, faces, providers, threads)
    if role == "parser":
        return ParserCheck(model, faces)
    raise ValueError(f"no int8 copy for the {role}")


def timed(run: Callable[[Frame], Any], crops: list[Frame]) -> tuple[list[Any], float]:
    """Each crop through `run` alone (as live); the median ms a face, the first (allocating) run left out."""
    out, times = [], []
    for crop in crops:
        t0 = time.perf_counter()
        out.append(run(crop))
        times.append((time.perf_counter() - t0) * 1000.0)
    return out, statistics.median(times[1:] or times)


def recogniser_view(recognizer: Path, crop: CropSpec, providers: list[str], threads: int) -> Callable[[Frame], np.ndarray]:
    """The user's recogniser as a function of a face crop aligned as `crop`."""
    from vcamd.faces.align import similarity_transform, template_points, warp
    from vcamd.faces.identity import Recognizer
    from vcamd.inference.runtime import Sessions

    reader = Recognizer(recognizer, Sessions(providers, threads))
    size = reader.crop.size
    to_recogniser = similarity_transform(template_points(crop.size, crop.template), template_points(size, reader.crop.template))
    return lambda face: reader.embed_crop(warp(face, to_recogniser, size))


@dataclass
class _IdentityCheck:
    """A role whose outputs are face crops, compared by PSNR and the user's recogniser (`fidelity.compare`)."""

    model: Path
    recognizer: Path
    faces: CalibrationFaces
    providers: list[str]
    threads: int
    embed: Callable[[Frame], np.ndarray] = field(init=False, repr=False)
    """The user's recogniser on a crop aligned as the role's outputs are (each role's `__post_init__`)."""

    def compare(self, floats: list[Any], int8s: list[Any]) -> Report:
        return compare(floats, int8s, self.embed, self.faces.source)


@dataclass
class SwapperCheck(_IdentityCheck):
    def __post_init__(self) -> None:
        from vcamd.faces.swap import Swapper
        from vcamd.inference.runtime import Sessions
        self.spec = swapper_spec(self.model)
        self.latent = Swapper(self.model, Sessions(self.providers, self.threads)).latent(self.faces.source)
        self.embed = recogniser_view(self.recognizer, self.spec.crop, self.providers, self.threads)

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        row = np.asarray(self.latent, np.float32).reshape(1, -1)
        return ({self.spec.target_input: self.spec.crop.to_blob([crop]), self.spec.source_input: row} for crop in self.faces.crops)

    def outputs(self, sessions: Sessions) -> tuple[list[Any], float]:
        from vcamd.faces.swap import Swapper

        swapper = Swapper(self.model, sessions)
        return timed(lambda crop: swapper.swap([crop], self.latent)[0], self.faces.crops)

@dataclass
class EnhancerCheck(_IdentityCheck):
    def __post_init__(self) -> None:
        self.crop = calibration_crop("enhancer", self.model)
        self.embed = recogniser_view(self.recognizer, self.crop, self.providers, self.threads)

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        from vcamd.faces.enhance import DEFAULT_WEIGHT
        from vcamd.inference.onnxwire import signature

        inputs, _ = signature(self.model)
        image = next(name for name in inputs if name != "weight")
        weight = {"weight": np.array([DEFAULT_WEIGHT], np.float64)} if "weight" in inputs else {}  # CodeFormer's, as it runs live
        return ({image: self.crop.to_blob([crop])} | weight for crop in self.faces.crops)

    def outputs(self, sessions: Sessions) -> tuple[list[Any], float]:
        from vcamd.faces.enhance import Enhancer

        enhancer = Enhancer(self.model, sessions, strength=1.0)
        return timed(enhancer.restore, self.faces.crops)

@dataclass
class ParserCheck:
    model: Path
    faces: CalibrationFaces

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        from vcamd.faces.parse import INPUT_NAME, parser_input

        return ({INPUT_NAME: parser_input(crop)} for crop in self.faces.crops)

    def outputs(self, sessions: Sessions) -> tuple[list[Any], float]:
        from vcamd.faces.parse import FaceParser

        parser = FaceParser(self.model, sessions)
        return timed(lambda crop: parser.classes([crop])[0], self.faces.crops)

    def compare(self, floats: list[Any], int8s: list[Any]) -> Report:
        from vcamd.faces.parse import FACE_CLASSES, PARSER_CROP, PARSER_SIZE, face_core

        core = face_core(PARSER_CROP)
        if core.shape[0] != PARSER_SIZE:
            raise ValueError("the parser's calibration crop is its own input size")
        return compare_parses(floats, int8s, FACE_CLASSES, core)
