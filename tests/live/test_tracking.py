"""Which faces the tracker keeps: one face per place when tracks converge, and a face lost among
several looked for everywhere at once."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking.facebook import dedupe_faces
from vcamd.live.tracking.full import FullDetection, FullDetector
from vcamd.live.tracking.tracker import LiveTracker
from vcamd.types import Face


@pytest.fixture(scope="module")
def detector(assets: Path):
    from vcamd.faces.detect import FaceDetector
    from vcamd.runtime import Sessions

    return FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", Sessions(["cpu"], threads=2))


@pytest.fixture(scope="module")
def solvay(assets: Path) -> np.ndarray:
    return cv2.imread(str(assets / "images" / "solvay_conference_1927.png"))


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


def test_a_track_lost_among_several_faces_asks_for_a_full_detection_at_once(live_config, face_engine_factory, newton):
    """With several tracked faces, one lost in its crop was only searched for at the next due full
    detection (up to full_every frames of that face unswapped); with one face it was at once."""
    cfg = live_config()
    engine = face_engine_factory(cfg)
    frame = np.full((480, 960, 3), 128, np.uint8)
    face_img = cv2.resize(newton, (360, 360))
    frame[60:420, 40:400] = face_img
    found = engine.detect(frame, 320)
    assert len(found) == 1
    ghost = Face(box=(700.0, 150.0, 800.0, 270.0), score=0.9, kps=found[0].kps + np.float32([660, 90]))  # empty grey
    full = FullDetector(engine, LiveStats(), time.monotonic)  # not started: submit() only queues the job
    tracker = LiveTracker(engine, full, full_every=100)
    try:
        tracker.book.take_full(FullDetection([found[0], ghost], frame_index=0, input_size=320))
        tracker._last_full_submit = 1
        report = tracker.update(frame, 2, full_size=320, track_size=160, deadline_s=5.0)
        assert len(report.faces) == 1 and len(report.lost) == 1 and not report.known
        assert tracker._last_full_submit == 2 and not full.idle, "no full detection was asked for"
    finally:
        tracker.stop()


def test_a_detection_of_a_region_judges_only_the_faces_it_looked_at():
    """A periodic full detection that looked only where the picture changed (`changes.ChangeMap`)
    says nothing about a lost face elsewhere — it stays lost and covered — and it does not make
    the positions known again after a loss: only a look at the whole frame does."""
    from vcamd.live.tracking.changes import Region
    from vcamd.live.tracking.facebook import LOST_KEEP_FRAMES, FaceBook

    def face(x: float) -> Face:
        return Face(box=(x, 100.0, x + 60.0, 160.0), score=0.9, kps=np.full((5, 2), x + 30.0, np.float32))

    left, right = face(40.0), face(500.0)
    book = FaceBook()
    book.take_full(FullDetection([left, right], frame_index=0, input_size=640))
    book.take_tracked([left, None], frame_index=1)  # the right face left its crop: lost, positions unknown
    assert not book.report(late=False, appeared=[], full=False).known
    around_left = Region(0, 0, 256, 256, scale=1.0)  # looked only where the left face is
    book.take_full(FullDetection([left], frame_index=1 + LOST_KEEP_FRAMES, input_size=640, region=around_left))
    report = book.report(late=False, appeared=[], full=True)
    assert [f.box for f in report.lost] == [right.box] and not report.known
    book.take_full(FullDetection([left], frame_index=2 + LOST_KEEP_FRAMES, input_size=640))  # the whole frame: it is gone
    report = book.report(late=False, appeared=[], full=True)
    assert report.lost == [] and report.known


def test_a_look_asked_for_by_unseen_runs_at_least_at_the_size_it_asks_for():
    """`look_soon(size)`: on a reduced rung the look that may uncover a change runs at the full
    size (`sizes.vouch_size`; one at the rung's size vouches for nothing), once; then the rung's again."""
    from vcamd.live.tracking.cropplan import DetectCosts

    class Full:  # the full detector's thread, idle: records the input size of each look submitted
        idle, costs = True, DetectCosts()

        def __init__(self) -> None:
            self.sizes: list[int] = []

        def take_result(self):
            return None

        def submit_downscaled(self, small, scale, frame_index, input_size, look=None, unsure=None) -> None:
            self.sizes.append(input_size)

    full = Full()
    tracker = LiveTracker(None, full, full_every=1000)
    frame = np.zeros((360, 640, 3), np.uint8)
    try:
        # Nothing tracked: a look at every frame (`FaceBook.needs_full`), at the rung's size ...
        tracker.update(frame, 1, full_size=320, track_size=128)
        tracker.look_soon(640)
        tracker.update(frame, 2, full_size=320, track_size=128)  # ... but the one asked for: the full size
        tracker.update(frame, 3, full_size=320, track_size=128)
    finally:
        tracker.stop()
    assert full.sizes == [320, 640, 320]


def test_a_face_lost_after_a_finer_detection_is_let_go_on_a_reduced_rung(live_config, face_engine_factory, newton):
    """A face found at 640 and then lost while the watchdog is on low_res (full detections at 320)
    could only be dropped by a look at 640 (`FaceBook.take_full`), and none came: its old place
    stayed held — the last output's face frozen where nobody was — for as long as the rung lasted
    (the call bench: 90–100 held frames after the clip's jump). Now, once it has been kept
    LOST_KEEP_FRAMES, the tracker asks for a look at 640 again, which lets it go."""
    from vcamd.live.tracking.cropplan import DetectCosts
    from vcamd.live.tracking.facebook import JUMP_FRAMES, LOST_KEEP_FRAMES

    class Full:  # the full detector's thread, idle: each look submitted finds nothing (the picture is empty)
        idle, costs = True, DetectCosts()

        def __init__(self) -> None:
            self.sizes: list[tuple[int, int]] = []  # (frame index, input size) of each look
            self._result: FullDetection | None = None

        def take_result(self) -> FullDetection | None:
            result, self._result = self._result, None
            return result

        def submit_downscaled(self, small, scale, frame_index, input_size, look=None, unsure=None) -> None:
            self.sizes.append((frame_index, input_size))
            self._result = FullDetection([], frame_index=frame_index, input_size=input_size)

    engine = face_engine_factory(live_config())
    seen = np.full((480, 960, 3), 128, np.uint8)
    seen[60:420, 40:400] = cv2.resize(newton, (360, 360))
    found = engine.detect(seen, 640)
    assert len(found) == 1
    empty = np.full_like(seen, 128)  # the person jumped out of view
    full = Full()
    tracker = LiveTracker(engine, full, full_every=1000)
    try:
        tracker.book.take_full(FullDetection(found, frame_index=0, input_size=640))
        lost_for = []
        for index in range(1, LOST_KEEP_FRAMES + 5):
            report = tracker.update(empty, index, full_size=320, track_size=160, deadline_s=5.0)
            lost_for.append(bool(report.lost))
    finally:
        tracker.stop()
    # 640 looks: the jump rule's, just after the loss (this detector is idle every frame), then one
    # once the face has been kept LOST_KEEP_FRAMES; the rung's 320 in between.
    fine = [i for i, size in full.sizes if size == 640]
    assert fine == [*range(1, 2 + JUMP_FRAMES), 1 + LOST_KEEP_FRAMES], full.sizes
    # Kept and covered for LOST_KEEP_FRAMES whatever the 320 looks said, let go after the 640 one.
    assert all(lost_for[:LOST_KEEP_FRAMES]) and not lost_for[-1], lost_for


def test_a_face_that_jumps_on_a_reduced_rung_frees_its_old_place_at_once(live_config, face_engine_factory, newton):
    """A face found at 640 that jumps (a camera restarting its picture, a clip looping) just after
    the watchdog stepped down: the look asked for at the loss ran at the rung's 320, too coarse for
    the jump rule (`FaceBook.take_full`: a look at least as fine as the lost face's), so the old
    place stayed held for LOST_KEEP_FRAMES at least — a frozen face where nobody was. Now that look
    runs at 640 and the old place is free within JUMP_FRAMES."""
    from vcamd.live.tracking.cropplan import DetectCosts
    from vcamd.live.tracking.facebook import JUMP_FRAMES

    engine = face_engine_factory(live_config())
    before = np.full((480, 960, 3), 128, np.uint8)
    before[60:420, 40:400] = cv2.resize(newton, (360, 360))
    after = np.full_like(before, 128)
    after[60:420, 560:920] = cv2.resize(newton, (360, 360))
    (was,), (now,) = engine.detect(before, 640), engine.detect(after, 640)

    class Full:  # the full detector's thread, idle: each look finds the face at its new place
        idle, costs = True, DetectCosts()

        def __init__(self) -> None:
            self.sizes: list[int] = []
            self._result: FullDetection | None = None

        def take_result(self) -> FullDetection | None:
            result, self._result = self._result, None
            return result

        def submit_downscaled(self, small, scale, frame_index, input_size, look=None, unsure=None) -> None:
            self.sizes.append(input_size)
            self._result = FullDetection([now], frame_index=frame_index, input_size=input_size)

    full = Full()
    tracker = LiveTracker(engine, full, full_every=1000)
    try:
        tracker.book.take_full(FullDetection([was], frame_index=0, input_size=640))
        reports = [tracker.update(after, index, full_size=320, track_size=160, deadline_s=5.0) for index in range(1, JUMP_FRAMES + 3)]
    finally:
        tracker.stop()
    assert reports[0].lost and full.sizes[0] == 640, full.sizes
    assert reports[-1].lost == [] and len(reports[-1].faces) == 1, reports[-1]
