"""The stand-in builders produce the production signatures and visible, input-dependent changes."""

from __future__ import annotations

import cv2
import numpy as np
import onnx
import onnxruntime
import pytest

from vcamd.bench import standins


def _session(path):
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_swapper_signature(standin_dir):
    s = _session(standin_dir / "inswapper_128.onnx")
    assert [(i.name, i.shape, i.type) for i in s.get_inputs()] == [
        ("target", [1, 3, 128, 128], "tensor(float)"),
        ("source", [1, 512], "tensor(float)"),
    ]
    assert s.get_outputs()[0].shape == [1, 3, 128, 128]
    model = onnx.load(str(standin_dir / "inswapper_128.onnx"))
    assert model.graph.initializer[-1].name == "emap" and list(model.graph.initializer[-1].dims) == [512, 512]
    fp16 = _session(standin_dir / "inswapper_128_fp16.onnx")  # fp16 weights, float32 I/O (model-contracts.md)
    assert [i.type for i in fp16.get_inputs()] == ["tensor(float)", "tensor(float)"] and fp16.get_outputs()[0].type == "tensor(float)"
    assert _session(standin_dir / "inswapper_128_batched.onnx").get_inputs()[0].shape[0] == "N"


def test_swapper_output_in_unit_range(standin_dir):
    s = _session(standin_dir / "inswapper_128.onnx")
    rng = np.random.default_rng(0)
    out = s.run(None, {"target": rng.random((1, 3, 128, 128), np.float32), "source": rng.standard_normal((1, 512), np.float32)})[0]
    assert out.shape == (1, 3, 128, 128) and 0.0 <= out.min() and out.max() <= 1.0


def test_compute_equivalent_layer_list_matches_the_contract():
    params, macs = standins.swapper_layer_stats()
    assert abs(params - 138.3e6) / 138.3e6 < 0.01  # model-contracts.md: 138.3 M parameters
    assert abs(macs - 174.6e9) / 174.6e9 < 0.01  # and 174.6 GMAC
    params, macs = standins.enhancer_layer_stats()
    assert 75e6 < params < 95e6 and 170e9 < macs < 230e9  # the GFPGAN estimate (~86 M, ~198 GMAC)


def test_recognizer_is_deterministic_and_discriminative(standin_dir, newton, solvay):
    s = _session(standin_dir / "w600k_standin.onnx")
    assert s.get_inputs()[0].shape == [1, 3, 112, 112] and s.get_outputs()[0].shape == [1, 512]

    def emb(img):
        crop = cv2.resize(img, (112, 112)).transpose(2, 0, 1)[None].astype(np.float32) / 127.5 - 1
        e = s.run(None, {s.get_inputs()[0].name: crop})[0][0]
        return e / np.linalg.norm(e)

    a = emb(newton[80:240, 320:460])
    assert float(a @ emb(newton[80:240, 320:460])) == pytest.approx(1.0, abs=1e-6)
    assert float(a @ emb(solvay[1030:1145, 140:230])) < 0.99


def test_recognizer_dim(tmp_path):
    s = _session(standins.build_recognizer(tmp_path / "r.onnx", dim=128))
    assert s.get_outputs()[0].shape == [1, 128]


def test_enhancer_changes_the_face_visibly(standin_dir, newton):
    s = _session(standin_dir / "gfpgan_standin.onnx")
    assert s.get_inputs()[0].name == "input" and s.get_inputs()[0].shape == [1, 3, 512, 512]
    img = cv2.resize(newton[60:260, 290:490], (512, 512))[..., ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 127.5 - 1
    out = s.run(None, {"input": img})[0]
    assert out.shape == img.shape and out.min() >= -1.0 and out.max() <= 1.0
    diff = np.abs(out - img).mean()
    assert 0.01 < diff < 0.3  # changed, but still the same picture
    assert out.std() > img.std()  # sharper / more contrast


def test_the_detector_at_10g_finds_the_faces_its_base_finds_at_scrfd_10g_s_extra_cost(assets, solvay, tmp_path):
    """`build_detector_at_10g`: SCRFD-10G's layer list (insightface's scrfd_10g_bnkps) is its name's
    10 GFLOPs at VGA, and the file it makes gives every output of its base bit for bit, at any input shape."""
    g = standins._Graph(count_only=True)
    standins._scrfd_10g_layers(g, "x", side=640)
    assert abs(g.macs * 480 / 640 - 10e9) / 10e9 < 0.02  # MACs at 640², scaled to 640 × 480
    assert 3.5e6 < g.params < 4.5e6  # SCRFD-10G: 3.86 M parameters (its model zoo)
    base = assets / "models" / "scrfd_2.5g_kps.onnx"
    heavier = standins.build_detector_at_10g(base, tmp_path / "at_10g.onnx")
    image = cv2.resize(solvay, (640, 640))[..., ::-1].transpose(2, 0, 1)[None].astype(np.float32) / 128.0 - 127.5 / 128.0
    want, got = _session(base).run(None, {"images": image}), _session(heavier).run(None, {"images": image})
    assert [o.name for o in _session(heavier).get_outputs()] == [o.name for o in _session(base).get_outputs()]
    assert all(np.array_equal(a, b) for a, b in zip(want, got)) and float(want[0].max()) > 0.5
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions

    found = [FaceDetector(path, Sessions(["cpu"], threads=1)).detect(solvay, 640) for path in (base, heavier)]
    assert len(found[0]) > 3 and [f.box for f in found[0]] == [f.box for f in found[1]]
