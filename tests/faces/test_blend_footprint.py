"""Blender.paste at the face's own size (`footprint_sized`, the default) against the full-size paste.

A crop much finer than its footprint in the frame is area-halved before its warp, and a small face
is colour-corrected on its paste rectangle. What must hold, on real photos with the real detector
and the stand-in swapper:

* a face the size of the one-face bench (181 px wide at 720p) is pasted as before within 2 grey
  levels (its 8-bit premultiplied cross-fade), bit for bit where the mask is 0 or 1;
* small faces come out closer to an anti-aliased ideal paste, and an identity swap closer to the
  camera frame itself, than with the full-size paste (benchmarks/paste_quality.py has the table);
* every face of the group at 720p still shows the swap (the same swapped face as the full-size
  paste, far from the original face), colour correction still brings a small face's colour back,
  the mouth mask still keeps a small face's real mouth, and a face cut by the frame edge pastes
  the same as on the full frame.
"""

from __future__ import annotations

import weakref

import cv2
import numpy as np
import pytest

from vcamd.bench.clips import fitted_frame
from vcamd.bench.pastes import face_core, footprint, ideal_paste, psnr, scaled_for_footprint
from vcamd.common.types import Face, Frame
from vcamd.faces.align import estimate_affine, warp
from vcamd.faces.blend import PREPARED_PIXELS, SHRINK_RATIO, Blender
from vcamd.faces.masks import feather_mask
from vcamd.faces.swap import Swapper


@pytest.fixture(scope="module")
def swap(standins, sessions):  # type: ignore[no-untyped-def]
    """The light stand-in swapper on a list of (frame, face): swapped 128² crops."""
    swapper = Swapper(standins.swapper, sessions)
    latent = swapper.latent(np.random.default_rng(0).standard_normal(512).astype(np.float32))

    def run(frame: Frame, faces: list[Face]) -> list[Frame]:
        return swapper.swap([swapper.align(frame, face)[0] for face in faces], latent)

    return run


@pytest.fixture(scope="module")
def group(detector, solvay):  # type: ignore[no-untyped-def]
    """The Solvay photo as the groups bench shows it (fitted into 720p) and the faces found in it."""
    frame = fitted_frame(solvay, (1280, 720))
    faces = detector.detect(frame)
    assert len(faces) >= 25
    return frame, faces


def _tinted(crop: Frame, bgr_shift: tuple[int, int, int]) -> Frame:
    return np.clip(crop.astype(np.int16) + np.array(bgr_shift, np.int16), 0, 255).astype(np.uint8)


