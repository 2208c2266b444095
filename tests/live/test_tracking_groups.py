"""The tracker with many faces: crops sized to the face, tiled into one detector run, or one full
detection of the frame when that costs less — on the 29-face 1927 Solvay photo as a 720p camera."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.types import Face
from vcamd.faces.mosaic import mosaic_shape
from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking import cropplan
from vcamd.live.tracking.cropplan import (
    CROP_FACTOR,
    TRACK_MIN_SIZE,
    DetectCosts,
    Mosaic,
    TrackCrop,
    crop_around,
    crop_input_size,
    mosaic_tile,
    nearest_to_centre,
    pays,
)
from vcamd.live.tracking.full import FullDetection, FullDetector
from vcamd.live.tracking.tracker import LiveTracker


def _centre(face: Face) -> np.ndarray:
    return np.array([(face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2])


@pytest.fixture(scope="module")
def detector(assets: Path):
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions

    return FaceDetector(assets / "models" / "scrfd_2.5g_kps.onnx", Sessions(["cpu"], threads=1))


@pytest.fixture(scope="module")
def group_frame(assets: Path) -> np.ndarray:
    """The group photo fitted into 1280×720 on grey, as `vcamd bench --scenarios groups` plays it."""
    image = cv2.imread(str(assets / "images" / "solvay_conference_1927.png"))
    assert image is not None
    scale = min(1280 / image.shape[1], 720 / image.shape[0])
    fitted = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)), interpolation=cv2.INTER_AREA)
    frame = np.full((720, 1280, 3), 128, np.uint8)
    y0, x0 = (720 - fitted.shape[0]) // 2, (1280 - fitted.shape[1]) // 2
    frame[y0 : y0 + fitted.shape[0], x0 : x0 + fitted.shape[1]] = fitted
    return frame


@pytest.fixture(scope="module")
def group_faces(detector, group_frame) -> list[Face]:
    faces = detector.detect(group_frame, 640)
    assert len(faces) == 29
    return faces


def _tracker(detector) -> tuple[LiveTracker, FullDetector]:
    full = FullDetector(detector, LiveStats(), time.monotonic)  # not started: full detections only queue
    # Pixel following off: these tests are about the choice between crops and a full detection,
    # which a still photo's faces (followed by their pixels) would otherwise never need.
    return LiveTracker(detector, full, full_every=1000, follow_motion=False), full


def test_a_crop_is_never_scaled_up_past_what_a_small_face_needs():
    def face(side: float) -> Face:
        return Face(box=(100.0, 100.0, 100.0 + side, 100.0 + side), score=0.9, kps=np.zeros((5, 2), np.float32))

    assert crop_input_size(face(35), 192) == TRACK_MIN_SIZE  # a group photo's face: 70-px crop at 64²
    assert crop_input_size(face(85), 192) == 192  # 170-px crop: not below its own pixels
    assert crop_input_size(face(70), 192) == 160
    assert crop_input_size(face(300), 192) == 192  # never above track_size
    assert crop_input_size(face(300), 128) == 128  # the watchdog's low_res track size
    assert CROP_FACTOR * 35 <= 96


def test_a_mosaic_of_48_px_tiles_finds_every_face_the_192_crops_find_in_one_run(detector, group_frame, group_faces):
    sizes = {crop_input_size(f, 192) for f in group_faces}
    assert sizes == {TRACK_MIN_SIZE}
    tile = mosaic_tile(TRACK_MIN_SIZE)
    mosaic = Mosaic.of([crop_around(group_frame, f, tile) for f in group_faces], tile)
    assert mosaic.image.shape[:2] == mosaic_shape(29, tile) == (192, 384)
    found = mosaic.split(detector.detect(mosaic.image, max(mosaic.image.shape[:2])))
    assert all(f is not None for f in found), f"{sum(f is None for f in found)} of 29 faces missed in the mosaic"
    for face, got in zip(group_faces, found):
        patch, crop = crop_around(group_frame, face, 192)
        reference = crop.to_frame(nearest_to_centre(detector.detect(patch, 192), 192))
        assert np.linalg.norm(_centre(got) - _centre(reference)) <= 0.15 * reference.width
        assert np.linalg.norm(got.kps - reference.kps, axis=1).mean() <= 0.08 * reference.width  # the full detection: ≤ 8 %
        assert abs(got.width - reference.width) <= 0.25 * reference.width


def test_a_detection_straddling_two_tiles_belongs_to_neither():
    tile = 64
    blank = (np.zeros((tile, tile, 3), np.uint8),)
    mosaic = Mosaic.of([(blank[0], TrackCrop(0.0, 0.0, 1.0)), (blank[0], TrackCrop(1000.0, 0.0, 1.0)),
                        (blank[0], TrackCrop(2000.0, 0.0, 1.0))], tile)
    kps = np.zeros((5, 2), np.float32)
    straddling = Face(box=(40.0, 10.0, 90.0, 60.0), score=0.9, kps=kps)  # half in tile 0, half in tile 1
    assert mosaic.cols == 2  # tile 2 is the first of the second row
    inside = Face(box=(12.0, 76.0, 52.0, 116.0), score=0.9, kps=kps + 90)  # well inside tile 2
    found = mosaic.split([straddling, inside])
    assert found[0] is None and found[1] is None
    assert found[2] is not None and found[2].box[:2] == pytest.approx((2000.0 + 12.0, 76.0 - 64.0))


def test_a_group_is_tracked_with_one_mosaic_once_its_shapes_are_built(detector, group_frame, group_faces):
    tracker, _ = _tracker(detector)
    shape = mosaic_shape(29, mosaic_tile(TRACK_MIN_SIZE))
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        # The first frames cannot use the 64² crop size nor the mosaic while their sessions are
        # being built (on the warm-up thread): meanwhile the faces are looked for with shapes
        # already built (29 crops at track_size, or the full detection, which costs less), and
        # every face is found all along.
        index = 1
        while tracker.costs.measured(shape) is None:
            report = tracker.update(group_frame, index, full_size=640, track_size=192, deadline_s=30.0)
            assert report.known and len(report.faces) == 29 and not report.lost, f"frame {index}"
            assert index < 200, "the mosaic never ran"
            index += 1
            time.sleep(0.01)  # polls the warm-up thread, which needs the CPU too
        # Measured, the mosaic (~11 ms) is cheaper than one full detection (~32 ms): crops from now on.
        before = dict(tracker.plans)
        for i in range(index, index + 3):
            report = tracker.update(group_frame, i, full_size=640, track_size=192, deadline_s=30.0)
            assert report.known and len(report.faces) == 29 and not report.lost
        assert tracker.plans["crops"] == before["crops"] + 3
    finally:
        tracker.stop()


def test_crops_are_tiled_only_when_the_mosaic_costs_no_more_pixels():
    assert pays(29, TRACK_MIN_SIZE)  # 29 × 64² one by one, against one 192×384 mosaic of 48-px tiles
    assert not pays(3, 192)  # a 2×2 mosaic of 192² tiles for 3 faces: a quarter more pixels
    assert pays(4, 192)
    assert not pays(2, TRACK_MIN_SIZE)  # below MOSAIC_MIN


def test_one_full_detection_replaces_the_crops_when_it_costs_less_and_a_missing_face_is_lost(detector, group_frame, group_faces):
    tracker, _ = _tracker(detector)
    full_shape = (384, 640)  # 640 wide at the frame's aspect, rounded up to 32
    costs: DetectCosts = tracker.costs
    for _ in range(3):  # the crops measured dear, the full detection cheap
        costs.record(full_shape, 1.0)
        costs.record(mosaic_shape(29, mosaic_tile(TRACK_MIN_SIZE)), 1000.0)
        costs.record((TRACK_MIN_SIZE, TRACK_MIN_SIZE), 1000.0)
    # One face covered over in this frame (a hand in front, a face turned away): no detector finds it.
    gone = group_faces[len(group_faces) // 2]
    frame = group_frame.copy()
    x1, y1, x2, y2 = (int(round(v)) for v in gone.box)
    frame[max(0, y1 - 4) : y2 + 4, max(0, x1 - 4) : x2 + 4] = 128
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        report = tracker.update(frame, 1, full_size=640, track_size=192, deadline_s=30.0)
        assert tracker.plans == {"crops": 0, "full": 1}
        assert report.full, "this frame's own full detection is reported"
        assert len(report.faces) == 28
        # The missing face is lost at its last place (covered there), never silently dropped; the
        # detection of this very frame says where every other face is, so positions are known.
        assert len(report.lost) == 1 and np.linalg.norm(_centre(report.lost[0]) - _centre(gone)) < 1.0
        assert report.known
        assert tracker._last_full_submit == 1, "the frame's own full detection counts as the due one"
    finally:
        tracker.stop()


def test_one_face_keeps_its_crop_even_when_a_full_detection_is_cheap_per_pixel(detector, group_frame, group_faces):
    tracker, _ = _tracker(detector)
    try:
        tracker.book.take_full(FullDetection(group_faces[:1], frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        report = tracker.update(group_frame, 1, full_size=640, track_size=192, deadline_s=30.0)
        assert tracker.plans == {"crops": 1, "full": 0}
        assert report.known and len(report.faces) == 1
    finally:
        tracker.stop()


def test_a_full_detection_finer_faces_were_found_at_is_never_used_instead_of_their_crops(detector, group_frame, group_faces):
    """At the watchdog's low_res sizes a full detection is cheap but misses a group's small faces:
    choosing it would lose them (covered, never swapped) for as long as it stays the cheaper way."""
    tracker, _ = _tracker(detector)
    costs: DetectCosts = tracker.costs
    for _ in range(3):
        costs.record((256, 448), 1.0)  # the 448-wide full detection, measured cheap
        costs.record(mosaic_shape(29, mosaic_tile(TRACK_MIN_SIZE)), 1000.0)
        costs.record((TRACK_MIN_SIZE, TRACK_MIN_SIZE), 1000.0)
        costs.record((128, 128), 1000.0)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        report = tracker.update(group_frame, 1, full_size=448, track_size=128, deadline_s=30.0)
        assert tracker.plans == {"crops": 1, "full": 0}
        assert report.known and len(report.faces) == 29 and not report.lost
    finally:
        tracker.stop()


def test_a_group_keyed_together_is_looked_at_again_a_few_faces_a_frame(detector, group_frame, group_faces):
    """Followed by their pixels, a still group's faces are looked at again by the detector every
    REDETECT_EVERY frames — spread over those frames, a few faces each, never the whole group on
    one frame (a 29-face mosaic, 29 faces pasted anew: the spikes of the group's latency)."""
    from vcamd.live.tracking.motion import REDETECT_EVERY

    full = FullDetector(detector, LiveStats(), time.monotonic)
    tracker = LiveTracker(detector, full, full_every=1000)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        looks = _counted_looks(tracker)
        looked: list[int] = []
        for index in range(1, 4 * REDETECT_EVERY):
            before = len(looks)
            report = tracker.update(group_frame, index, full_size=640, track_size=192, deadline_s=30.0)
            assert report.known and len(report.faces) == 29 and not report.lost, f"frame {index}"
            for _ in range(6000):  # a periodic look is not waited for: it lands before the next frame
                if tracker._call.idle:
                    break
                time.sleep(0.01)
            looked.append(sum(looks[before:]))
        steady = looked[2 * REDETECT_EVERY :]  # the first looks build the crop shapes' sessions
        assert max(steady) <= -(-29 // REDETECT_EVERY) + 1, looked
        assert sum(steady) >= 29 * len(steady) // REDETECT_EVERY - 1, looked  # every face, once a cycle
    finally:
        tracker.stop()


class _LateLooks:
    """The detector, with every look on the tracker's thread held until the test lets it go —
    after the loop stopped waiting for it: each look is slower than its deadline, however fast the
    machine (a crowd's crop re-detection on a busy one). The warm-up and full detections are not held."""

    def __init__(self, detector) -> None:  # type: ignore[no-untyped-def]
        self.detector = detector
        self.gate = threading.Event()

    def detect(self, frame, input_size=None, threshold=None):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "face-tracker":
            assert self.gate.wait(60.0), "the test never let the look go"
        return self.detector.detect(frame, input_size, threshold)


def _late_frame(tracker: LiveTracker, looks: _LateLooks, frame: np.ndarray, index: int):  # type: ignore[no-untyped-def]
    """One frame whose look comes in after the loop stopped waiting: then the look runs to its end."""
    report = tracker.update(frame, index, full_size=640, track_size=192, deadline_s=0.05)
    looks.gate.set()
    for _ in range(6000):  # until the look (if one started) has landed
        if tracker.call_thread is not None and tracker._call.idle:
            break
        time.sleep(0.01)
    looks.gate.clear()
    return report


def test_a_still_group_whose_every_look_is_late_is_known_all_the_same(detector, group_frame, group_faces):
    """Every re-detection runs past the loop's deadline: each one, landed, says where the faces are
    in the next frame as long as their pixels only moved since (`latelook`) — before, each late
    look was dropped and the next one started over, as late: the group was never known (a crowd on
    a busy machine was covered whole all run long)."""
    from vcamd.live.tracking.motion import REDETECT_EVERY

    looks = _LateLooks(detector)
    tracker = LiveTracker(looks, FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        known = []
        for index in range(1, 1 + 4 * REDETECT_EVERY):
            report = _late_frame(tracker, looks, group_frame, index)
            known.append(report.known and len(report.faces) == 29 and not report.lost)
        # The first one late, and the periodic re-looks late, or not waited for at all (only faces
        # whose pixels only moved: `LiveTracker._must`).
        assert tracker.late >= 1 and tracker.late + tracker.unwaited >= 4, "the looks were not late"
        assert not known[0]  # the first look is late: nothing says where the faces are yet
        assert all(known[2:]), known
    finally:
        looks.gate.set()
        tracker.stop()


def test_a_late_look_says_nothing_where_the_picture_changed_since(detector, group_frame, group_faces):
    """The faces moved since the late look's frame (the picture mirrored): it is not used, the
    faces are not known at the places it found them — the frame is covered."""
    looks = _LateLooks(detector)
    tracker = LiveTracker(looks, FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        assert not _late_frame(tracker, looks, group_frame, 1).known
        mirrored = np.ascontiguousarray(group_frame[:, ::-1])
        report = _late_frame(tracker, looks, mirrored, 2)
        assert not report.known
    finally:
        looks.gate.set()
        tracker.stop()


def _each_look_landed(tracker: LiveTracker, frame: np.ndarray, frames: int) -> list:  # type: ignore[type-arg]
    """The reports of frames 1..`frames` (a 30 s deadline: the loop would wait for any look it
    waits for), each followed by the landing of the look it started, if any (a condition, not a clock)."""
    reports = []
    for index in range(1, frames + 1):
        reports.append(tracker.update(frame, index, full_size=640, track_size=192, deadline_s=30.0))
        for _ in range(6000):
            if tracker._call.idle:
                break
            time.sleep(0.01)
    return reports


def test_a_look_that_cannot_make_the_deadline_is_not_waited_for_and_used_when_it_lands(detector, group_frame, group_faces):
    """A look whose CPU alone is past the loop's deadline (a crowd's re-detection: 100+ ms against
    two frame intervals) was waited for the whole deadline and came in late all the same: the loop
    lost two frame intervals on every look, a crowd's published rate fell to 0.6 of the camera's.
    Now it is started and not waited for — its frame is late at once, as after the wait — and what
    it found is used when it lands (`latelook`). Here every shape is priced past the deadline."""
    full = FullDetector(detector, LiveStats(), time.monotonic)
    tracker = LiveTracker(detector, full, full_every=1000)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        for _ in range(2):  # a shape's first run is not counted
            tracker.costs.record((8, 8), 1e9)
        known = [r.known and len(r.faces) == 29 and not r.lost for r in _each_look_landed(tracker, group_frame, 5)]
        assert not known[0], "the first look was waited for"
        assert tracker.unwaited >= 1
        assert all(known[2:]), known
    finally:
        tracker.stop()


class _Failing:
    """A detector whose every look on the tracker's thread raises (a broken session)."""

    def __init__(self, detector) -> None:  # type: ignore[no-untyped-def]
        self.detector = detector

    def detect(self, frame, input_size=None, threshold=None):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "face-tracker":
            raise RuntimeError("the session broke")
        return self.detector.detect(frame, input_size, threshold)


def test_a_failing_detector_is_waited_for_even_when_its_looks_are_dear(detector, group_frame, group_faces):
    """A look not waited for (priced past the deadline) that fails says so only when it lands: the
    next look is waited for, so the failure is met and counted there, and no frame is known —
    a failing detector vouches for nothing."""
    tracker = LiveTracker(_Failing(detector), FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        for _ in range(2):
            tracker.costs.record((8, 8), 1e9)
        known = [r.known for r in _each_look_landed(tracker, group_frame, 5)]
        assert tracker.errors >= 1, "the failure was never met"
        assert not any(known), known
    finally:
        tracker.stop()


def test_a_look_is_priced_as_long_as_the_last_looks_took_on_this_machine(detector, group_frame, group_faces):
    """Beside a call app keeping both cores busy, a look takes 2–3 times its CPU in wall time: a
    look whose CPU alone fits the deadline still came in late after the whole wait (the loaded
    crowd). The estimate is stretched by how long the last looks took against theirs
    (`LookStretch`); here the machine is made to look very slow, and the first look is not waited for."""
    from vcamd.live.tracking.cropplan import LookStretch

    stretch = LookStretch()
    assert stretch.value == 1.0
    stretch.seen(wall_ms=5.0, estimate_ms=10.0)  # faster than priced: never under 1
    assert stretch.value == 1.0
    for _ in range(30):
        stretch.seen(wall_ms=30.0, estimate_ms=10.0)
    assert 2.9 < stretch.value <= 3.0

    tracker = LiveTracker(detector, FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        for _ in range(30):
            tracker.stretch.seen(wall_ms=1e9, estimate_ms=1.0)
        slow = tracker.stretch.value
        known = [r.known and len(r.faces) == 29 and not r.lost for r in _each_look_landed(tracker, group_frame, 5)]
        assert not known[0], "the first look was waited for"
        assert all(known[2:]), known
        # The looks not waited for landed quickly: they bring the stretch down (else a busy spell
        # would leave every dear look unwaited for good).
        assert tracker.stretch.value < slow
    finally:
        tracker.stop()


class _PricedAt(DetectCosts):
    """Every detector run priced at `ms`, whatever the runs measure."""

    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms = ms

    def estimate(self, shape: tuple[int, int]) -> float:
        return self.ms


ONE_SHARE_MS = cropplan.backstop_share_ms(30.0)
"""The periodic looks' share of a frame at these tests' 30 s deadline: a look priced at it takes one
face, and one such look a frame (`cropplan.BackstopCredit`)."""


class _FoundAtOnce:
    """The full detector's thread, at once: `faces` found in the frame it was handed; every detector
    run priced at `ms` (one share: one face a frame for the periodic looks)."""

    idle = True

    def __init__(self, faces: list[Face], ms: float = ONE_SHARE_MS) -> None:
        self._faces = faces
        self.costs = _PricedAt(ms)
        self._result: FullDetection | None = None

    def take_result(self) -> FullDetection | None:
        result, self._result = self._result, None
        return result

    def submit_downscaled(self, small, scale, frame_index, input_size, look=None, unsure=None) -> None:  # type: ignore[no-untyped-def]
        self._result = FullDetection(list(self._faces), frame_index=frame_index, input_size=input_size)


def _counted_looks(tracker: LiveTracker, at: list[int] | None = None) -> list[int]:
    """How many faces each look the tracker chooses is for, in order (filled as it runs); `at`, if
    given, is filled with the frame index of each."""
    looks: list[int] = []
    look = tracker._look

    def counted(frame, frame_index, looked_for, *rest):  # type: ignore[no-untyped-def]
        looks.append(len(looked_for))
        if at is not None:
            at.append(frame_index)
        return look(frame, frame_index, looked_for, *rest)

    tracker._look = counted  # type: ignore[method-assign]
    return looks


@pytest.mark.parametrize("share_frames", [3, 10 * cropplan.MAX_DEBT_FRAMES])
def test_the_periodic_looks_take_at_most_their_share_of_the_deadline_over_frames_and_every_face_gets_its_turn(
        detector, group_frame, group_faces, share_frames):
    """A still group's faces all due for their periodic look on one frame (pixels only moved), one
    face's look priced at `share_frames` frames' share for them (`cropplan.BACKSTOP_SHARE`): one face
    a look, and a look only once the frames since the last have paid for it (`BackstopCredit`) — or
    MAX_DEBT_FRAMES have passed, for a price far past any frame's share. Meanwhile every face is where
    its pixels are (the frame known), and in turn every face is looked at again. Before, a look took
    at least one face every frame: a 146-face crowd whose one face's crop cost 6–26 ms at det_10g's
    cost spent 12 CPU-ms a frame on them against a share of 8.3; and before that every due face went
    into one look (~21 CPU-ms a frame)."""
    from vcamd.live.tracking.motion import key_patch

    full = FullDetector(detector, LiveStats(), time.monotonic)
    full.costs = _PricedAt(share_frames * ONE_SHARE_MS)  # `_each_look_landed`'s 30 s deadline
    tracker = LiveTracker(detector, full, full_every=1000)
    at: list[int] = []
    looks = _counted_looks(tracker, at)
    spacing = min(share_frames, cropplan.MAX_DEBT_FRAMES + 1)  # frames from one look to the next
    frames = 29 * spacing + 2 if share_frames == 3 else 3 * spacing + 1
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        # Every face keyed at frame 0 and due at frame 1 (a group keyed together, its cycle come round).
        tracker._keys = {id(f): (f, k) for f in tracker.book.tracks if (k := key_patch(group_frame, f, 0, due=1)) is not None}
        assert len(tracker._keys) == 29
        reports = _each_look_landed(tracker, group_frame, frames)
        assert all(r.known and len(r.faces) == 29 and not r.lost for r in reports[1:]), [r.known for r in reports]
        assert set(looks) == {1}, looks
        assert at[0] == 1 and all(b - a == spacing for a, b in zip(at, at[1:])), (spacing, at)
        assert len(at) == len(range(1, frames + 1, spacing)), at
        if share_frames == 3:
            keyed_at = [tracker._keys[id(f)][1].frame_index for f in tracker.book.tracks if id(f) in tracker._keys]
            assert len(keyed_at) == 29 and min(keyed_at) >= 1, keyed_at  # every face looked at again since frame 0
    finally:
        tracker.stop()


def test_faces_a_full_look_found_are_where_their_pixels_moved_until_a_crop_looks_at_them(detector, group_frame, group_faces):
    """The faces a full look finds that nobody tracked get keys from the frame it looked at, due at
    once: where their pixels only moved since, they are where the look saw them until a crop looks at
    them — within the periodic looks' share of the deadline, a few a frame. Before, a group's (a
    crowd's) first look was every face at once: priced past the deadline, not waited for, the frame
    unknown (covered). Where the picture changed since the look's frame, nothing is followed: every
    face is looked for, and the frame waits on that look."""

    brighter = cv2.add(group_frame, np.full_like(group_frame, 40))  # the same faces, every pixel changed
    for second, followed in ((group_frame, True), (brighter, False)):
        # Priced past the deadline: a look the frame needs is not waited for (the frame not known).
        tracker = LiveTracker(detector, _FoundAtOnce(group_faces, 1e6), full_every=1000)  # type: ignore[arg-type]
        looks = _counted_looks(tracker)
        try:
            assert not tracker.update(group_frame.copy(), 1, full_size=640, track_size=192, deadline_s=30.0).known
            report = tracker.update(second.copy(), 2, full_size=640, track_size=192, deadline_s=30.0)
            assert len(report.faces) == 29
            assert (report.known, looks) == ((True, [1]) if followed else (False, [29])), (report.known, looks)
        finally:
            tracker.stop()


def test_while_a_late_look_still_runs_no_crops_are_cut_for_a_look_that_cannot_start(detector, group_frame, group_faces, monkeypatch):
    """A frame whose faces must be looked at while the last look still runs starts none (the tracker
    has one thread): its crops were cut all the same — a crowd's 100 crops and mosaics on the loop's
    thread, every frame, for nothing."""
    from vcamd.live.tracking import tracker as tracker_module

    cuts: list[int] = []
    cut_runs = tracker_module.cut_runs
    monkeypatch.setattr(tracker_module, "cut_runs", lambda frame, faces, *rest: cuts.append(len(faces)) or cut_runs(frame, faces, *rest))
    looks = _LateLooks(detector)
    tracker = LiveTracker(looks, FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    try:
        tracker.book.take_full(FullDetection(group_faces[:2], frame_index=0, input_size=640))  # crops cost less than a full look
        tracker._last_full_submit = 0
        assert not tracker.update(group_frame, 1, full_size=640, track_size=192, deadline_s=0.05).known  # late: still runs
        assert cuts and not tracker._call.idle
        cut_before = len(cuts)
        assert not tracker.update(group_frame, 2, full_size=640, track_size=192, deadline_s=0.05).known
        assert len(cuts) == cut_before, cuts
    finally:
        looks.gate.set()
        tracker.stop()


def _all_due_at_frame_1(tracker: LiveTracker, frame: np.ndarray, faces: list[Face]) -> None:
    """The group tracked from frame 0, every face keyed then and due for its periodic look at frame 1."""
    from vcamd.live.tracking.motion import key_patch

    tracker.book.take_full(FullDetection(faces, frame_index=0, input_size=640))
    tracker._last_full_submit = 0
    tracker._keys = {id(f): (f, k) for f in tracker.book.tracks if (k := key_patch(frame, f, 0, due=1)) is not None}
    assert len(tracker._keys) == 29


def _waits_recorded(tracker: LiveTracker, looks: _LateLooks) -> list[float]:
    """How long the loop waits for each look it starts, in order; a look it waits for lands (the
    test does not hang on it), one it does not wait for is held until the test lets it go."""
    waits: list[float] = []
    call = tracker._call.call

    def recorded(fn, timeout):  # type: ignore[no-untyped-def]
        waits.append(timeout)
        if timeout > 0:
            looks.gate.set()
        return call(fn, timeout)

    tracker._call.call = recorded  # type: ignore[method-assign]
    return waits


def test_a_look_only_at_faces_due_for_their_periodic_look_is_not_waited_for(detector, group_frame, group_faces):
    """A frame whose every face only moved, some due for their periodic look: that look is started
    and not waited for — they are where their pixels moved to, as when it runs late — and what it
    found is used on the frame it lands in. Before, the loop waited for it (up to two frame
    intervals): a still crowd's loop waited 16–27 ms a frame for looks at faces that had not changed."""
    looks = _LateLooks(detector)
    tracker = LiveTracker(looks, FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    waits = _waits_recorded(tracker, looks)
    try:
        _all_due_at_frame_1(tracker, group_frame, group_faces)
        report = tracker.update(group_frame, 1, full_size=640, track_size=192, deadline_s=30.0)
        assert waits == [0.0], waits
        assert report.known and len(report.faces) == 29 and not report.lost
        looks.gate.set()
        for _ in range(6000):  # until the look has landed
            if tracker._call.idle:
                break
            time.sleep(0.01)
        report = tracker.update(group_frame, 2, full_size=640, track_size=192, deadline_s=30.0)
        assert report.known and len(report.faces) == 29 and not report.lost
        keyed_at = [tracker._keys[id(f)][1].frame_index for f in tracker.book.tracks if id(f) in tracker._keys]
        assert len(keyed_at) == 29 and min(keyed_at) >= 1, keyed_at  # the look's news: every face keyed again
    finally:
        looks.gate.set()
        tracker.stop()


def test_a_look_that_only_refines_a_full_looks_keypoints_is_waited_for_a_share_of_the_deadline(detector, group_frame, group_faces):
    """Faces a full look placed (its coarse keypoints) whose pixels only moved: their crop look gives
    them their own keypoints, and the frame waits for it only REFINE_SHARE of its deadline — they are
    placed and swapped meanwhile. Waited the whole deadline, one 1080p crowd face's look at det_10g's
    cost held a frame 33–46 ms, a face a frame for the crowd's first ~150 frames. What the look found
    is used: the faces it looked at are keyed again, on their own keypoints."""
    from vcamd.live.tracking.motion import key_patch
    from vcamd.live.tracking.tracker import REFINE_SHARE

    looks = _LateLooks(detector)
    tracker = LiveTracker(looks, FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    waits = _waits_recorded(tracker, looks)
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        tracker._keys = {id(f): (f, k) for f in tracker.book.tracks if (k := key_patch(group_frame, f, 0, due=0, coarse=True)) is not None}
        assert len(tracker._keys) == 29
        report = tracker.update(group_frame, 1, full_size=640, track_size=192, deadline_s=30.0)
        assert waits == [pytest.approx(REFINE_SHARE * 30.0, abs=0.5)], waits  # less what the frame spent before it
        assert report.known and len(report.faces) == 29 and not report.lost
        refined = [f for f in tracker.book.tracks if id(f) in tracker._keys and not tracker._keys[id(f)][1].coarse]
        assert refined, "the look's faces kept the full look's keys"
    finally:
        looks.gate.set()
        tracker.stop()


def test_a_face_that_changed_while_a_look_still_runs_waits_for_it_and_is_looked_at(detector, group_frame, group_faces):
    """A look still runs (late) when a face changes: the tracker has one thread, so the frame waits
    for that look within its deadline, then looks at the face. Before, the frame found the thread
    busy and was a miss (covered) — with periodic looks not waited for, any face that changed after
    one would have cost a covered frame."""
    looks = _LateLooks(detector)
    tracker = LiveTracker(looks, FullDetector(detector, LiveStats(), time.monotonic), full_every=1000)
    take_late = tracker._call.take_late

    def lands_while_waited_for(*args):  # type: ignore[no-untyped-def]
        if args and args[0] > 0:
            looks.gate.set()  # the running look finishes while the loop waits for it
        return take_late(*args)

    tracker._call.take_late = lands_while_waited_for  # type: ignore[method-assign]
    try:
        tracker.book.take_full(FullDetection(group_faces, frame_index=0, input_size=640))
        tracker._last_full_submit = 0
        assert not tracker.update(group_frame, 1, full_size=640, track_size=192, deadline_s=0.05).known  # late, still runs
        assert not tracker._call.idle
        changed = group_frame.copy()
        x0, y0, x1, y1 = (int(v) for v in group_faces[0].box)
        changed[y0:y1, x0:x1] = cv2.add(changed[y0:y1, x0:x1], np.full_like(changed[y0:y1, x0:x1], 40))
        report = tracker.update(changed, 2, full_size=640, track_size=192, deadline_s=30.0)
        assert report.known and len(report.faces) == 29 and not report.lost
    finally:
        looks.gate.set()
        tracker.stop()


def test_the_start_is_warming_until_every_face_of_the_first_look_was_looked_at_again(detector, group_frame, group_faces):
    """The first full look's faces are keyed from it, due at once, and looked at a few a frame
    (the periodic looks' share): until each has been, the tracker is still warming up and the
    watchdog does not judge the frames. Before, a crowd's first second — every face's first crop
    look, swap and paste, frames at 100–200 ms — was judged, and took it to frame_skip for good."""

    tracker = LiveTracker(detector, _FoundAtOnce(group_faces), full_every=1000)  # type: ignore[arg-type]
    try:
        assert tracker.warming  # nothing in yet
        warming, first_keyed = [], []
        for index in range(1, 61):
            report = tracker.update(group_frame, index, full_size=640, track_size=192, deadline_s=30.0)
            keyed_at = [tracker._keys[id(f)][1].frame_index for f in tracker.book.tracks if id(f) in tracker._keys]
            first_keyed.append(sum(1 for k in keyed_at if k <= 1))  # on the first look's key (frame 1)
            warming.append(tracker.warming)
            assert index == 1 or (report.known and len(report.faces) == 29), index
            for _ in range(6000):  # the look it started (not waited for) lands before the next frame
                if tracker._call.idle:
                    break
                time.sleep(0.01)
        assert first_keyed[1] > 0 and first_keyed[-1] == 0, first_keyed
        assert all(w == (n > 0) for w, n in zip(warming[1:], first_keyed[1:])), list(zip(warming, first_keyed))
    finally:
        tracker.stop()


class _CropBlind:
    """A detector that sees no face in any crop or mosaic (the full looks are `_FoundAtOnce`'s)."""

    def detect(self, frame, input_size=None, threshold=None):  # type: ignore[no-untyped-def]
        return []


def test_a_face_the_crops_miss_whose_pixels_only_moved_stays_where_they_are_and_the_frame_known(group_frame, group_faces):
    """Faces a full look found that no crop finds again — a crowd's small faces a 48-px tile does not
    see though the 640 look does — stay where their pixels are while every block of them matches the
    key the look found them on: the frame stays known, nothing is lost, and each is looked at again
    REDETECT_EVERY frames on (not every frame). Before, each crop miss lost the face: the whole frame unknown (held or
    obscured) and a full look asked for, whose find was lost again in its crop the next frame — a
    146-face crowd flapped between known and unknown every other frame. Where the pixels changed
    (every pixel brighter), a miss is still a loss: the face may be anywhere, the frame not known."""
    from vcamd.live.tracking.motion import REDETECT_EVERY

    brighter = cv2.add(group_frame, np.full_like(group_frame, 40))
    for later, still in ((group_frame, True), (brighter, False)):
        tracker = LiveTracker(_CropBlind(), _FoundAtOnce(group_faces), full_every=1000)  # type: ignore[arg-type]
        looked: list[tuple[float, float]] = []
        look = tracker._look

        def counted(frame, frame_index, looked_for, *rest):  # type: ignore[no-untyped-def]
            looked.extend((f.box[0], f.box[1]) for f in looked_for)
            return look(frame, frame_index, looked_for, *rest)

        tracker._look = counted  # type: ignore[method-assign]
        try:
            assert not tracker.update(group_frame.copy(), 1, full_size=640, track_size=192, deadline_s=30.0).known
            reports = []
            for index in range(2, 2 + 3 * REDETECT_EVERY):
                reports.append(tracker.update(later.copy(), index, full_size=640, track_size=192, deadline_s=30.0))
                for _ in range(6000):  # a look not waited for lands before the next frame
                    if tracker._call.idle:
                        break
                    time.sleep(0.01)
            if still:
                assert all(r.known and len(r.faces) == 29 and not r.lost for r in reports), [(r.known, len(r.lost)) for r in reports]
                # Each face missed is due again REDETECT_EVERY frames on: the others, due since the start, go
                # first (one a frame, each look priced at its share), so no face is looked at twice before each had its turn.
                assert len(looked) == len(reports) and len(set(looked[:29])) == len(looked[:29]), looked
            else:  # the look at every changed face lands and misses them all: lost, the frame not known
                assert any(not r.known and len(r.lost) == 29 for r in reports), [(r.known, len(r.lost)) for r in reports]
        finally:
            tracker.stop()


class _NanScores:
    """A detector whose model fails on every run (`FaceDetector` raises on NaN scores)."""

    def detect(self, frame, input_size=None, threshold=None):  # type: ignore[no-untyped-def]
        from vcamd.faces.detect import NonFiniteScores

        raise NonFiniteScores("stand-in returned NaN/Inf face scores", fix="none: a test")


def _landed(tracker: LiveTracker) -> None:
    for _ in range(6000):  # a look not waited for lands before the next frame
        if tracker._call.idle:
            return
        time.sleep(0.01)


def test_only_a_full_looks_faces_are_vouched_for_and_a_failing_detector_vouches_for_none(detector, group_frame, group_faces):
    """The pixels vouch for a face a crop misses only when a full look found it: once its own crop has
    found it (its key that crop's), a miss is the detector no longer seeing what it saw — lost, the
    frame not known; and a crop detector whose runs fail (NaN scores) leaves every frame a miss, never
    a still group taken as there (a failing detector's empty answers must not keep the frame known, or
    vouch that no one else came in)."""
    from vcamd.live.tracking.motion import REDETECT_EVERY

    tracker = LiveTracker(detector, _FoundAtOnce(group_faces), full_every=1000)  # type: ignore[arg-type]
    try:
        for index in range(1, 60):  # the real detector's crops look at every face: keys of their own
            tracker.update(group_frame.copy(), index, full_size=640, track_size=192, deadline_s=30.0)
            _landed(tracker)
            if not tracker.warming:
                break
        assert not tracker.warming and all(not key.coarse for _, key in tracker._keys.values())
        tracker.faces = _CropBlind()  # type: ignore[assignment]
        reports = []
        for index in range(index + 1, index + 1 + 2 * REDETECT_EVERY):
            reports.append(tracker.update(group_frame.copy(), index, full_size=640, track_size=192, deadline_s=30.0))
            _landed(tracker)
        assert any(r.lost and not r.known for r in reports), [(r.known, len(r.lost)) for r in reports]
    finally:
        tracker.stop()
    tracker = LiveTracker(_NanScores(), _FoundAtOnce(group_faces), full_every=1000)  # type: ignore[arg-type]
    try:
        reports = []
        for index in range(1, 1 + 2 * REDETECT_EVERY):
            reports.append(tracker.update(group_frame.copy(), index, full_size=640, track_size=192, deadline_s=30.0))
            _landed(tracker)
        # Frame 2's look at the faces due (pixels only moved) is not waited for: its failure shows from frame 3 on.
        assert not any(r.known for r in reports[2:]), [r.known for r in reports]
    finally:
        tracker.stop()
