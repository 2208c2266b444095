"""How the swapper's int8 copy is built, as data: the recipes tried in order, the node types
quantised, the format; and `build_key`, what a kept copy was built and checked under.

The builder (`vcamd.models.quantize`) follows these; the cache (`vcamd.inference.int8cache`) files
each copy under `build_key`, and `vcamd.inference.precision` looks a copy up by it, so a change to
any of them (or to the check's thresholds, or to ONNX Runtime) builds a new copy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from vcamd.inference.fidelity import THRESHOLDS

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


def build_key(reduce_range: bool) -> str:
    """What a kept copy was built and checked under (`int8cache.Entry.key`), as 16 hex digits."""
    ingredients = {"format": FORMAT, "recipes": [asdict(r) for r in RECIPES], "ops": OP_TYPES, "thresholds": asdict(THRESHOLDS),
                   "onnxruntime": onnxruntime_version(), "reduce_range": reduce_range}
    return hashlib.sha256(json.dumps(ingredients, sort_keys=True).encode()).hexdigest()[:16]
