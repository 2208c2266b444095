"""Tracking on a moving real face: same keypoints as a full detection, fewer full detections, cheaper."""

from __future__ import annotations

import time

import cv2
import numpy as np

from vcamd.faces.track import FaceTracker


def _shifted(image: np.ndarray, dx: float, dy: float, scale: float = 1.0) -> np.ndarray:
    h, w = image.shape[:2]
    m = np.array([[scale, 0, dx], [0, scale, dy]], dtype=np.float32)
    return cv2.warpAffine(image, m, (w, h), borderMode=cv2.BORDER_REPLICATE)


def test_tracked_keypoints_match_full_detection(detectors, newton):
    detector = detectors["scrfd_2.5g_kps.onnx"]
    tracker = FaceTracker(detector, track_size=192, full_every=10)
    track_ms, full_ms = [], []
    for i in range(12):
        frame = _shifted(newton, dx=-3.0 * i, dy=2.0 * i, scale=1.0 + 0.01 * i)
        t0 = time.perf_counter()
        tracked = tracker.update(frame, i)
        t1 = time.perf_counter()
        full = detector.detect(frame)
        t2 = time.perf_counter()
        (full_ms if i in (0, 10) else track_ms).append((t1 - t0) * 1000)
        assert len(tracked) == len(full) == 1
        # the two runs see the face at different scales, so they differ by the detector's own jitter
        # (~1.5 % of the face width on average here): mean within 3 %, no keypoint beyond 5 %
        error = np.linalg.norm(tracked[0].kps - full[0].kps, axis=1) / full[0].width
        assert error.mean() < 0.03 and error.max() < 0.05, f"frame {i}: keypoints off by {error} face widths"
        if i not in (0, 10):
            full_ms.append((t2 - t1) * 1000)
    # frames 0 and 10 were full detections, the rest crops around the face
    assert tracker.full_detections == 2
    print(f"\ntracking update median {np.median(track_ms):.1f} ms vs full detection {np.median(full_ms):.1f} ms")


def test_lost_face_triggers_full_detection(detector, newton):
    tracker = FaceTracker(detector, full_every=100)
    assert len(tracker.update(newton, 0)) == 1
    # the face jumps far outside its tracking crop: the tracker must look at the whole frame again
    jumped = _shifted(newton, dx=-300, dy=0)
    faces = tracker.update(jumped, 1)
    assert tracker.full_detections == 2 and len(faces) == 1
    expected = detector.detect(jumped)[0]
    assert np.abs(faces[0].kps - expected.kps).max() < 1.0


def test_empty_frame_then_face_again(detector, newton):
    tracker = FaceTracker(detector, full_every=100)
    blank = np.zeros_like(newton)
    assert tracker.update(blank, 0) == []
    assert len(tracker.update(newton, 1)) == 1  # no tracks: a full detection every frame until found
    assert tracker.full_detections == 2
    assert len(tracker.update(newton, 2)) == 1
    assert tracker.full_detections == 2  # now tracked


def test_tracks_several_faces(detector, solvay, solvay_faces):
    # 29 crops at 96² cost 0.65 of one 640² detection, so they are tracked
    tracker = FaceTracker(detector, track_size=96, full_every=10)
    moved = _shifted(solvay, dx=4, dy=-3)
    tracker.update(solvay, 0)
    faces = tracker.update(moved, 1)
    assert tracker.full_detections == 1
    assert len(faces) == len(solvay_faces) == 29
    shifts = np.array([f.kps.mean(axis=0) - g.kps.mean(axis=0) for f, g in zip(faces, solvay_faces)])
    np.testing.assert_allclose(np.median(shifts, axis=0), [4, -3], atol=1.5)


def test_many_faces_use_full_detection(detector, solvay):
    # 29 crops at 192² would cost 2.6 full detections: the tracker detects the whole frame instead
    tracker = FaceTracker(detector, track_size=192, full_every=10)
    tracker.update(solvay, 0)
    assert len(tracker.update(solvay, 1)) == 29
    assert tracker.full_detections == 2


