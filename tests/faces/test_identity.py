"""Identity: embeddings on real photos (MobileFaceNet), source loading errors, reference picking."""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from vcamd.common.errors import FaceError, ModelError
from vcamd.faces.identity import Recognizer, load_source_identity, pick_reference


def _cut_around(image: np.ndarray, box, margin: float = 1.0) -> np.ndarray:
    x1, y1, x2, y2 = box
    pad = margin * (x2 - x1)
    h, w = image.shape[:2]
    return image[int(max(0, y1 - pad)) : int(min(h, y2 + pad)), int(max(0, x1 - pad)) : int(min(w, x2 + pad))].copy()


def test_mobilefacenet_settings_detected(mobilefacenet):
    # Its graph starts with a Conv (no in-graph Sub/Mul): ArcFace's (127.5, 127.5), by insightface's rule.
    assert mobilefacenet.dim == 128
    assert (mobilefacenet.mean, mobilefacenet.std) == (127.5, 127.5)


def _mxnet_style_export(plain: Path, out: Path) -> Path:
    """The same network exported mxnet-style: it takes raw 0..255 RGB and normalises inside the graph
    with leading `_minusscalar` / `_mulscalar` nodes (what insightface's ArcFaceONNX looks for)."""
    model = onnx.load(str(plain))
    graph = model.graph
    inner = graph.input[0].name
    raw = "data"
    mean = numpy_helper.from_array(np.array(127.5, np.float32), "norm_mean")
    scale = numpy_helper.from_array(np.array(1 / 127.5, np.float32), "norm_scale")
    prefix = [
        helper.make_node("Sub", [raw, "norm_mean"], ["centred"], name="_minusscalar0"),
        helper.make_node("Mul", ["centred", "norm_scale"], [inner], name="_mulscalar0"),
    ]
    new_input = helper.make_tensor_value_info(raw, onnx.TensorProto.FLOAT, [1, 3, 112, 112])
    nodes = prefix + list(graph.node)
    new_graph = helper.make_graph(nodes, graph.name, [new_input], list(graph.output), initializer=[*graph.initializer, mean, scale])
    wrapped = helper.make_model(new_graph, opset_imports=list(model.opset_import))
    wrapped.ir_version = model.ir_version
    onnx.save(wrapped, str(out))
    return out


def test_mxnet_style_export_is_fed_raw_pixels(sessions, models_dir, tmp_path, mobilefacenet, newton, newton_face, solvay, solvay_faces):
    wrapped = Recognizer(_mxnet_style_export(models_dir / "mobilefacenet.onnx", tmp_path / "mxnet_style.onnx"), sessions)
    assert (wrapped.mean, wrapped.std) == (0.0, 1.0)
    # Decided from the graph, the export gives the embeddings of the plain network: same identity space.
    for frame, face in [(newton, newton_face), *((solvay, f) for f in solvay_faces[:5])]:
        assert float(wrapped.embed(frame, face) @ mobilefacenet.embed(frame, face)) > 0.999
    # Normalised twice (by us and by its graph) it would be another function altogether.
    twice = Recognizer(tmp_path / "mxnet_style.onnx", sessions, normalisation=(127.5, 127.5))
    assert float(twice.embed(newton, newton_face) @ mobilefacenet.embed(newton, newton_face)) < 0.9


def test_embedding_is_normalised_and_stable(mobilefacenet, newton, newton_face, detector):
    emb = mobilefacenet.embed(newton, newton_face)
    assert emb.shape == (128,) and emb.dtype == np.float32
    assert abs(np.linalg.norm(emb) - 1.0) < 1e-5
    # the same face, scaled down and re-detected, is still clearly the same person
    small = cv2.resize(newton, None, fx=0.7, fy=0.7, interpolation=cv2.INTER_AREA)
    (face,) = detector.detect(small)
    assert float(mobilefacenet.embed(small, face) @ emb) > 0.8


def test_different_people_differ(mobilefacenet, solvay, solvay_faces):
    embs = np.stack([mobilefacenet.embed(solvay, f) for f in solvay_faces[:10]])
    sims = embs @ embs.T
    off_diagonal = sims[~np.eye(len(embs), dtype=bool)]
    assert off_diagonal.max() < 0.75, off_diagonal.max()


@pytest.mark.parametrize("index", [3, 17, 26])
def test_pick_reference_finds_the_person(mobilefacenet, detector, solvay, solvay_faces, index):
    reference_photo = _cut_around(solvay, solvay_faces[index].box)
    reference = _embed_largest_face(reference_photo, detector, mobilefacenet)
    picked = pick_reference(solvay_faces, solvay, reference, mobilefacenet)
    assert picked is solvay_faces[index]


def _embed_largest_face(image, detector, recognizer):
    faces = detector.detect(image)
    assert faces, "the reference crop must contain a face"
    return recognizer.embed(image, max(faces, key=lambda f: f.area))


def test_pick_reference_empty_and_wrong_dim(mobilefacenet, solvay, solvay_faces):
    assert pick_reference([], solvay, np.zeros(128, np.float32), mobilefacenet) is None
    with pytest.raises(FaceError, match="512 values, the recognizer gives 128"):
        pick_reference(solvay_faces, solvay, np.zeros(512, np.float32), mobilefacenet)


def test_load_source_identity_one_face(assets, detector, mobilefacenet, newton, newton_face):
    identity = load_source_identity(assets / "images" / "newton.png", detector, mobilefacenet)
    assert identity.path.name == "newton.png"
    assert identity.which_face() is None  # one face: nothing to say
    np.testing.assert_allclose(identity.face.kps, newton_face.kps)
    np.testing.assert_allclose(identity.embedding, mobilefacenet.embed(newton, newton_face), atol=1e-6)


def test_load_source_identity_uses_largest(assets, detector, mobilefacenet, solvay_faces, caplog):
    with caplog.at_level(logging.INFO, logger="vcamd.faces.identity"):
        identity = load_source_identity(assets / "images" / "solvay_conference_1927.png", detector, mobilefacenet)
    assert identity.face.area == max(f.area for f in solvay_faces)
    assert identity.faces_in_photo == 29
    which = identity.which_face()
    assert which is not None and which.startswith("the largest of the 29 faces in the photo (")
    assert f"x={round(identity.face.box[0])}, y={round(identity.face.box[1])}" in which
    assert f"using {which}" in caplog.text


def test_source_errors(tmp_path: Path, detector, mobilefacenet):
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((400, 400, 3), 200, np.uint8))
    with pytest.raises(FaceError, match="no face found in source face .*blank.png"):
        load_source_identity(blank, detector, mobilefacenet)
    not_image = tmp_path / "me.jpg"
    not_image.write_text("definitely not a jpeg")
    with pytest.raises(FaceError, match="not a readable image"):
        load_source_identity(not_image, detector, mobilefacenet)
    with pytest.raises(FaceError, match="does not exist"):
        load_source_identity(tmp_path / "missing.jpg", detector, mobilefacenet)


def test_standin_recognizer_uses_arcface_settings(sessions, standin_dir, newton, newton_face):
    rec = Recognizer(standin_dir / "w600k_standin.onnx", sessions)
    assert rec.dim == 512 and (rec.mean, rec.std) == (127.5, 127.5)
    assert rec.embed(newton, newton_face).shape == (512,)


def test_non_recognizer_is_refused(sessions, models_dir):
    with pytest.raises(ModelError, match="is not a face recognizer"):
        Recognizer(models_dir / "scrfd_500m_kps.onnx", sessions)
