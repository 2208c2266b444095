"""The face parser: which pixels of a face's aligned crop are the face itself, so a hand, a cup or
glasses in front of it stay in front of the swapped face.

A BiSeNet trained on CelebAMask-HQ (what FaceFusion ships as bisenet_resnet_18/34.onnx; contract in
the shared model contracts): input [1,3,512,512] RGB with ImageNet normalisation, output
[1,19,512,512] logits, the class per pixel by argmax. The swapped face is pasted only where the
parser sees the chosen regions (`[mask] regions`), combined with the paste's own feathered mask by
their minimum; the region mask is softened inside its edge the way FaceFusion does (Gaussian σ 5
at 512, then (clip(m, ½, 1) − ½)·2), so it never spills past what the parser saw.

It fails closed: the share of the face's core (the hull of its five template points: eyes, nose,
mouth — always face when the face is in view) that the parser sees as chosen regions is
`ParsedFace.visible`; under `[mask] min_visible` (a hand over most of the face, a turned head, a
collapsed mask) the face is not pasted at all but held or obscured like any face that could not
be swapped — never pasted around a mask that shows the raw face.

Runs on the swap worker's thread, on the crops the swap was made from: the loop pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from vcamd.common.errors import ModelError
from vcamd.common.types import Frame, as_frame
from vcamd.common.wayout import how_to_get
from vcamd.faces.align import template_points
from vcamd.faces.specs import ENHANCER_CROP, CropSpec

if TYPE_CHECKING:
    from vcamd.inference.runtime import Sessions

PARSER_SIZE = 512
INPUT_NAME = "input"
CLASSES = 19
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)

REGION_CLASSES: dict[str, tuple[int, ...]] = {
    "skin": (1,),
    "brows": (2, 3),
    "eyes": (4, 5),
    "glasses": (6,),
    "nose": (10,),
    "mouth": (11,),  # the inner mouth
    "lips": (12, 13),
}
"""`[mask] regions` names → CelebAMask-HQ classes (0 background, 7/8 ears, 9 earring, 14 neck,
15 necklace, 16 cloth, 17 hair, 18 hat are never the face)."""
FACE_CLASSES = tuple(sorted({c for classes in REGION_CLASSES.values() for c in classes}))
"""Every class a `[mask] regions` choice can paste over: the face's area (its int8 copy's check, `vcamd.inference.fidelity`)."""
PARSER_CROP = ENHANCER_CROP
"""The crop the parser's int8 copy is calibrated and checked on: FFHQ at 512² (what it reads with the
enhancer on; CelebAMask-HQ's own alignment)."""

EDGE_SIGMA = 5.0
"""The region mask's softening at 512 px (FaceFusion's)."""

FloatMask = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class ParsedFace:
    mask: FloatMask  # crop-sized, in [0, 1]: where the swapped face may show
    visible: float  # share of the face's core the parser sees as the chosen regions


def to_blob(rgb: Frame) -> npt.NDArray[np.float32]:
    """A 512² RGB uint8 image → the parser's input [1,3,512,512]: ImageNet normalisation."""
    return np.ascontiguousarray(((rgb.astype(np.float32) / 255.0 - MEAN) / STD).transpose(2, 0, 1)[None])


def parser_input(crop: Frame) -> npt.NDArray[np.float32]:
    """An aligned BGR crop of any size → the parser's input: resized to 512², RGB, normalised (`to_blob`)."""
    return to_blob(as_frame(cv2.cvtColor(cv2.resize(crop, (PARSER_SIZE, PARSER_SIZE), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)))


def region_mask(classes: npt.NDArray[np.integer], regions: Sequence[str], size: int) -> FloatMask:
    """The chosen regions of a class map, softened inside their edge, at `size` px."""
    chosen = np.isin(classes, [c for name in regions for c in REGION_CLASSES[name]]).astype(np.float32)
    soft = cv2.GaussianBlur(chosen, (0, 0), EDGE_SIGMA * chosen.shape[0] / PARSER_SIZE)
    soft = (np.clip(soft, 0.5, 1.0) - 0.5) * 2.0
    if soft.shape[0] != size:
        soft = cv2.resize(soft, (size, size), interpolation=cv2.INTER_AREA if soft.shape[0] > size else cv2.INTER_LINEAR)
    return soft.astype(np.float32)


def face_core(spec: CropSpec) -> npt.NDArray[np.bool_]:
    """The pixels of a crop inside the hull of its template's five points (eyes, nose, mouth)."""
    core = np.zeros((spec.size, spec.size), np.uint8)
    hull = cv2.convexHull(np.round(template_points(spec.size, spec.template)).astype(np.int32))
    cv2.fillConvexPoly(core, hull, 1)
    return core.astype(bool)


class FaceParser:
    """A BiSeNet face parser (`[models] parser`) and the regions the swap may cover."""

    def __init__(self, path: Path, sessions: Sessions, regions: Sequence[str] = ("skin",), min_visible: float = 0.0) -> None:
        # The defaults serve the model roles table's signature check (`(path, sessions)`); the engine passes [mask]'s.
        self.path = Path(path)
        self.session = sessions.get(self.path, background=True)
        inputs = {i.name: i.shape for i in self.session.get_inputs()}
        outputs = self.session.get_outputs()
        if list(inputs) != [INPUT_NAME] or list(inputs[INPUT_NAME][1:]) != [3, PARSER_SIZE, PARSER_SIZE] or len(outputs) != 1:
            raise ModelError(f"{self.path.name} is not a face parser (BiSeNet: input [1,3,512,512] named \"input\", one output)",
                             fix=f"set [models] parser to bisenet_resnet_34 ({how_to_get(['bisenet_resnet_34'])}) or \"\" (off)")
        self.regions = tuple(regions)
        self.min_visible = float(min_visible)
        self._cores: dict[tuple[str, int], npt.NDArray[np.bool_]] = {}

    def classes(self, crops: Sequence[Frame]) -> list[npt.NDArray[np.uint8]]:
        """The class per pixel (512², argmax of the logits) of aligned BGR crops."""
        out = []
        for crop in crops:
            logits = self.session.run(None, {INPUT_NAME: parser_input(crop)})[0]
            if logits.shape[1:] != (CLASSES, PARSER_SIZE, PARSER_SIZE) or not np.isfinite(logits).all():
                raise ModelError(f"{self.path.name} returned {logits.shape} (or NaN) instead of [1,19,512,512] logits",
                                 fix="check the model file (`vcamd models verify`)")
            out.append(logits[0].argmax(axis=0).astype(np.uint8))
        return out

    def parse(self, crops: Sequence[Frame], spec: CropSpec) -> list[ParsedFace]:
        """Where the swap may show on each aligned crop of `spec`'s geometry, and how much of the face is in view."""
        key = (spec.template, spec.size)
        core = self._cores.get(key)
        if core is None:
            core = self._cores[key] = face_core(spec)
        parsed = []
        for classes in self.classes(crops):
            mask = region_mask(classes, self.regions, spec.size)
            parsed.append(ParsedFace(mask, float(mask[core].mean())))
        return parsed

    def shown(self, parsed: ParsedFace) -> bool:
        """Whether enough of the face is in view to paste it (else it is held or obscured)."""
        return parsed.visible >= self.min_visible
