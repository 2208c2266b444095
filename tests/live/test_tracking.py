"""Which faces the tracker keeps: one face per place when tracks converge, and a face lost among
several looked for everywhere at once."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.types import Face
from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking.full import FullDetection, FullDetector
from vcamd.live.tracking.trackedfaces import dedupe_faces
from vcamd.live.tracking.tracker import LiveTracker


@pytest.fixture(scope="module")
def detector(assets: Path):
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions

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
    from vcamd.live.tracking.trackedfaces import LOST_KEEP_FRAMES, TrackedFaces

    def face(x: float) -> Face:
        return Face(box=(x, 100.0, x + 60.0, 160.0), score=0.9, kps=np.full((5, 2), x + 30.0, np.float32))

    left, right = face(40.0), face(500.0)
    book = TrackedFaces()
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
        # Nothing tracked: a look at every frame (`TrackedFaces.needs_full`), at the rung's size ...
        tracker.update(frame, 1, full_size=320, track_size=128)
        tracker.look_soon(640)
        tracker.update(frame, 2, full_size=320, track_size=128)  # ... but the one asked for: the full size
        tracker.update(frame, 3, full_size=320, track_size=128)
    finally:
        tracker.stop()
    assert full.sizes == [320, 640, 320]


def test_a_face_lost_after_a_finer_detection_is_let_go_on_a_reduced_rung(live_config, face_engine_factory, newton):
    """A face found at 640 and then lost while the watchdog is on low_res (full detections at 320)
    could only be dropped by a look at 640 (`TrackedFaces.take_full`), and none came: its old place
    stayed held — the last output's face frozen where nobody was — for as long as the rung lasted
    (the call bench: 90–100 held frames after the clip's jump). Now, once it has been kept
    LOST_KEEP_FRAMES, the tracker asks for a look at 640 again, which lets it go."""
    from vcamd.live.tracking.cropplan import DetectCosts
    from vcamd.live.tracking.trackedfaces import LOST_KEEP_FRAMES

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
    # 640 looks: the jump rule's, at the loss (this detector is idle every frame; once taken, it
    # is not asked for again), then one once the face has been kept LOST_KEEP_FRAMES; the rung's
    # 320 in between.
    fine = [i for i, size in full.sizes if size == 640]
    assert fine == [1, 1 + LOST_KEEP_FRAMES], full.sizes
    # Kept and covered for LOST_KEEP_FRAMES whatever the 320 looks said, let go after the 640 one.
    assert all(lost_for[:LOST_KEEP_FRAMES]) and not lost_for[-1], lost_for


def _jumped(engine, newton):  # type: ignore[no-untyped-def]
    """A face that jumps from the left of a 960×480 frame to its right: the frame after the jump,
    and the face as detected at 640 before and after."""
    before = np.full((480, 960, 3), 128, np.uint8)
    before[60:420, 40:400] = cv2.resize(newton, (360, 360))
    after = np.full_like(before, 128)
    after[60:420, 560:920] = cv2.resize(newton, (360, 360))
    (was,), (now,) = engine.detect(before, 640), engine.detect(after, 640)
    return after, was, now


def test_a_face_that_jumps_on_a_reduced_rung_frees_its_old_place_at_once(live_config, face_engine_factory, newton):
    """A face found at 640 that jumps (a camera restarting its picture, a clip looping) just after
    the watchdog stepped down: the look asked for at the loss ran at the rung's 320, too coarse for
    the jump rule (`TrackedFaces.take_full`: a look at least as fine as the lost face's), so the old
    place stayed held for LOST_KEEP_FRAMES at least — a frozen face where nobody was. Now that look
    runs at 640 and the old place is free within JUMP_FRAMES."""
    from vcamd.live.tracking.cropplan import DetectCosts
    from vcamd.live.tracking.trackedfaces import JUMP_FRAMES

    engine = face_engine_factory(live_config())
    after, was, now = _jumped(engine, newton)

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


@pytest.mark.parametrize("busy_frames", [0, 5, 10])
def test_a_face_that_jumps_while_the_full_detector_is_busy_frees_its_old_place_at_its_first_look(
        live_config, face_engine_factory, newton, busy_frames: int):
    """The look asked for at a jump starts only when the full detector is free: one in flight
    takes 100–300 ms on a loaded CPU. The first look after the loss finds the face at its new place
    and frees the old one, however many frames (up to JUMP_FRAMES) it waited. With the old rule
    (a look of a frame at most 3 after the loss) the old place stayed held for LOST_KEEP_FRAMES
    once the detector was busy 3 frames or more. A face appearing only at a later
    look is not taken for the lost one (it may be someone else): the old place stays covered."""
    from vcamd.live.tracking.cropplan import DetectCosts
    from vcamd.live.tracking.trackedfaces import JUMP_FRAMES

    assert busy_frames < JUMP_FRAMES
    engine = face_engine_factory(live_config())
    after, was, now = _jumped(engine, newton)

    class Full:  # the full detector's thread: busy with an older look for `busy_frames` frames
        costs = DetectCosts()

        def __init__(self, finds: list[list[Face]]) -> None:
            self.finds = finds  # what each look sees, in order
            self.looks: list[int] = []  # frame index of each look
            self.frame = 0
            self._result: FullDetection | None = None

        @property
        def idle(self) -> bool:
            return self.frame > busy_frames

        def take_result(self) -> FullDetection | None:
            result, self._result = self._result, None
            return result

        def submit_downscaled(self, small, scale, frame_index, input_size, look=None, unsure=None) -> None:
            self.looks.append(frame_index)
            faces = self.finds[min(len(self.looks), len(self.finds)) - 1]
            self._result = FullDetection(faces, frame_index=frame_index, input_size=input_size)

    def run(finds: list[list[Face]]) -> tuple[Full, list]:
        full = Full(finds)
        tracker = LiveTracker(engine, full, full_every=1000)
        reports = []
        try:
            tracker.book.take_full(FullDetection([was], frame_index=0, input_size=640))
            for index in range(1, busy_frames + 4):
                full.frame = index
                reports.append(tracker.update(after, index, full_size=640, track_size=160, deadline_s=5.0))
        finally:
            tracker.stop()
        return full, reports

    full, reports = run([[now]])  # the first look after the loss sees the face at its new place
    assert reports[0].lost and full.looks[0] == busy_frames + 1, full.looks
    assert reports[-1].lost == [] and len(reports[-1].faces) == 1, reports[-1]
    late, reports = run([[], [now]])  # the first look sees nobody; the face shows up only later
    assert len(late.looks) >= 2 and reports[-1].lost, (late.looks, reports[-1])


def test_a_whole_look_between_two_losses_does_not_say_where_the_second_face_went():
    """Three faces; A is lost in its crop at frame 5, B at frame 7. A whole look at frame 6 finds A
    again and shows B at its old place (B left after it): where B is now is not known, and the
    frame must be covered whole — the look cleared it, and B's new place was published raw (the
    compose property test found it, 22 faces in a group). The next whole look, at frame 8, does."""
    from vcamd.live.tracking.trackedfaces import TrackedFaces

    def face(x: float) -> Face:
        kps = np.array([[x + 30, 60], [x + 70, 60], [x + 50, 80], [x + 35, 100], [x + 65, 100]], np.float32)
        return Face(box=(x, 30.0, x + 100.0, 140.0), score=0.9, kps=kps)

    a, b, c = face(0.0), face(300.0), face(600.0)
    book = TrackedFaces()
    book.take_full(FullDetection([a, b, c], frame_index=0, input_size=640))
    book.take_tracked([None, b, c], 5)  # A is lost
    book.take_tracked([None, c, None], 7)  # B is lost (looked for: tracks b, c, then lost a)
    assert [f.box[0] for f in book.tracks] == [600.0] and sorted(f.box[0] for f in book.lost) == [0.0, 300.0]
    book.take_full(FullDetection([a, b, c], frame_index=6, input_size=640))
    assert not book.report(late=False, appeared=[], full=True).known
    b_now = face(900.0)
    book.take_full(FullDetection([a, b_now, c], frame_index=8, input_size=640))
    assert book.report(late=False, appeared=[], full=True).known


def test_a_detection_of_a_frame_before_a_loss_does_not_find_the_lost_face_again_at_its_old_place():
    """The call bench's clip loops: the face jumps, and the crop re-detection loses it at its old
    place (frame 5). The full detection in flight then lands: it ran on frame 4, before the jump,
    and shows the face at the old place. Taken as the face found again, it re-tracked the face
    there, the crop lost it a second time, and the look after that second loss came from a frame
    before it — the jump rule never applied, and the old place was held for LOST_KEEP_FRAMES.
    Now the older picture is not taken for where the face is: it stays lost, and the next look
    (frame 6, the face at its new place) frees the old place at once."""
    from vcamd.live.tracking.trackedfaces import TrackedFaces

    def face(x: float) -> Face:
        kps = np.array([[x + 30, 60], [x + 70, 60], [x + 50, 80], [x + 35, 100], [x + 65, 100]], np.float32)
        return Face(box=(x, 30.0, x + 100.0, 140.0), score=0.9, kps=kps)

    old, new = face(600.0), face(200.0)
    book = TrackedFaces()
    book.take_full(FullDetection([old], frame_index=0, input_size=640))
    lost_now, _ = book.take_tracked([None], 5)  # the crop finds nobody at the old place
    assert len(lost_now) == 1
    book.take_full(FullDetection([old], frame_index=4, input_size=640))  # in flight before the jump
    assert len(book.lost) == 1 and book.tracks == []
    appeared = book.take_full(FullDetection([new], frame_index=6, input_size=640))
    assert len(appeared) == 1 and book.lost == [] and len(book.tracks) == 1
