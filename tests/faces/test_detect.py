"""SCRFD detection on real photos with both test detectors (different sizes of the same family)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from vcamd.common.errors import ModelError
from vcamd.common.types import Face
from vcamd.faces.detect import FaceDetector

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


def test_nan_scores_are_a_failed_run_not_no_face(sessions, models_dir, newton):
    """A session whose scores come out NaN (a broken model, an execution provider fault) raises instead of
    returning no face: NaN compares false with every threshold, and "no face here" was what the caller read —
    the live tracker took a still crowd's faces its looks "missed" for there and a failing detector's empty
    looks for "no one else". The same model with finite outputs finds Newton's face."""
    from vcamd.faces.detect import NonFiniteScores

    detector = FaceDetector(models_dir / "scrfd_500m_kps.onnx", sessions)
    assert len(detector.detect(newton)) == 1

    class NanScores:
        def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
            self.inner = inner

        def run(self, names, feeds):  # type: ignore[no-untyped-def]
            outs = self.inner.run(names, feeds)
            outs[0] = np.full_like(outs[0], np.nan)  # the first stride's scores
            return outs

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

    own = detector._session
    detector._session = lambda hw: NanScores(own(hw))  # type: ignore[method-assign]
    with pytest.raises(NonFiniteScores, match="NaN/Inf face scores"):
        detector.detect(newton)
    assert detector.own_shape_reason is None  # a failed run is not a reason to give up the rewritten shapes


def test_threshold_is_applied(sessions, models_dir, newton):
    strict = FaceDetector(models_dir / "scrfd_500m_kps.onnx", sessions, threshold=0.99)
    assert strict.detect(newton) == []


@pytest.mark.parametrize("model", MODELS)
def test_a_lower_threshold_for_one_call_adds_faces_and_keeps_every_one_the_own_keeps(detectors, assets, model):
    """The live full detection asks for the faces it is unsure of too (`[detection] cover_threshold`):
    on the crowd selfie the same faces at 0.5, to the pixel, and more below it."""
    import cv2

    crowd = cv2.imread(str(assets / "images" / "crowd_selfie.jpg"))
    detector = detectors[model]
    own = detector.detect(crowd)
    wider = detector.detect(crowd, threshold=0.3)
    assert detector.threshold == 0.5 and len(own) > 50
    assert [(f.box, f.score) for f in wider if f.score >= 0.5] == [(f.box, f.score) for f in own]
    assert len(wider) > len(own) and min(f.score for f in wider) >= 0.3
    assert [(f.box, f.score) for f in detector.detect(crowd)] == [(f.box, f.score) for f in own]  # the call left it as it was


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


# -- our pre/post-processing against insightface's SCRFD.detect -------------------------------------

def _insightface_detect(sessions, path: Path, image: np.ndarray, hw: tuple[int, int]):
    """insightface's own SCRFD.detect on a session taking (height, width) `hw`: boxes, scores, kps, left to right."""
    from insightface.model_zoo.scrfd import SCRFD

    session = sessions.get(path) if hw == (640, 640) else sessions.get_resized(path, hw)
    ref = SCRFD(model_file=None, session=session)
    ref.nms_thresh = 0.4
    det, kps = ref.detect(image, input_size=(hw[1], hw[0]), det_thresh=0.5)
    order = np.argsort(det[:, 0], kind="stable")
    return det[order, :4], det[order, 4], kps[order]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("photo", ["newton", "solvay", "crowd"])
def test_same_faces_as_insightface_at_the_same_input(detectors, sessions, models_dir, model, photo, newton, solvay, assets):
    """The decoder (threshold first, then decode; cached anchors; float32) and the letterbox give
    insightface's results exactly, on photos with 1, 29 and >100 faces."""
    import cv2

    image = {"newton": newton, "solvay": solvay}.get(photo)
    if image is None:
        image = cv2.imread(str(assets / "images" / "crowd_selfie.jpg"))
    detector = detectors[model]
    hw = detector.input_shape(image.shape[:2])
    boxes, scores, kps = _insightface_detect(sessions, models_dir / model, image, hw)
    ours = detector.detect(image)
    assert len(ours) == len(boxes) > 0
    np.testing.assert_allclose(np.array([f.box for f in ours]), boxes, atol=1e-3)
    np.testing.assert_allclose(np.array([f.score for f in ours]), scores, atol=1e-6)
    np.testing.assert_allclose(np.stack([f.kps for f in ours]), kps, atol=1e-3)


