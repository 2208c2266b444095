"""Alignment geometry: templates, similarity estimation, inverse, and agreement with insightface."""

from __future__ import annotations

import numpy as np
import pytest
from insightface.utils import face_align

from vcamd.common.types import Face
from vcamd.faces.align import (
    ARCFACE_112,
    FFHQ_512,
    estimate_affine,
    for_warps,
    invert_affine,
    similarity_transform,
    template_points,
    transform_points,
    warp,
)

pytestmark = pytest.mark.filterwarnings("ignore:`estimate` is deprecated:FutureWarning")  # inside insightface


def test_template_maps_onto_itself_with_identity():
    for size, template in ((112, "arcface"), (128, "arcface"), (512, "ffhq"), (224, "arcface")):
        pts = template_points(size, template)
        m = estimate_affine(pts, size, template)
        np.testing.assert_allclose(m, [[1, 0, 0], [0, 1, 0]], atol=1e-4)


def test_template_sizes_follow_insightface_rule():
    np.testing.assert_allclose(template_points(112), ARCFACE_112)
    np.testing.assert_allclose(template_points(224), ARCFACE_112 * 2, rtol=1e-6)
    # inswapper's 128 crop: the 112 template shifted 8 px right, not scaled
    np.testing.assert_allclose(template_points(128), ARCFACE_112 + [8.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(template_points(256, "ffhq"), FFHQ_512 / 2, rtol=1e-6)
    with pytest.raises(ValueError, match="multiple of 112 or 128"):
        template_points(100)


def test_recovers_a_known_similarity():
    rng = np.random.default_rng(3)
    for _ in range(20):
        angle, scale = rng.uniform(-np.pi, np.pi), rng.uniform(0.2, 5.0)
        tx, ty = rng.uniform(-500, 500, size=2)
        true = np.array(
            [[scale * np.cos(angle), -scale * np.sin(angle), tx], [scale * np.sin(angle), scale * np.cos(angle), ty]],
            dtype=np.float32,
        )
        src = rng.uniform(0, 1000, size=(5, 2)).astype(np.float32)
        dst = transform_points(src, true)
        np.testing.assert_allclose(similarity_transform(src, dst), true, rtol=1e-3, atol=1e-2)


def test_real_keypoints_land_on_template(newton_face):
    for size, template in ((112, "arcface"), (128, "arcface"), (512, "ffhq")):
        m = estimate_affine(newton_face.kps, size, template)
        mapped = transform_points(newton_face.kps, m)
        # a real face is not exactly the template; the residual stays a few % of the crop
        residual = np.linalg.norm(mapped - template_points(size, template), axis=1)
        assert residual.max() < 0.06 * size, residual
        # eyes level and on the correct sides after alignment
        assert mapped[0, 0] < mapped[2, 0] < mapped[1, 0]
        assert abs(mapped[0, 1] - mapped[1, 1]) < 0.03 * size


def test_round_trip(newton_face):
    m = estimate_affine(newton_face.kps, 128)
    back = transform_points(transform_points(newton_face.kps, m), invert_affine(m))
    np.testing.assert_allclose(back, newton_face.kps, atol=1e-2)
    np.testing.assert_allclose(invert_affine(invert_affine(m)), m, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("size, fn", [(112, face_align.norm_crop), (128, face_align.norm_crop2)])
def test_matches_insightface(newton, newton_face, size, fn):
    ours_m = estimate_affine(newton_face.kps, size, "arcface")
    ours = warp(newton, ours_m, size)
    if fn is face_align.norm_crop2:
        theirs, theirs_m = fn(newton, newton_face.kps, size)
        np.testing.assert_allclose(ours_m, theirs_m, rtol=1e-4, atol=1e-2)
    else:
        theirs = fn(newton, newton_face.kps, size)
    diff = np.abs(ours.astype(int) - theirs.astype(int))
    assert diff.mean() < 0.5 and np.percentile(diff, 99) <= 3


def test_warp_reads_only_the_face(newton, newton_face):
    crop = warp(newton, estimate_affine(newton_face.kps, 512, "ffhq"), 512)
    assert crop.shape == (512, 512, 3) and crop.dtype == np.uint8
    # the face fills the crop: the centre is far from the black border value
    assert crop[200:380, 180:340].mean() > 40


def test_bad_keypoints_shape():
    with pytest.raises(ValueError, match="5×2"):
        estimate_affine(np.zeros((4, 2)), 112)


def test_closed_form_equals_umeyama_on_noisy_and_mirrored_points():
    """The 2-D closed form gives skimage's (Umeyama's) estimate, also where no similarity fits
    well: noisy points, and mirrored ones (where Umeyama must refuse the reflection)."""
    skimage_transform = pytest.importorskip("skimage.transform")
    rng = np.random.default_rng(11)
    for i in range(40):
        src = rng.uniform(0, 400, size=(5, 2))
        dst = src @ rng.normal(size=(2, 2)) + rng.normal(scale=20.0, size=(5, 2))
        if i % 2:
            dst[:, 0] = -dst[:, 0]  # a mirror image
        reference = skimage_transform.SimilarityTransform()
        assert reference.estimate(src, dst)
        np.testing.assert_allclose(similarity_transform(src, dst), reference.params[:2], rtol=1e-4, atol=1e-3)


def test_crops_cut_from_the_4_channel_copy_are_the_same(detector, solvay, newton, newton_face):
    from vcamd.bench.clips import fitted_frame

    group = fitted_frame(solvay, (1280, 720))
    faces = detector.detect(group)
    source = for_warps(group, len(faces), 128)
    assert source.shape == (720, 1280, 4)  # 29 crops: the conversion pays
    for face in faces[:: max(1, len(faces) // 8)] + [Face(faces[0].box, 1.0, faces[0].kps - [60, 40])]:  # the last partly outside
        for size, template in ((128, "arcface"), (512, "ffhq")):
            m = estimate_affine(face.kps, size, template)  # type: ignore[arg-type]
            assert np.array_equal(warp(source, m, size), warp(group, m, size))
    assert for_warps(newton, 1, 128) is newton  # one crop: converting would cost what it saves