def test_a_one_face_paste_at_720p_is_the_float_blend_within_two_levels(detector, newton, newton_face, swap) -> None:  # type: ignore[no-untyped-def]
    """A face larger than its crop is cross-faded premultiplied, with 8-bit weights (`blend_premultiplied`):
    the full-size paste's float blend within 2 grey levels, and bit for bit where the mask is 0
    (the frame) or 1 (the swapped face)."""
    scale = 181 / newton_face.width
    photo = cv2.resize(newton, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    frame = np.full((720, 1280, 3), 110, np.uint8)
    photo = photo[:670, :980]
    frame[50 : 50 + photo.shape[0], 300 : 300 + photo.shape[1]] = photo
    (face,) = detector.detect(frame)
    (swapped,) = swap(frame, [face])
    m = estimate_affine(face.kps, 128)
    assert footprint(m, 128) > 128  # the crop is upsampled: nothing to halve
    weight = cv2.warpAffine(feather_mask(128), m, (1280, 720), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
    # Where no crop pixel around has a weight that moves a pixel by half a level (1/510), in
    # either blend: the crop's margin, and past it the frame.
    frame_only, face_only = weight < 1 / 4096, weight > 1 - 1 / 4096
    assert frame_only.sum() > 0 and face_only.sum() > 10_000
    for mouth_mask in (False, True):
        for color_correction in (False, True):
            reference = frame.copy()
            Blender(128, mouth_mask, color_correction, footprint_sized=False).paste(reference, swapped, m, mouth_kps=face.kps)
            blender = Blender(128, mouth_mask, color_correction)
            for _ in range(2):  # the second paste reuses the crop's kept LAB and statistics
                ours = frame.copy()
                blender.paste(ours, swapped, m, mouth_kps=face.kps)
                case = (mouth_mask, color_correction)
                diff = np.abs(ours.astype(np.int16) - reference).max(axis=2)
                assert np.array_equal(ours[frame_only], frame[frame_only]), case
                if not mouth_mask:
                    assert diff.max() <= 2, case
                    assert np.array_equal(ours[face_only], reference[face_only]), case
                else:
                    # The mouth mask's weight falls steeply at the ellipse's edge: there the
                    # premultiplied colour interpolates differently from colour and weight apart
                    # (measured: ~30 pixels of a 300² face by 3–5 levels).
                    assert (diff > 2).sum() <= 100 and diff.max() <= 8, case


@pytest.mark.parametrize("pixels", [20, 32, 40, 48])
def test_small_faces_come_closer_to_the_ideal_than_the_full_size_paste(pixels, newton, newton_face, solvay, solvay_largest_faces, swap) -> None:  # type: ignore[no-untyped-def]
    gains = []
    for image, face in [(newton, newton_face)] + [(solvay, f) for f in solvay_largest_faces]:
        crop = warp(image, estimate_affine(face.kps, 128), 128)  # sharp: taken from the full-size photo
        (swapped,) = swap(image, [face])
        small, small_face = scaled_for_footprint(image, face, pixels)
        m = estimate_affine(small_face.kps, 128)
        assert np.sqrt(abs(np.linalg.det(m[:, :2]))) >= SHRINK_RATIO  # these crops are halved
        core = face_core(small.shape, m, 128)
        # A swapped face against the anti-aliased ideal; the face's own crop against the frame itself.
        for content, ideal in ((swapped, ideal_paste(small, swapped, m)), (crop, small)):
            scores = []
            for footprint_sized in (False, True):
                out = small.copy()
                Blender(128, color_correction=False, footprint_sized=footprint_sized).paste(out, content, m)
                scores.append(psnr(out, ideal, core))
            gains.append(scores[1] - scores[0])
    print(f"footprint {pixels} px: PSNR gains over the full-size paste {np.round(gains, 1)} dB")
    # Never more than a quarter dB worse (measured: −0.2 dB at worst, where a 48-px footprint is just
    # halved), and better on average.
    assert min(gains) >= -0.25
    assert np.mean(gains) >= 2.0


def test_every_face_of_the_group_still_shows_the_swap(group, swap) -> None:  # type: ignore[no-untyped-def]
    frame, faces = group
    crops = swap(frame, faces)
    outputs = []
    for footprint_sized in (False, True):
        out = frame.copy()
        blender = Blender(128, footprint_sized=footprint_sized)
        for face, crop in zip(faces, crops):  # one after the other into one frame, as the live composite
            blender.paste(out, crop, estimate_affine(face.kps, 128))
        outputs.append(out)
    full, ours = outputs
    halved = [face for face in faces if np.sqrt(abs(np.linalg.det(estimate_affine(face.kps, 128)[:, :2]))) >= SHRINK_RATIO]
    assert len(halved) >= 20  # at 720p most of the group's crops are halved before their warp
    for face in faces:
        m = estimate_affine(face.kps, 128)
        core = face_core(frame.shape, m, 128, 0.9)
        # The same swapped face as the full-size paste shows, not the original face.
        assert psnr(ours, full, core) > 28.0
        assert psnr(frame, full, core) < 20.0
        change = np.abs(ours[core].astype(np.float64) - frame[core]).mean()
        assert change >= 0.9 * np.abs(full[core].astype(np.float64) - frame[core]).mean()


def test_colour_correction_brings_a_small_colour_face_back(detector, assets) -> None:  # type: ignore[no-untyped-def]
    crowd = cv2.imread(str(assets / "images" / "crowd_selfie.jpg"))
    faces = [f for f in detector.detect(crowd, 1280) if 24 <= footprint(estimate_affine(f.kps, 128), 128) <= 64]
    assert len(faces) >= 20
    lab = cv2.cvtColor(crowd, cv2.COLOR_BGR2LAB).astype(np.float32)
    errors: dict[bool, list[float]] = {False: [], True: []}
    for face in faces[:: max(1, len(faces) // 20)]:
        m = estimate_affine(face.kps, 128)
        off_colour = _tinted(warp(crowd, m, 128), (45, -25, -30))  # a swap that came out too blue
        core = face_core(crowd.shape, m, 128, 0.9)
        for correct in (False, True):
            out = crowd.copy()
            Blender(128, color_correction=correct).paste(out, off_colour, m)
            pasted = cv2.cvtColor(out, cv2.COLOR_BGR2LAB).astype(np.float32)
            errors[correct].append(float(np.abs(pasted[core].mean(axis=0) - lab[core].mean(axis=0)).max()))
    print(f"mean LAB error of small faces: uncorrected {np.median(errors[False]):.1f}, corrected {np.median(errors[True]):.1f}")
    assert min(errors[False]) > 15  # uncorrected: the tint shows
    assert np.median(errors[True]) < 2.0 and max(errors[True]) < 4.0  # corrected: back within a few levels


def test_kept_crops_follow_the_crop_not_its_memory(group, swap) -> None:  # type: ignore[no-untyped-def]
    frame, faces = group
    face = faces[0]
    m = estimate_affine(face.kps, 128)
    blender = Blender(128)
    first, second = swap(frame, [face])[0], None
    blender.paste(frame.copy(), first, m)
    del first  # a new crop may now get the old one's address: what was kept must not be reused
    for shift in (0, 40, 80):
        second = _tinted(swap(frame, [face])[0], (shift, 0, -shift))
        ours, fresh = frame.copy(), frame.copy()
        blender.paste(ours, second, m)
        Blender(128).paste(fresh, second, m)
        assert np.array_equal(ours, fresh)


def test_a_small_face_cut_by_the_frame_edge_pastes_as_on_the_full_frame(group, swap) -> None:  # type: ignore[no-untyped-def]
    frame, faces = group
    face = faces[len(faces) // 2]
    (swapped,) = swap(frame, [face])
    blender = Blender(128, color_correction=False)
    m = estimate_affine(face.kps, 128)
    full = frame.copy()
    blender.paste(full, swapped, m)
    cut_x = int(face.kps[2, 0])  # through the nose: the left half of the face is off-frame
    cut = np.ascontiguousarray(frame[:, cut_x:])
    m_cut = m.copy()
    m_cut[:, 2] += m[:, :2] @ np.float32([cut_x, 0])
    region = blender.paste(cut, swapped, m_cut)
    assert region is not None and region.x0 == 0
    assert np.abs(cut.astype(np.int16) - full[:, cut_x:]).max() <= 1  # sub-pixel rounding of the shifted warp only
    # Colour-corrected, the statistics come from the part inside the frame: had pixels outside
    # it counted, the original would look darker and the face would be darkened.
    corrected = cut.copy()
    Blender(128).paste(corrected, _tinted(warp(cut, m_cut, 128), (30, 30, 30)), m_cut)
    visible = face_core(cut.shape, m_cut, 128, 0.9)
    assert visible.sum() >= 50
    assert abs(float(corrected[visible].mean()) - float(cut[visible].mean())) < 6


def test_the_mouth_mask_keeps_a_small_face_s_real_mouth(group, swap) -> None:  # type: ignore[no-untyped-def]
    frame, faces = group
    kept = 0
    for face in faces:
        (swapped,) = swap(frame, [face])
        m = estimate_affine(face.kps, 128)
        mouth_centre = face.kps[3:5].mean(axis=0)
        mouth_width = float(np.linalg.norm(face.kps[4] - face.kps[3]))
        yy, xx = np.mgrid[0 : frame.shape[0], 0 : frame.shape[1]]
        lips = (xx - mouth_centre[0]) ** 2 + (yy - mouth_centre[1]) ** 2 <= (0.3 * mouth_width) ** 2
        with_mouth, without = frame.copy(), frame.copy()
        Blender(128, mouth_mask=True).paste(with_mouth, swapped, m, mouth_kps=face.kps)
        Blender(128, mouth_mask=False).paste(without, swapped, m)
        assert lips.sum() >= 5
        assert np.array_equal(with_mouth[lips], frame[lips]), "the real mouth must show, unchanged"
        kept += int((without[lips] != frame[lips]).any())
    assert kept == len(faces)  # without the mouth mask the swap covers every mouth


def test_kept_crops_stay_within_their_budget(newton, newton_face) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    blender = Blender(128)
    for side, template in ((128, "arcface"), (512, "ffhq")):
        m = estimate_affine(newton_face.kps, side, template)  # type: ignore[arg-type]
        crops = [rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in range(PREPARED_PIXELS // side**2 + 3)]
        for crop in crops:  # all alive (a swap book's): the budget, not their going, bounds what is kept
            ours, fresh = newton.copy(), newton.copy()
            blender.paste(ours, crop, m)
            Blender(128).paste(fresh, crop, m)
            assert np.array_equal(ours, fresh)
        kept = blender._prepared.values()  # what the Blender holds on to
        assert sum(prepared.side**2 for prepared in kept) <= PREPARED_PIXELS
        assert len(kept) >= PREPARED_PIXELS // side**2 - 1


def test_what_was_derived_from_a_crop_goes_with_it(newton, newton_face) -> None:  # type: ignore[no-untyped-def]
    """A swap replaced (its crop dropped by the swap book) leaves nothing behind at the next paste:
    before, a crop pasted whole was held by its own entry until 64 newer crops pushed it out."""
    rng = np.random.default_rng(6)
    blender = Blender(128)
    m = estimate_affine(newton_face.kps, 128)  # type: ignore[arg-type]
    crop = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)
    blender.paste(newton.copy(), crop, m)
    gone = weakref.ref(crop)
    del crop
    assert gone() is None  # the Blender did not keep it alive
    newer = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)
    out, fresh = newton.copy(), newton.copy()
    blender.paste(out, newer, m)
    Blender(128).paste(fresh, newer, m)
    assert np.array_equal(out, fresh)
    assert len(blender._prepared) == 1 and blender._prepared_pixels == next(iter(blender._prepared.values())).side ** 2


def test_a_large_face_s_colour_measured_on_a_quarter_of_its_crop_corrects_as_the_whole_crop_does(detector, newton, swap) -> None:  # type: ignore[no-untyped-def]
    """A face at least its crop's size is colour-corrected in crop space, its own statistics taken
    on every other pixel of every other row of its crop (a quarter of the pixels): the same
    correction as from the whole crop (`original_crop` given) within 4 levels and under half a level on average
    (measured: 4 and 0.03), for the swap and for a swap that came out too blue (the face's own
    crop, tinted), on the one-face bench's face at 720p and 1080p."""
    for size in ((1280, 720), (1920, 1080)):
        frame = fitted_frame(newton, size)
        (face,) = detector.detect(frame)
        (swapped,) = swap(frame, [face])
        m = estimate_affine(face.kps, 128)
        assert footprint(m, 128) > 128
        core = face_core(frame.shape, m, 128)
        for crop in (swapped, _tinted(warp(frame, m, 128), (45, -25, -30))):
            whole, half = frame.copy(), frame.copy()
            Blender(128).paste(whole, crop, m, original_crop=warp(frame, m, 128))
            Blender(128).paste(half, crop, m)
            diff = np.abs(half.astype(np.int16) - whole)[core]
            assert diff.max() <= 4 and diff.mean() < 0.5, (size, int(diff.max()), float(diff.mean()))
            assert not np.array_equal(half[core], frame[core])
