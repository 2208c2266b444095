"""`vcamd.inference.onnxwire` reads what the onnx package would: checked against it as the oracle.

The last initializer in every encoding a writer may choose (raw bytes, the typed fields, fp16 bit
patterns, external data), node names, and the detector's input-size rewrite byte for byte as
`onnx` writes it. Malformed files raise `WireError`, never anything else; external data outside the
model's folder is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from vcamd.inference import onnxwire
from vcamd.inference.onnxwire import WireError

DETECTORS = ["scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx"]


def _save(path: Path, initializers: list[TensorProto], *, nodes=(), inputs=(), outputs=()) -> Path:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=initializers)
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


def _oracle_last(path: Path) -> np.ndarray:
    model = onnx.load_model(str(path), load_external_data=False)
    return numpy_helper.to_array(model.graph.initializer[-1], base_dir=str(path.parent))


@settings(max_examples=60, deadline=None)
@given(
    data_type=st.sampled_from([TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE]),
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=3),
    raw=st.booleans(),
    before=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_last_initializer_in_every_encoding(tmp_path_factory, data_type, shape, raw, before, seed):
    rng = np.random.default_rng(seed)
    dtype = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64}[data_type]
    values = rng.standard_normal(shape).astype(dtype)
    others = [numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), f"w{i}") for i in range(before)]
    last = helper.make_tensor("emap", data_type, shape, values.tobytes() if raw else values.reshape(-1).tolist(), raw=raw)
    path = _save(tmp_path_factory.mktemp("enc") / "m.onnx", [*others, last])
    got = onnxwire.last_initializer(path)
    expected = _oracle_last(path)
    assert got is not None and got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_a_graph_given_twice_is_merged_as_protobuf_does(tmp_path):
    # Two ModelProtos back to back parse as one, the graphs merged: initializers of both, in order.
    first = _save(tmp_path / "a.onnx", [numpy_helper.from_array(np.ones(4, np.float32), "a")]).read_bytes()
    second = _save(tmp_path / "b.onnx", [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "b")]).read_bytes()
    path = tmp_path / "merged.onnx"
    path.write_bytes(first + second)
    np.testing.assert_array_equal(onnxwire.last_initializer(path), _oracle_last(path))
    path.write_bytes(second + first)
    np.testing.assert_array_equal(onnxwire.last_initializer(path), _oracle_last(path))


def test_a_graph_without_initializers_has_none(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    path = _save(tmp_path / "m.onnx", [], nodes=[helper.make_node("Identity", ["x"], ["y"])], inputs=[x],
                 outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    assert onnxwire.last_initializer(path) is None


def _external(tmp_path: Path, location: str, data: bytes, length: int) -> Path:
    tensor = TensorProto(name="emap", data_type=TensorProto.FLOAT, dims=[2, 2])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "4"), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    (folder / "weights.bin").write_bytes(data)
    return _save(folder / "m.onnx", [tensor])


def test_external_data_inside_the_models_folder_is_read(tmp_path):
    values = np.arange(4, dtype=np.float32)
    path = _external(tmp_path, "weights.bin", b"pad!" + values.tobytes(), 16)
    np.testing.assert_array_equal(onnxwire.last_initializer(path), _oracle_last(path))
    np.testing.assert_array_equal(onnxwire.last_initializer(path), values.reshape(2, 2))


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../outside.bin", ""])
def test_external_data_outside_the_models_folder_is_never_read(tmp_path, location):
    (tmp_path / "outside.bin").write_bytes(bytes(64))
    path = _external(tmp_path, location, b"", 16)
    with pytest.raises(WireError, match="outside the model's folder"):
        onnxwire.last_initializer(path)


def test_external_data_cut_short_is_an_error(tmp_path):
    path = _external(tmp_path, "weights.bin", b"pad!" + bytes(8), 16)
    with pytest.raises(WireError, match="truncated"):
        onnxwire.last_initializer(path)


@pytest.mark.parametrize("data_type", [TensorProto.INT64, TensorProto.STRING])
def test_a_tensor_that_is_not_float_is_refused(tmp_path, data_type):
    tensor = helper.make_tensor("emap", data_type, [2], [1, 2] if data_type == TensorProto.INT64 else [b"a", b"b"])
    with pytest.raises(WireError, match="not a float type"):
        onnxwire.last_initializer(_save(tmp_path / "m.onnx", [tensor]))


def test_malformed_files_raise_wire_errors(tmp_path, assets):
    real = (assets / "models" / "scrfd_500m_kps.onnx").read_bytes()
    cases = {
        "empty": b"",
        "text": b"this is not a model\n",
        "half": real[: len(real) // 2],
        "header": real[:100],
        "wire-type-7": bytes([0x0F, 0x00]),
        "endless-varint": b"\x08" + b"\xff" * 20,
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(data)
        for read in (onnxwire.last_initializer, lambda p: onnxwire.node_names(p, 8), lambda p: onnxwire.with_input_size(p.read_bytes(), (64, 64))):
            with pytest.raises(WireError):
                read(path)


@pytest.mark.parametrize("name", [*DETECTORS, "mobilefacenet.onnx"])
def test_node_names_are_the_graphs_first_nodes(assets, name):
    path = assets / "models" / name
    model = onnx.load_model(str(path), load_external_data=False)
    assert onnxwire.node_names(path, 8) == [node.name for node in model.graph.node[:8]]
    assert onnxwire.node_names(path, 0) == []


def _onnx_with_input_size(path: Path, input_hw: tuple[int, int]) -> bytes:
    """The rewrite as the onnx package does it (what vcamd did before onnxwire)."""
    model = onnx.load_model(str(path))
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], input_hw):
        dim.ClearField("dim_param")
        dim.dim_value = value
    for out in model.graph.output:
        for dim in out.type.tensor_type.shape.dim:
            dim.ClearField("dim_value")
            dim.dim_param = "?"
    del model.graph.value_info[:]
    return model.SerializeToString()


@pytest.mark.parametrize("name", DETECTORS)
@pytest.mark.parametrize("input_hw", [(64, 64), (192, 192), (352, 640), (1088, 1920)])
def test_the_input_size_rewrite_is_byte_for_byte_what_onnx_writes(assets, name, input_hw):
    path = assets / "models" / name
    assert onnxwire.with_input_size(path.read_bytes(), input_hw) == _onnx_with_input_size(path, input_hw)


def test_the_rewrite_drops_value_info_and_keeps_other_inputs(tmp_path):
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 3, 640, 640])
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1, 3, 640, 640])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 640, 640])
    graph = helper.make_graph([helper.make_node("Mul", ["image", "scale"], ["out"])], "g", [image, scale], [out],
                              value_info=[helper.make_tensor_value_info("mid", TensorProto.FLOAT, [1, 3, 640, 640])])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    rewritten = onnx.load_from_string(onnxwire.with_input_size(path.read_bytes(), (96, 128)))
    assert rewritten.SerializeToString() == _onnx_with_input_size(path, (96, 128))
    dims = [[d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in rewritten.graph.input]
    assert dims == [["n", 3, 96, 128], [1, 3, 640, 640]]
    assert not rewritten.graph.value_info


def test_an_input_that_is_not_an_image_is_refused(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])
    path = _save(tmp_path / "m.onnx", [], nodes=[helper.make_node("Identity", ["x"], ["y"])], inputs=[x], outputs=[y])
    with pytest.raises(WireError, match="NCHW image input, got rank 2"):
        onnxwire.with_input_size(path.read_bytes(), (64, 64))
    with pytest.raises(WireError, match="no input"):
        onnxwire.with_input_size(_save(tmp_path / "none.onnx", []).read_bytes(), (64, 64))


def test_the_signature_is_what_onnx_runtime_reports(assets, standin_dir: Path, tmp_path):
    """Inputs (not the initializers an old exporter also lists as inputs) and outputs, name → dims,
    as ONNX Runtime's session reports them: real models and stand-ins, symbolic dims included."""
    import onnxruntime

    files = [assets / "models" / name for name in (*DETECTORS, "mobilefacenet.onnx")]
    files += [standin_dir / name for name in ("inswapper_128.onnx", "inswapper_128_batched.onnx", "w600k_standin.onnx")]
    weights = numpy_helper.from_array(np.ones(3, np.float32), "w")
    files.append(_save(tmp_path / "listed.onnx", [weights], nodes=[helper.make_node("Add", ["x", "w"], ["y"])],
                       inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])],
                       outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])]))
    for path in files:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert onnxwire.signature(path) == ({i.name: i.shape for i in session.get_inputs()},
                                            {o.name: o.shape for o in session.get_outputs()}), path.name
    assert onnxwire.signature(files[-1])[0] == {"x": ["N", 3]}