@pytest.mark.parametrize("model", MODELS)
def test_aspect_fitted_input_finds_what_the_square_letterbox_finds(detectors, sessions, models_dir, model, newton, solvay):
    """A landscape frame goes in as 640×384 (or ×480) instead of 640² with empty rows: the same
    scale, so the same faces at the same places (within 1 % of the face's width)."""
    for image, count in ((newton, 1), (solvay, 29)):
        assert detectors[model].input_shape(image.shape[:2])[0] < 640
        _, _, square_kps = _insightface_detect(sessions, models_dir / model, image, (640, 640))
        ours = detectors[model].detect(image)
        assert len(ours) == len(square_kps) == count
        for face, ref in zip(ours, square_kps):
            assert np.linalg.norm(face.kps - ref, axis=1).max() < 0.01 * face.width


def test_input_shape_follows_the_frame_aspect():
    from vcamd.faces.detect import input_shape_for

    assert input_shape_for((720, 1280), 640) == (384, 640)  # 360 rounded up to a multiple of 32
    assert input_shape_for((1080, 1920), 640) == (384, 640)
    assert input_shape_for((480, 640), 640) == (480, 640)
    assert input_shape_for((1280, 720), 640) == (640, 384)  # portrait
    assert input_shape_for((192, 192), 192) == (192, 192)  # tracking crops stay square
    assert input_shape_for((10, 4000), 320) == (32, 320)  # never below one stride


# -- an export with shapes fixed inside its graph: it runs at its own shape -------------------------

@pytest.fixture(scope="module")
def fixed_exports(tmp_path_factory, models_dir: Path) -> dict[str, Path]:
    """scrfd_2.5g_kps with its inner shapes fixed at 640² three ways (`support.scrfd_exports`)."""
    from support import scrfd_exports

    folder = tmp_path_factory.mktemp("fixed_exports")
    return {name: build(models_dir / "scrfd_2.5g_kps.onnx", folder / f"{name}.onnx")
            for name, build in scrfd_exports.BUILDERS.items()}


FIXED_VARIANTS = ("fixed_inside", "fixed_reshapes", "height_baked")


@pytest.mark.parametrize("variant", FIXED_VARIANTS)
def test_an_export_with_shapes_fixed_inside_finds_what_insightface_finds_at_its_own_shape(
        sessions, fixed_exports, variant, newton, solvay, caplog):
    """Rewritten to 640×384 such a graph cannot be created, fails, or scrambles the image; the
    detector falls back to the model's 640² (the frame letterboxed into it, as insightface runs
    it): the same faces as insightface's SCRFD on the export itself, and one warning."""
    path = fixed_exports[variant]
    detector = FaceDetector(path, sessions)
    with caplog.at_level(logging.WARNING, logger="vcamd.faces.detect"):
        for image, count in ((newton, 1), (solvay, 29), (newton, 1)):
            boxes, scores, kps = _insightface_detect(sessions, path, image, (640, 640))
            ours = detector.detect(image)
            assert len(ours) == len(boxes) == count
            np.testing.assert_allclose(np.array([f.box for f in ours]), boxes, atol=1e-3)
            np.testing.assert_allclose(np.stack([f.kps for f in ours]), kps, atol=1e-3)
    assert detector.input_shape(newton.shape[:2]) == (640, 640)
    assert detector.own_shape_reason is not None and detector.own_shape_reason.startswith("rewritten to 640×384, ")
    warnings = [r.getMessage() for r in caplog.records if path.name in r.getMessage()]
    assert len(warnings) == 1 and "runs at its own input shape 640×640 only" in warnings[0], warnings


@pytest.mark.parametrize("variant", FIXED_VARIANTS)
def test_tracking_crops_of_an_export_with_shapes_fixed_inside_find_the_face(sessions, fixed_exports, detectors, variant, newton):
    """The tracker's crops (square, 192² and 64²) go through the same fallback: the face found in
    each crop is where the fully convolutional original finds it at that crop size."""
    from vcamd.live.tracking.cropplan import TRACK_MIN_SIZE, crop_around

    original = detectors["scrfd_2.5g_kps.onnx"]
    (face,) = original.detect(newton)
    detector = FaceDetector(fixed_exports[variant], sessions)
    for size in (192, TRACK_MIN_SIZE):
        patch, _ = crop_around(newton, face, size)
        (expected,) = original.detect(patch, size)
        (found,) = detector.detect(patch, size)
        assert np.linalg.norm(found.kps - expected.kps, axis=1).max() < 0.05 * expected.width
    assert detector.own_shape_reason is not None and detector.own_shape_reason.startswith("rewritten to 192×192, ")


@pytest.mark.parametrize("model", MODELS)
def test_a_fully_convolutional_export_keeps_its_rewritten_shapes(sessions, models_dir, model, newton, solvay):
    """The check that catches the exports above does not catch the real ones: on photos with 1 and
    29 faces their rewritten shapes find the own shape's faces, and they stay rewritten."""
    detector = FaceDetector(models_dir / model, sessions)
    for image in (newton, solvay):
        detector.detect(image)
        detector.detect(image[:192, :192], 192)
    assert detector.own_shape_reason is None
    assert detector.input_shape(newton.shape[:2]) == (384, 640)
