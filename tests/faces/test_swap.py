"""The swapper on inswapper-signature stand-ins: emap, latent, dtypes, batching, visible swaps, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from insightface.utils import face_align
from onnx import TensorProto, helper, numpy_helper

from vcamd.common.errors import FaceError, ModelError
from vcamd.faces.identity import Recognizer
from vcamd.faces.swap import Swapper


@pytest.fixture(scope="module")
def swapper(sessions, standin_dir) -> Swapper:
    return Swapper(standin_dir / "inswapper_128.onnx", sessions)


@pytest.fixture(scope="module")
def arcface(sessions, standin_dir) -> Recognizer:
    return Recognizer(standin_dir / "w600k_standin.onnx", sessions)


@pytest.fixture(scope="module")
def two_latents(swapper, arcface, newton, newton_face, solvay, solvay_faces):
    a = swapper.latent(arcface.embed(newton, newton_face))
    b = swapper.latent(arcface.embed(solvay, solvay_faces[10]))
    return a, b


@pytest.fixture(scope="module")
def solvay_crops(swapper, solvay, solvay_faces):
    return [swapper.align(solvay, f)[0] for f in solvay_faces[:4]]


def test_emap_is_the_last_initializer(swapper, standin_dir):
    model = onnx.load(str(standin_dir / "inswapper_128.onnx"))
    np.testing.assert_array_equal(swapper.emap, numpy_helper.to_array(model.graph.initializer[-1]))
    assert swapper.emap.shape == (512, 512) and not swapper.batched
    assert swapper.target_dtype == np.float32


def test_latent_is_normalised_embedding_times_emap(swapper, arcface, newton, newton_face):
    emb = arcface.embed(newton, newton_face)
    latent = swapper.latent(emb)
    assert latent.shape == (1, 512) and latent.dtype == np.float32
    expected = emb @ swapper.emap
    np.testing.assert_allclose(latent[0], expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)


def test_wrong_embedding_size_is_explained(swapper, mobilefacenet, newton, newton_face):
    with pytest.raises(FaceError, match="gives 128-d embeddings; the swapper needs 512-d"):
        swapper.latent(mobilefacenet.embed(newton, newton_face))


def test_swap_changes_the_crop_per_source(swapper, two_latents, solvay_crops):
    a, b = two_latents
    out_a = swapper.swap(solvay_crops, a)
    out_b = swapper.swap(solvay_crops, b)
    assert len(out_a) == len(solvay_crops)
    for crop, sa, sb in zip(solvay_crops, out_a, out_b):
        assert sa.shape == crop.shape and sa.dtype == np.uint8
        assert np.abs(sa.astype(int) - crop).mean() > 20  # the swap visibly happened
        assert np.abs(sa.astype(int) - sb).mean() > 5  # and depends on the source


def test_fp16_model_keeps_float32_io_like_the_published_export(sessions, standin_dir, swapper, two_latents, solvay_crops):
    # model-contracts.md: inswapper_128_fp16 has fp16 weights behind Cast nodes, float32 inputs and output.
    fp16 = Swapper(standin_dir / "inswapper_128_fp16.onnx", sessions)
    assert fp16.target_dtype == np.float32 and fp16.source_dtype == np.float32
    graph = onnx.load(str(standin_dir / "inswapper_128_fp16.onnx")).graph
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in graph.initializer)
    out16 = fp16.swap(solvay_crops, two_latents[0])
    out32 = swapper.swap(solvay_crops, two_latents[0])
    for a, b in zip(out16, out32):
        assert np.abs(a.astype(int) - b).max() <= 3


def test_batched_model_runs_once_with_same_result(sessions, standin_dir, swapper, two_latents, solvay_crops):
    batched = Swapper(standin_dir / "inswapper_128_batched.onnx", sessions)
    assert batched.batched
    for a, b in zip(batched.swap(solvay_crops, two_latents[1]), swapper.swap(solvay_crops, two_latents[1])):
        np.testing.assert_array_equal(a, b)
    assert batched.swap([], two_latents[1]) == []


@pytest.mark.filterwarnings("ignore:`estimate` is deprecated:FutureWarning")  # inside insightface
def test_align_matches_insightface_norm_crop2(swapper, newton, newton_face):
    crop, m = swapper.align(newton, newton_face)
    theirs, theirs_m = face_align.norm_crop2(newton, newton_face.kps, 128)
    np.testing.assert_allclose(m, theirs_m, rtol=1e-4, atol=1e-2)
    assert np.abs(crop.astype(int) - theirs).mean() < 0.5


def test_bad_crop_is_refused(swapper, two_latents):
    with pytest.raises(ValueError, match="128×128×3 uint8"):
        swapper.swap([np.zeros((112, 112, 3), np.uint8)], two_latents[0])


def _model(path: Path, inputs, outputs, inits=()) -> Path:
    nodes = [helper.make_node("Identity", [inputs[0].name], [outputs[0].name])]
    graph = helper.make_graph(nodes, "wrong", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_wrong_signature_is_refused(tmp_path, sessions, standin_dir):
    f = TensorProto.FLOAT
    wrong_source = _model(
        tmp_path / "wrong_source.onnx",
        [helper.make_tensor_value_info("target", f, [1, 3, 128, 128]), helper.make_tensor_value_info("source", f, [1, 256])],
        [helper.make_tensor_value_info("output", f, [1, 3, 128, 128])],
    )
    with pytest.raises(ModelError, match=r"wrong_source.onnx is not a face swapper vcamd knows \(expected inswapper_128: target \[1,3,128,128\]"):
        Swapper(wrong_source, sessions)
    with pytest.raises(ModelError, match="is not a face swapper vcamd knows"):
        Swapper(standin_dir / "w600k_standin.onnx", sessions)


def test_missing_emap_is_refused(tmp_path, sessions):
    f = TensorProto.FLOAT
    small_init = numpy_helper.from_array(np.zeros((4, 4), np.float32), "not_emap")
    path = _model(
        tmp_path / "no_emap.onnx",
        [helper.make_tensor_value_info("target", f, [1, 3, 128, 128]), helper.make_tensor_value_info("source", f, [1, 512])],
        [helper.make_tensor_value_info("output", f, [1, 3, 128, 128])],
        [small_init],
    )
    with pytest.raises(ModelError, match=r"last initializer has shape \(4, 4\)"):
        Swapper(path, sessions)


def test_corrupt_swapper_file(tmp_path, sessions, standin_dir):
    broken = tmp_path / "inswapper_128.onnx"
    broken.write_bytes((standin_dir / "inswapper_128.onnx").read_bytes()[:5000])
    with pytest.raises(ModelError, match="vcamd models pull"):
        Swapper(broken, sessions)