def _dot_frame(x: float, y: float, shape=(720, 1280)) -> np.ndarray:
    """A grey frame with a soft bright dot centred at (x, y) (sub-pixel)."""
    ys, xs = np.mgrid[: shape[0], : shape[1]].astype(np.float32)
    dot = 200.0 * np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * 6.0**2))
    return np.repeat((30 + dot).astype(np.uint8)[:, :, None], 3, axis=2)


def _centroid(patch: np.ndarray) -> tuple[float, float]:
    w = np.clip(patch[:, :, 0].astype(np.float64) - 30, 0, None)
    ys, xs = np.mgrid[: patch.shape[0], : patch.shape[1]]
    return float((w * xs).sum() / w.sum()), float((w * ys).sum() / w.sum())


import pytest  # noqa: E402

from vcamd.faces.track import crop_around  # noqa: E402
from vcamd.types import Face  # noqa: E402


@pytest.mark.parametrize(
    "box, dot",
    [
        ((600.3, 300.7, 700.9, 420.2), (640.4, 350.6)),  # inside the frame: cut and resized
        ((1200.0, 10.0, 1290.0, 110.0), (1230.2, 40.7)),  # over the top-right edge: warpAffine
        ((500.0, 300.0, 540.0, 340.0), (515.5, 322.25)),  # a small face: the crop is scaled up
    ],
)
def test_crop_maps_back_to_the_frame(box, dot):
    """A point in the tracking patch maps back (TrackCrop.to_frame) to where it is in the frame."""
    frame = _dot_frame(*dot)
    face = Face(box=box, score=0.9, kps=np.zeros((5, 2), np.float32))
    patch, crop = crop_around(frame, face, 192)
    assert patch.shape == (192, 192, 3) and patch.flags.c_contiguous
    assert not np.shares_memory(patch, frame)
    px, py = _centroid(patch)
    found = crop.to_frame(Face(box=(px, py, px, py), score=1.0, kps=np.array([[px, py]] * 5, np.float32)))
    assert abs(found.box[0] - dot[0]) < 0.25 and abs(found.box[1] - dot[1]) < 0.25
    side = 2.0 * max(box[2] - box[0], box[3] - box[1])
    assert abs(192 / crop.scale - side) <= 1.0  # CROP_FACTOR × the face, to the pixel


def _dedupe_one_pair_at_a_time(faces: list[Face], threshold: float = 0.5) -> list[Face]:
    """The plain definition: keep a face (best score first) unless it overlaps a kept one by IoU > threshold."""

    def iou(a: Face, b: Face) -> float:
        iw = max(0.0, min(a.box[2], b.box[2]) - max(a.box[0], b.box[0]))
        ih = max(0.0, min(a.box[3], b.box[3]) - max(a.box[1], b.box[1]))
        union = a.area + b.area - iw * ih
        return iw * ih / union if union > 0 else 0.0

    kept: list[Face] = []
    for face in sorted(faces, key=lambda f: -f.score):
        if all(iou(face, k) <= threshold for k in kept):
            kept.append(face)
    return sorted(kept, key=lambda f: f.box[0])


def test_dedupe_keeps_the_best_of_converged_tracks(detector, solvay):
    from vcamd.faces.track import dedupe_faces

    faces = detector.detect(solvay)
    # every face twice more: nudged by 10 % of its size (same face) and with a lower score
    doubled = faces + [
        Face(box=(f.box[0] + 0.1 * f.width, f.box[1], f.box[2] + 0.1 * f.width, f.box[3]), score=f.score - 0.01, kps=f.kps)
        for f in faces
    ]
    kept = dedupe_faces(doubled)
    assert [f.box for f in kept] == [f.box for f in faces]  # the originals, left to right
    rng = np.random.default_rng(5)
    for _ in range(50):  # crowded random boxes: the same answer as the pairwise definition
        xy = rng.uniform(0, 300, size=(25, 2))
        wh = rng.uniform(5, 80, size=(25, 2))
        random_faces = [Face(box=(x, y, x + w, y + h), score=float(s), kps=np.zeros((5, 2), np.float32))
                        for (x, y), (w, h), s in zip(xy, wh, rng.uniform(0.5, 1.0, 25))]
        assert [f.box for f in dedupe_faces(random_faces)] == [f.box for f in _dedupe_one_pair_at_a_time(random_faces)]
    assert dedupe_faces([]) == [] and len(dedupe_faces(faces[:1])) == 1
