"""Our paste-back against insightface's reference paste (`INSwapper.get(..., paste_back=True)`).

Both pastes get the same swapper output and the same M: we call the reference with
paste_back=False to obtain (crop, M) and hand exactly those to `Blender.paste` (colour correction
off — the reference has none). Then three measurements, each with an ideal that is not defined by
either method's mask:

1. Identity round trip. With a swap model whose output is its input, the ideal composite is the
   original frame itself, pixel for pixel. PSNR against it over the paste rectangle measures
   everything the paste damages (resampling, truncation, mask artefacts). Higher is better.
2. Face core. Where the face is (the 5-keypoint template hull, enlarged 1.35×), any paste must show
   the swapped face. The ideal there is the swapper's crop warped into the frame with the same
   inverse affine (no mask). PSNR on the core. Higher is better.
3. Seam. A seamless composite R = F + α(S − F) has no edge that is not in F or S. Excess gradient
   max(0, |∇R| − max(|∇F|, |∇S|)) is the edge the paste itself creates (a hard mask border makes
   it ≈ |S − F| at the border). Mean and 99.9th percentile over the paste rectangle. Lower is better.

We claim "at least as good" on each, on four real faces (Newton, three from the 1927 Solvay photo).
"""

from __future__ import annotations

import contextlib
import io

import cv2
import numpy as np
import pytest

from vcamd.common.types import Face, Frame
from vcamd.faces.align import template_points
from vcamd.faces.blend import Blender


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    err = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return 10 * np.log10(255.0**2 / max(err, 1e-12))


def _grad(image: np.ndarray) -> np.ndarray:
    x = image.astype(np.float32)
    gx = np.zeros_like(x)
    gy = np.zeros_like(x)
    gx[:, :-1] = x[:, 1:] - x[:, :-1]
    gy[:-1] = x[1:] - x[:-1]
    return np.sqrt(gx**2 + gy**2).max(axis=2)


def _reference(model_path: object) -> object:
    import onnxruntime
    from insightface.model_zoo.inswapper import INSwapper

    session = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    with contextlib.redirect_stdout(io.StringIO()):  # INSwapper prints its input shape
        return INSwapper(str(model_path), session=session)


def _faces(newton: Frame, newton_face: Face, solvay: Frame, solvay_largest_faces: list[Face]) -> list[tuple[str, Frame, Face]]:
    return [("newton", newton, newton_face)] + [(f"solvay{i}", solvay, face) for i, face in enumerate(solvay_largest_faces)]


@pytest.fixture(scope="module")
def insightface_faces() -> tuple[type, object]:
    from insightface.app.common import Face as InsightFace

    source = InsightFace(embedding=np.random.default_rng(0).standard_normal(512).astype(np.float32))
    return InsightFace, source


def test_identity_round_trip_loses_less_than_the_reference(standins, newton, newton_face, solvay, solvay_largest_faces, insightface_faces) -> None:  # type: ignore[no-untyped-def]
    reference = _reference(standins.identity_swapper)
    InsightFace, source = insightface_faces
    for name, frame, face in _faces(newton, newton_face, solvay, solvay_largest_faces):
        target = InsightFace(kps=face.kps)
        crop, m = reference.get(frame, target, source, paste_back=False)
        theirs = reference.get(frame, target, source, paste_back=True)
        ours = frame.copy()
        region = Blender(128, color_correction=False).paste(ours, crop, m)
        assert region is not None
        roi = (slice(region.y0, region.y1), slice(region.x0, region.x1))
        ours_psnr, theirs_psnr = _psnr(ours[roi], frame[roi]), _psnr(theirs[roi], frame[roi])
        print(f"{name}: identity round trip PSNR ours {ours_psnr:.2f} dB, reference {theirs_psnr:.2f} dB")
        assert ours_psnr >= theirs_psnr, name
        assert ours_psnr > 38, name


def test_swapped_face_core_and_seam_at_least_as_good_as_the_reference(standins, newton, newton_face, solvay, solvay_largest_faces, insightface_faces) -> None:  # type: ignore[no-untyped-def]
    reference = _reference(standins.swapper)
    InsightFace, source = insightface_faces
    points = template_points(128)
    centre = points.mean(axis=0)
    hull = np.round((points - centre) * 1.35 + centre).astype(np.int32)
    core_crop = np.zeros((128, 128), np.uint8)
    cv2.fillConvexPoly(core_crop, cv2.convexHull(hull), 1)

    for name, frame, face in _faces(newton, newton_face, solvay, solvay_largest_faces):
        target = InsightFace(kps=face.kps)
        crop, m = reference.get(frame, target, source, paste_back=False)
        theirs = reference.get(frame, target, source, paste_back=True)
        ours = frame.copy()
        region = Blender(128, color_correction=False).paste(ours, crop, m)
        assert region is not None
        height, width = frame.shape[:2]
        inverse = cv2.invertAffineTransform(m)
        ideal_swap = cv2.warpAffine(crop, inverse, (width, height), borderMode=cv2.BORDER_REPLICATE)
        core = cv2.warpAffine(core_crop, inverse, (width, height), flags=cv2.INTER_NEAREST) > 0

        ours_core, theirs_core = _psnr(ours[core], ideal_swap[core]), _psnr(theirs[core], ideal_swap[core])
        ours_worst = int(np.abs(ours[core].astype(int) - ideal_swap[core].astype(int)).max())
        # As good as the reference, or off by at most one grey level (rounding) where the
        # reference happens to be bit-exact (168 dB): invisible either way.
        assert ours_core >= theirs_core - 0.01 or ours_worst <= 1, (name, ours_core, theirs_core, ours_worst)
        assert ours_core > 45, name

        roi = (slice(region.y0, region.y1), slice(region.x0, region.x1))
        source_edges = np.maximum(_grad(frame[roi]), _grad(ideal_swap[roi]))
        ours_excess = np.maximum(0.0, _grad(ours[roi]) - source_edges)
        theirs_excess = np.maximum(0.0, _grad(theirs[roi]) - source_edges)
        print(
            f"{name}: core PSNR ours {ours_core:.1f} / ref {theirs_core:.1f} dB; seam excess gradient mean "
            f"ours {ours_excess.mean():.3f} / ref {theirs_excess.mean():.3f}, p99.9 ours "
            f"{np.percentile(ours_excess, 99.9):.1f} / ref {np.percentile(theirs_excess, 99.9):.1f}"
        )
        assert ours_excess.mean() <= theirs_excess.mean(), name
        assert np.percentile(ours_excess, 99.9) <= np.percentile(theirs_excess, 99.9), name
