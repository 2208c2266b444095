"""How the int8 copies (the swapper's, the enhancer's, the face parser's, the detector's) are built, as data: the recipes tried in order, the node types
quantised, the format; and `build_key`, what a kept copy was built and checked under.

The builder (`vcamd.models.quantize`) follows these; the cache (`vcamd.inference.int8cache`) files
each copy under `build_key`, and `vcamd.inference.precision` looks a copy up by it, so a change to
any of them (or to the check's thresholds, or to ONNX Runtime) builds a new copy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from vcamd.inference.detectcheck import DETECTOR_THRESHOLDS, HOLD_OUT_EVERY, Looks
from vcamd.inference.fidelity import PARSER_THRESHOLDS, THRESHOLDS

FORMAT = 1
"""Bumped when how a copy is built or checked changes in a way the recipes below do not show."""


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    keep_ends_float: bool
    """The first and the last convolution stay float."""


RECIPES: tuple[Recipe, ...] = (
    Recipe("every Conv/MatMul/Gemm in int8", keep_ends_float=False),
    Recipe("first and last Conv in float", keep_ends_float=True),
)
OP_TYPES = ("Conv", "MatMul", "Gemm")


def onnxruntime_version() -> str:
    import onnxruntime

    version: str = onnxruntime.__version__
    return version


def build_key(reduce_range: bool, role: str = "swapper", looks: Looks | None = None) -> str:
    """What a kept copy of a `role` model was built and checked under (`int8cache.Entry.key`), as 16
    hex digits. The swapper's key names no role (its copies kept before the other roles had any stay
    found); the others' name theirs and their own check's thresholds; the detector's, the settings
    its check is made at (`looks`: another threshold or size, another check) and which calibration images
    it holds out of the quantiser (`detectcheck.HOLD_OUT_EVERY`)."""
    ingredients: dict[str, object] = {"format": FORMAT, "recipes": [asdict(r) for r in RECIPES], "ops": OP_TYPES,
                                      "thresholds": asdict(THRESHOLDS), "onnxruntime": onnxruntime_version(), "reduce_range": reduce_range}
    if role == "detector":
        ingredients |= {"role": role, "thresholds": asdict(DETECTOR_THRESHOLDS), "looks": asdict(looks or Looks()),
                        "held_out_every": HOLD_OUT_EVERY}
    elif role != "swapper":
        ingredients |= {"role": role, "thresholds": asdict(PARSER_THRESHOLDS if role == "parser" else THRESHOLDS)}
    return hashlib.sha256(json.dumps(ingredients, sort_keys=True).encode()).hexdigest()[:16]
