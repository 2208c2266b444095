"""SCRFD detection on real photos with both test detectors (different sizes of the same family)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vcamd.errors import ModelError
from vcamd.faces.detect import FaceDetector
from vcamd.types import Face

MODELS = ("scrfd_500m_kps.onnx", "scrfd_2.5g_kps.onnx")


def _check_landmarks(face: Face) -> None:
    x1, y1, x2, y2 = face.box
    (lx, ly), (rx, ry), (nx, ny), (mlx, mly), (mrx, mry) = face.kps
    mid_y = (y1 + y2) / 2
    for x, y in ((lx, ly), (rx, ry)):
        assert x1 <= x <= x2 and y1 <= y <= mid_y, (face.box, face.kps)  # eyes in the upper half
    assert lx < rx  # left eye (image left) first
    assert 0.2 * face.width < rx - lx < 0.7 * face.width  # a plausible eye distance
    assert lx < nx < rx and max(ly, ry) < ny  # nose between and below the eyes
    assert ny < min(mly, mry) < y2 and mlx < mrx  # mouth below the nose


@pytest.mark.parametrize("model", MODELS)
def test_newton_has_one_face_with_eyes_in_place(detectors, newton, model):
    faces = detectors[model].detect(newton)
    assert len(faces) == 1
    face = faces[0]
    assert face.score > 0.6
    assert 60 < face.width < 200 and face.kps.shape == (5, 2) and face.kps.dtype == np.float32
    _check_landmarks(face)


@pytest.mark.parametrize("model", MODELS)
def test_solvay_has_29_faces_left_to_right(detectors, solvay, model):
    faces = detectors[model].detect(solvay)
    assert len(faces) == 29
    xs = [f.box[0] for f in faces]
    assert xs == sorted(xs)
    for face in faces:
        _check_landmarks(face)


def test_both_models_agree_on_newton(detectors, newton):
    a, b = (detectors[m].detect(newton)[0] for m in MODELS)
    assert np.linalg.norm(a.kps - b.kps, axis=1).max() < 0.08 * a.width


def test_smaller_input_size_on_a_fixed_640_export(detector, newton):
    # the export fixes 640²; the detector rewrites it for other sizes (used by tracking)
    faces = detector.detect(newton, input_size=320)
    assert len(faces) == 1
    full = detector.detect(newton)[0]
    assert np.linalg.norm(faces[0].kps - full.kps, axis=1).max() < 0.08 * full.width


def test_blank_image_has_no_faces(detector):
    assert detector.detect(np.full((480, 640, 3), 127, np.uint8)) == []


def test_threshold_is_applied(sessions, models_dir, newton):
    strict = FaceDetector(models_dir / "scrfd_500m_kps.onnx", sessions, threshold=0.99)
    assert strict.detect(newton) == []


def test_non_detector_model_is_refused(sessions, standin_dir: Path):
    with pytest.raises(ModelError, match="is not an SCRFD detector") as info:
        FaceDetector(standin_dir / "w600k_standin.onnx", sessions)
    assert "w600k_standin.onnx" in str(info.value) and "[models] detector" in str(info.value)


@pytest.fixture(scope="module")
def det10g_like(tmp_path_factory, models_dir: Path) -> Path:
    """scrfd_500m re-exported the way det_10g is: dynamic H×W input and different output names."""
    import onnx

    model = onnx.load(str(models_dir / "scrfd_500m_kps.onnx"))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, name in zip(dims[2:], ("height", "width")):
        dim.ClearField("dim_value")
        dim.dim_param = name
    renames = {}
    for i, out in enumerate(model.graph.output):
        renames[out.name] = f"{('score', 'bbox', 'kps')[i // 3]}_{(8, 16, 32)[i % 3]}"
        out.name = renames[out.name]
        for dim in out.type.tensor_type.shape.dim:
            dim.ClearField("dim_value")
            dim.dim_param = "?"
    for node in model.graph.node:
        node.output[:] = [renames.get(o, o) for o in node.output]
    del model.graph.value_info[:]
    path = tmp_path_factory.mktemp("det") / "det_dynamic.onnx"
    onnx.save(model, str(path))
    return path


def test_dynamic_export_with_other_output_names(sessions, det10g_like, detector, newton, solvay):
    dynamic = FaceDetector(det10g_like, sessions)
    assert sessions.get(det10g_like).get_outputs()[0].name == "score_8"
    assert len(dynamic.detect(solvay)) == 29
    (face,) = dynamic.detect(newton)
    np.testing.assert_allclose(face.kps, detector.detect(newton)[0].kps, atol=0.5)
    (small,) = dynamic.detect(newton, input_size=320)  # one session serves every size
    assert np.linalg.norm(small.kps - face.kps, axis=1).max() < 0.08 * face.width
