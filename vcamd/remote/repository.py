"""`vcamd serve --write-repository DIR`: a Triton model repository for NVIDIA's own Triton container.

For a team serving many cameras from one GPU machine: `tritonserver --model-repository=DIR` runs
each model on Triton's onnxruntime backend (no Python in the loop), on the GPU's instance groups,
with dynamic batching where the model's batch dimension is free. Each served role gets a folder
`NAME/config.pbtxt` + `NAME/1/model.onnx`, under the same `wire.served_name` and with the same wire
as `vcamd serve`: the model file wrapped in a few ONNX nodes so that its image tensors travel as
uint8 pixels (the role's normalisation done on the server: (x − mean) / std in, round(x·std + mean)
out) and the parser answers the class of each pixel; the swapper's `.emap` companion is a one-node
Gather over its emap. The configs are built with Triton's own schema (`model_config_pb2`, from
tritonclient), so a field Triton does not know cannot be written.

The weights are the user's own files, copied into the repository they asked for; nothing is
downloaded or shipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vcamd.common.errors import VcamdError
from vcamd.config.schema import Config
from vcamd.remote.wire import EMAP_SUFFIX, Classes, CropPixels, Signature

OPSET = 17


def write_repository(cfg: Config, folder: Path, *, max_batch: int = 8, instances: int = 1, queue_delay_us: int = 0,
                     kind: str = "KIND_GPU") -> list[str]:
    """Write the repository for `cfg`'s served roles into `folder`; returns the model names written."""
    from vcamd.inference.runtime import Sessions
    from vcamd.remote.serve import load_served_roles

    written: list[str] = []
    for item in load_served_roles(cfg, Sessions(["cpu"], threads=1)):  # a CPU session: only to check each file
        model = _wrapped(Path(item.model.path), item.role, item.session)
        _write_model(folder / item.name, item.name, model, max_batch=max_batch, instances=instances, queue_delay_us=queue_delay_us,
                     kind=kind)
        written.append(item.name)
        if item.role == "swapper" and item.model.emap is not None:  # inswapper's; the other families have none
            emap_name = item.name + EMAP_SUFFIX
            _write_model(folder / emap_name, emap_name, _emap_model(item.model.emap), max_batch=0, instances=1, queue_delay_us=0,
                         kind="KIND_CPU")
            written.append(emap_name)
    return written


