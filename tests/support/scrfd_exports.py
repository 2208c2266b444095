"""SCRFD exports with shapes fixed inside the graph, built from a real SCRFD file (tests only).

Some third-party exports write the sizes of the 640² input into the graph as constants: the FPN's
Resize `sizes` and the outputs' Reshape `shape`. They run at 640² (insightface's `SCRFD` does),
but rewritten to another input shape they cannot be created (ONNX Runtime's shape inference:
"Incompatible dimensions"), fail when run, or compute something else. Each builder here writes one
such variant of `source` to `target`; the weights are the real model's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _load(source: Path):
    import onnx

    return onnx.load(str(source))


def _save(model, target: Path) -> Path:
    import onnx

    onnx.save(model, str(target))
    return target


def _inferred_shapes(model) -> dict[str, list[int]]:
    from onnx import shape_inference

    graph = shape_inference.infer_shapes(model).graph
    return {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.value_info}


def _flattened(shape: list[int]) -> list[int]:
    """The [1, anchors, values] an NHWC score (2 channels: 1 value per anchor), box (8: 4) or
    keypoint (20: 10) map is reshaped to, for its size at 640²."""
    _, h, w, channels = shape
    per_anchor = 1 if channels == 2 else channels // 2
    return [1, h * w * channels // per_anchor, per_anchor]


def _fix_input(model, node, slot: int, values: list[int]) -> None:
    from onnx import numpy_helper

    name = f"{node.output[0]}_fixed"
    model.graph.initializer.append(numpy_helper.from_array(np.array(values, np.int64), name))
    node.input[slot] = name


def fixed_reshapes(source: Path, target: Path) -> Path:
    """The outputs' Reshape shapes as constants ([1, 12800, 1] …): created at any input shape,
    but a run at another one fails (the element counts differ)."""
    model = _load(source)
    shapes = _inferred_shapes(model)
    for node in model.graph.node:
        if node.op_type == "Reshape":
            _fix_input(model, node, 1, _flattened(shapes[node.input[0]]))
    return _save(model, target)


def fixed_inside(source: Path, target: Path) -> Path:
    """`fixed_reshapes` plus the FPN's upsampling to fixed sizes (Resize `sizes` [1, C, 40, 40] and
    [1, C, 80, 80]): rewritten to 640×384 the session cannot be created — the upsampled map no
    longer fits the lateral one it is added to (ShapeInferenceError: Incompatible dimensions)."""
    model = _load(source)
    shapes = _inferred_shapes(model)
    for node in model.graph.node:
        if node.op_type == "Reshape":
            _fix_input(model, node, 1, _flattened(shapes[node.input[0]]))
        elif node.op_type == "Resize":  # opset 11+: X, roi, scales, sizes; twice the input's H, W
            _, channels, h, w = shapes[node.input[0]]
            _fix_input(model, node, 3, [1, channels, 2 * h, 2 * w])
    return _save(model, target)


def height_baked(source: Path, target: Path) -> Path:
    """The image reshaped to [1, 3, 640, -1] before the first layer: a no-op at 640², and at
    640×384 a run that works, has outputs of the right size, and sees a scrambled image."""
    from onnx import helper, numpy_helper

    model = _load(source)
    graph = model.graph
    image = graph.input[0].name
    graph.initializer.append(numpy_helper.from_array(np.array([1, 3, 640, -1], np.int64), "baked_shape"))
    for node in graph.node:
        node.input[:] = ["baked_image" if name == image else name for name in node.input]
    graph.node.insert(0, helper.make_node("Reshape", [image, "baked_shape"], ["baked_image"]))
    return _save(model, target)


BUILDERS = {"fixed_inside": fixed_inside, "fixed_reshapes": fixed_reshapes, "height_baked": height_baked}
"""Variant name → builder: the three ways a graph with fixed inner shapes breaks when rewritten."""
