"""The tracker's crops with an SCRFD export whose graph fixes its 640² sizes inside: the crop
re-detection falls back to the model's own shape as the full detection does, and keeps the face."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np

from vcamd.faces.detect import FaceDetector
from vcamd.inference.runtime import Sessions
from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking.full import FullDetection, FullDetector
from vcamd.live.tracking.tracker import LiveTracker


def _tracked(detector: FaceDetector, frame: np.ndarray, moved: np.ndarray):
    """The face found in `frame` at 320, then the tracker's report on `moved` from its crop alone."""
    (found,) = detector.detect(frame, 320)
    full = FullDetector(detector, LiveStats(), time.monotonic)  # not started: the crops alone are looked at
    tracker = LiveTracker(detector, full, full_every=100)
    try:
        tracker.book.take_full(FullDetection([found], frame_index=0, input_size=320))
        tracker._last_full_submit = 1
        return found, tracker.update(moved, 2, full_size=320, track_size=192, deadline_s=30.0)
    finally:
        tracker.stop()


def test_the_tracker_keeps_a_face_in_its_crop_with_an_export_that_runs_only_at_its_own_shape(tmp_path, models_dir: Path, newton):
    """The same face, at the same place, as the tracker finds with the original export."""
    from support.scrfd_exports import fixed_inside

    original = models_dir / "scrfd_2.5g_kps.onnx"
    export = fixed_inside(original, tmp_path / "third_party_scrfd.onnx")
    frame = np.full((480, 960, 3), 128, np.uint8)
    frame[60:420, 40:400] = cv2.resize(newton, (360, 360))
    moved = np.roll(frame, 12, axis=1)  # the face moved 12 px right: the crop must find it there
    sessions = Sessions(["cpu"], threads=2)
    detector = FaceDetector(export, sessions)
    (expected_found, expected), (found, report) = (_tracked(FaceDetector(original, sessions), frame, moved),
                                                  _tracked(detector, frame, moved))
    assert len(report.faces) == len(expected.faces) == 1 and not report.lost, report
    assert report.faces[0].box[0] > found.box[0] + 6  # followed the move
    width = expected.faces[0].width
    assert np.abs(found.kps - expected_found.kps).max() < 0.05 * width
    assert np.abs(report.faces[0].kps - expected.faces[0].kps).max() < 0.05 * width
    assert detector.own_shape_reason is not None and "Incompatible dimensions" in detector.own_shape_reason