def _wrapped(path: Path, role: str, session: Any) -> Any:
    """The model file with its image tensors as uint8 pixels (and the parser's logits as classes)."""
    import onnx
    from onnx import TensorProto, helper

    from vcamd.remote.wire import Arg

    model = onnx.load(str(path))
    inputs = [Arg(i.name, list(i.shape), i.type) for i in session.get_inputs()]
    outputs = [Arg(o.name, list(o.shape), o.type) for o in session.get_outputs()]
    sig = Signature.to_serve(role, inputs, outputs)
    graph = model.graph
    head: list[Any] = []  # onnx NodeProtos
    tail: list[Any] = []
    for value in graph.input:
        codec = sig.codecs.get(value.name)
        if not isinstance(codec, CropPixels) and type(codec).__name__ != "ParserPixels":
            continue
        inner = value.name + "__model"
        _rename_uses(graph, value.name, inner)
        float_type = value.type.tensor_type.elem_type
        mean, std = _normalisation(codec)
        head += [
            helper.make_node("Cast", [value.name], [inner + "_f"], to=TensorProto.FLOAT),
            helper.make_node("Sub", [inner + "_f", _const(graph, inner + "_mean", mean)], [inner + "_c"]),
            helper.make_node("Div", [inner + "_c", _const(graph, inner + "_std", std)], [inner + "_n"]),
            helper.make_node("Cast", [inner + "_n"], [inner], to=float_type),
        ]
        value.type.tensor_type.elem_type = TensorProto.UINT8
    for value in graph.output:
        codec = sig.codecs.get(value.name)
        inner = value.name + "__model"
        if isinstance(codec, CropPixels):
            _rename_producer(graph, value.name, inner)
            mean, std = _normalisation(codec)
            tail += [
                helper.make_node("Cast", [inner], [inner + "_f"], to=TensorProto.FLOAT),
                helper.make_node("Mul", [inner + "_f", _const(graph, inner + "_std", std)], [inner + "_s"]),
                helper.make_node("Add", [inner + "_s", _const(graph, inner + "_mean", mean)], [inner + "_m"]),
                helper.make_node("Round", [inner + "_m"], [inner + "_r"]),
                helper.make_node("Clip", [inner + "_r", _const(graph, inner + "_lo", np.float32(0)), _const(graph, inner + "_hi", np.float32(255))],
                                 [inner + "_k"]),
                helper.make_node("Cast", [inner + "_k"], [value.name], to=TensorProto.UINT8),
            ]
            value.type.tensor_type.elem_type = TensorProto.UINT8
        elif isinstance(codec, Classes):
            _rename_producer(graph, value.name, inner)
            tail += [helper.make_node("ArgMax", [inner], [inner + "_a"], axis=1, keepdims=0),
                     helper.make_node("Cast", [inner + "_a"], [value.name], to=TensorProto.UINT8)]
            dims = value.type.tensor_type.shape.dim
            del dims[1]
            value.type.tensor_type.elem_type = TensorProto.UINT8
    nodes = head + list(graph.node) + tail
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _normalisation(codec: Any) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) in pixel units, shaped to broadcast over N×3×H×W."""
    from vcamd.faces.specs import per_channel

    if isinstance(codec, CropPixels):
        # One value or one per channel (RGB, the tensor's channel order): the client's CropPixels reads it the same way.
        mean, std = per_channel(codec.spec.mean), per_channel(codec.spec.std)
        return np.asarray(mean, np.float32).reshape(1, 3, 1, 1), np.asarray(std, np.float32).reshape(1, 3, 1, 1)
    from vcamd.faces.parse import MEAN, STD

    return (MEAN * 255.0).reshape(1, 3, 1, 1).astype(np.float32), (STD * 255.0).reshape(1, 3, 1, 1).astype(np.float32)


def _const(graph: Any, name: str, value: np.ndarray | np.floating) -> str:
    from onnx import numpy_helper

    graph.initializer.insert(0, numpy_helper.from_array(np.asarray(value, np.float32), name))  # first: the emap stays last
    return name


def _rename_uses(graph: Any, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]


def _rename_producer(graph: Any, old: str, new: str) -> None:
    for node in graph.node:
        node.output[:] = [new if name == old else name for name in node.output]
        node.input[:] = [new if name == old else name for name in node.input]


def _emap_model(emap: np.ndarray) -> Any:
    """`row` [N] int64 → `emap` [N, D]: the swapper's identity projection, row by row."""
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.ascontiguousarray(emap, np.float32), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "row"], ["emap"], axis=0)], "emap",
                              [helper.make_tensor_value_info("row", TensorProto.INT64, [None])],
                              [helper.make_tensor_value_info("emap", TensorProto.FLOAT, [None, emap.shape[1]])], initializer=[table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def _write_model(folder: Path, name: str, model: Any, *, max_batch: int, instances: int, queue_delay_us: int, kind: str) -> None:
    import onnx
    from google.protobuf import text_format

    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError:
        raise VcamdError("writing a Triton model repository needs tritonclient (Triton's model config schema)",
                         fix="install it: `pip install -e '.[serve]'`") from None
    graph = model.graph
    initialised = {i.name for i in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initialised]
    batch_free = all(not v.type.tensor_type.shape.dim[0].HasField("dim_value") for v in [*inputs, *graph.output]
                     if v.type.tensor_type.shape.dim)
    batching = max_batch > 0 and batch_free
    config = model_config_pb2.ModelConfig(name=name, backend="onnxruntime", max_batch_size=max_batch if batching else 0)

    def dims(value: Any) -> list[int]:
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]
        return shape[1:] if batching else shape

    types = {1: "TYPE_FP32", 10: "TYPE_FP16", 2: "TYPE_UINT8", 7: "TYPE_INT64", 11: "TYPE_FP64"}
    for value in inputs:
        config.input.add(name=value.name, data_type=types[value.type.tensor_type.elem_type], dims=dims(value))
    for value in graph.output:
        config.output.add(name=value.name, data_type=types[value.type.tensor_type.elem_type], dims=dims(value))
    if batching:
        config.dynamic_batching.max_queue_delay_microseconds = queue_delay_us
    group = config.instance_group.add(count=instances)
    group.kind = getattr(model_config_pb2.ModelInstanceGroup.Kind, kind)
    (folder / "1").mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(folder / "1" / "model.onnx"))
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
