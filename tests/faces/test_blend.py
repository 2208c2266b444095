"""Blender.paste on real photos: face region only, no seam, faces off the edge, mouth mask, colour."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from vcamd.common.types import Face, Frame
from vcamd.faces.align import estimate_affine, transform_points, warp
from vcamd.faces.blend import Blender
from vcamd.faces.footprint import paste_region
from vcamd.faces.masks import feather_mask


def _aligned(frame: Frame, face: Face, size: int = 128, template: str = "arcface") -> tuple[Frame, np.ndarray]:
    m = estimate_affine(face.kps, size, template)  # type: ignore[arg-type]
    return warp(frame, m, size), m


def _tinted(crop: Frame, bgr_shift: tuple[int, int, int]) -> Frame:
    return np.clip(crop.astype(np.int16) + np.array(bgr_shift, np.int16), 0, 255).astype(np.uint8)


def test_mask_is_built_once_per_size_and_fades_to_zero_at_the_crop_edge() -> None:
    blender = Blender(128)
    assert blender.mask_for(128) is blender.mask_for(128)
    mask = blender.mask_for(128)
    assert mask[64, 64] == pytest.approx(1.0, abs=1e-3)
    edge = np.concatenate([mask[0], mask[-1], mask[:, 0], mask[:, -1]])
    assert edge.max() < 0.01
    assert blender.mask_for(512).shape == (512, 512)


def test_paste_touches_only_the_face_rectangle_of_a_720p_frame(newton: Frame, newton_face: Face) -> None:
    # Embed the photo in a noisy 720p frame so that any full-frame filtering would show.
    rng = np.random.default_rng(3)
    frame = rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    oy, ox = 150, 300
    frame[oy : oy + newton.shape[0], ox : ox + newton.shape[1]] = newton
    face = Face(newton_face.box, newton_face.score, newton_face.kps + np.float32([ox, oy]))
    crop, m = _aligned(frame, face)
    swapped = 255 - crop
    before = frame.copy()

    region = Blender(128).paste(frame, swapped, m, original_crop=crop)

    assert region is not None
    inside = np.zeros(frame.shape[:2], bool)
    inside[region.y0 : region.y1, region.x0 : region.x1] = True
    assert np.array_equal(frame[~inside], before[~inside]), "a pixel outside the paste rectangle changed"
    assert (frame[inside] != before[inside]).any()
    # The rectangle is the crop footprint, a small part of the frame.
    assert region.width * region.height < 0.06 * 1280 * 720
    corners = transform_points(np.float32([[0, 0], [128, 0], [0, 128], [128, 128]]), cv2.invertAffineTransform(m))
    assert region.x0 <= corners[:, 0].min() and corners[:, 0].max() <= region.x1
    assert region.y0 <= corners[:, 1].min() and corners[:, 1].max() <= region.y1


def test_no_hard_seam_at_the_mask_border() -> None:
    # Flat grey frame, flat white crop: every step between neighbouring pixels comes from the mask.
    frame = np.full((400, 400, 3), 40, np.uint8)
    angle, scale = 17.0, 1.6  # a rotated face 1.6× larger in the frame than in the crop
    m = cv2.getRotationMatrix2D((200.0, 200.0), angle, 1.0 / scale)
    m[:, 2] = np.array([64.0, 64.0]) - m[:, :2] @ np.array([200.0, 200.0])  # frame (200, 200) → crop centre
    contrast = 215 - 40
    Blender(128, color_correction=False).paste(frame, np.full((128, 128, 3), 215, np.uint8), m)
    gray = frame[:, :, 0].astype(np.int32)
    step = max(np.abs(np.diff(gray, axis=0)).max(), np.abs(np.diff(gray, axis=1)).max())
    # A hard paste would jump by the full contrast (175) in one pixel. The feather (σ = 4.3 crop px
    # = 6.8 frame px) allows at most contrast / (σ·√(2π)) ≈ 10 per pixel, plus rounding.
    assert step <= contrast / (4.27 * scale * np.sqrt(2 * np.pi)) + 2
    assert gray[200, 200] == 215  # the middle is fully pasted


def test_face_partly_outside_the_frame_matches_the_same_paste_on_the_full_frame(newton: Frame, newton_face: Face) -> None:
    crop, m = _aligned(newton, newton_face)
    swapped = _tinted(255 - crop, (0, 20, 0))
    blender = Blender(128, color_correction=False)
    full = newton.copy()
    blender.paste(full, swapped, m)

    # Cut the frame through the middle of the face: the left half of the face is off-frame.
    cut_x = int(newton_face.kps[2, 0])
    cut = np.ascontiguousarray(newton[:, cut_x:])
    m_cut = m.copy()
    m_cut[:, 2] += m[:, :2] @ np.float32([cut_x, 0])  # frame → cut frame is a translation
    region = blender.paste(cut, swapped, m_cut)

    assert region is not None and region.x0 == 0
    diff = np.abs(cut.astype(np.int16) - full[:, cut_x:].astype(np.int16))
    assert diff.max() <= 1  # sub-pixel rounding of the shifted warp only


def test_face_wholly_outside_the_frame_is_a_no_op() -> None:
    frame = np.zeros((100, 100, 3), np.uint8)
    m = np.float32([[1, 0, 500], [0, 1, 500]])  # crop (0..128) ← frame (-500..-372): off-frame
    assert Blender().paste(frame, np.full((128, 128, 3), 255, np.uint8), m) is None
    assert not frame.any()
    assert paste_region(frame.shape, (128, 128), m) is None


def test_colour_correction_moves_the_face_colour_toward_the_original(newton: Frame, newton_face: Face) -> None:
    crop, m = _aligned(newton, newton_face)
    off_colour = _tinted(crop, (45, -25, -30))  # a swap that came out too blue
    core = feather_mask(128) > 0.99

    results = {}
    for correct in (False, True):
        frame = newton.copy()
        Blender(128, color_correction=correct).paste(frame, off_colour, m, original_crop=crop)
        pasted = warp(frame, m, 128)
        results[correct] = np.abs(pasted[core].astype(np.float32).mean(axis=0) - crop[core].astype(np.float32).mean(axis=0))

    assert results[False].max() > 20  # uncorrected: the tint shows
    assert results[True].max() < 3  # corrected: mean colour back within a few levels
    assert (results[True] < results[False]).all()


def test_colour_correction_ignores_the_black_fill_of_a_face_cut_by_the_frame_edge(newton: Frame, newton_face: Face) -> None:
    cut_x = int(newton_face.kps[2, 0])
    cut = np.ascontiguousarray(newton[:, cut_x:])
    m = estimate_affine(newton_face.kps - np.float32([cut_x, 0]), 128)
    crop = warp(cut, m, 128)  # the left half is black fill
    frame = cut.copy()
    Blender(128, color_correction=True).paste(frame, _tinted(crop, (30, 30, 30)), m, original_crop=crop)
    inside = warp(frame, m, 128)[60:100, 70:100].astype(np.float32)  # on-frame part of the face
    original = crop[60:100, 70:100].astype(np.float32)
    # Had the fill counted, the original's mean would look far darker and the face would be darkened.
    assert abs(inside.mean() - original.mean()) < 6


def test_mouth_mask_keeps_the_real_mouth(newton: Frame, newton_face: Face) -> None:
    crop, m = _aligned(newton, newton_face)
    swapped = 255 - crop
    mouth_centre = newton_face.kps[3:5].mean(axis=0)
    mouth_width = float(np.linalg.norm(newton_face.kps[4] - newton_face.kps[3]))
    yy, xx = np.mgrid[0 : newton.shape[0], 0 : newton.shape[1]]
    lips = (xx - mouth_centre[0]) ** 2 + (yy - mouth_centre[1]) ** 2 <= (0.3 * mouth_width) ** 2
    eyes = np.zeros_like(lips)
    for eye in newton_face.kps[:2]:
        eyes |= (xx - eye[0]) ** 2 + (yy - eye[1]) ** 2 <= 16

    with_mouth = newton.copy()
    Blender(128, mouth_mask=True, color_correction=False).paste(with_mouth, swapped, m, mouth_kps=newton_face.kps)
    without = newton.copy()
    Blender(128, mouth_mask=False, color_correction=False).paste(without, swapped, m)

    assert np.array_equal(with_mouth[lips], newton[lips]), "the real mouth must show, unchanged"
    assert (without[lips] != newton[lips]).mean() > 0.9
    assert np.array_equal(with_mouth[eyes], without[eyes])  # the rest of the face is still swapped


def test_mouth_mask_without_keypoints_is_a_programming_error(newton: Frame, newton_face: Face) -> None:
    crop, m = _aligned(newton, newton_face)
    with pytest.raises(ValueError, match="mouth_kps"):
        Blender(128, mouth_mask=True).paste(newton.copy(), crop, m)


def test_a_512_ffhq_crop_pastes_back_with_its_own_matrix(newton: Frame, newton_face: Face) -> None:
    crop, m = _aligned(newton, newton_face, 512, "ffhq")
    frame = newton.copy()
    region = Blender(128, color_correction=False).paste(frame, crop, m)
    assert region is not None
    roi = (slice(region.y0, region.y1), slice(region.x0, region.x1))
    err = frame[roi].astype(np.float64) - newton[roi].astype(np.float64)
    psnr = 10 * np.log10(255**2 / max(1e-9, (err**2).mean()))
    assert psnr > 38, f"pasting the frame's own 512 crop back must leave it nearly unchanged, PSNR {psnr:.1f} dB"
    # and a changed 512 crop does show
    Blender(128, color_correction=False).paste(frame, 255 - crop, m)
    assert np.abs(frame[roi].astype(np.int16) - newton[roi]).mean() > 20


def test_opacity_scales_the_change(newton: Frame, newton_face: Face) -> None:
    crop, m = _aligned(newton, newton_face)
    changes = []
    for opacity in (0.0, 0.5, 1.0):
        frame = newton.copy()
        Blender(128, color_correction=False).paste(frame, 255 - crop, m, opacity=opacity)
        changes.append(np.abs(frame.astype(np.int16) - newton).sum())
    assert changes[0] == 0
    assert changes[1] == pytest.approx(changes[2] / 2, rel=0.1)
