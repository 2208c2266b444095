"""Following a tracked face by its pixels (`vcamd.live.tracking.motion`): a face that only moved is placed
without a detector run, precisely; a face that changed in any other way is re-detected."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.types import Face
from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking import motion
from vcamd.live.tracking.full import FullDetector
from vcamd.live.tracking.tracker import LiveTracker


@pytest.fixture(scope="module")
def detector(assets: Path):
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions

    return FaceDetector(assets / "models" / "scrfd_2.5g_kps.onnx", Sessions(["cpu"], threads=1))


def _scene(newton: np.ndarray, dx: float = 0.0, dy: float = 0.0, *, angle: float = 0.0, scale: float = 1.0,
           centre=(600.0, 330.0)) -> tuple[np.ndarray, np.ndarray]:
    """A 1280×720 camera frame with the portrait (480 px tall) moved by (dx, dy), turned by `angle`
    degrees and scaled by `scale` about `centre`, MJPG-like (JPEG at quality 80); and the 2×3 map."""
    h = 480
    face = cv2.resize(newton, (round(newton.shape[1] * h / newton.shape[0]), h), interpolation=cv2.INTER_AREA)
    base = np.full((720, 1280, 3), 110, np.uint8)
    y0, x0 = 120, 600 - face.shape[1] // 2
    base[y0 : y0 + h, x0 : x0 + face.shape[1]] = face
    m = cv2.getRotationMatrix2D(centre, angle, scale)
    m[:, 2] += (dx, dy)
    frame = cv2.warpAffine(base, m, (1280, 720), flags=cv2.INTER_LINEAR, borderValue=(110, 110, 110))
    ok, jpeg = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 80])
    assert ok
    return cv2.imdecode(jpeg, cv2.IMREAD_COLOR), m


def _mapped(face: Face, m: np.ndarray) -> np.ndarray:
    return np.c_[face.kps, np.ones(5)] @ m.T


@pytest.fixture(scope="module")
def keyed(detector, newton):
    frame, _ = _scene(newton)
    face = max(detector.detect(frame, 640), key=lambda f: f.width)
    key = motion.key_patch(frame, face, 0)
    assert key is not None
    return face, key


@pytest.mark.parametrize("shift", [(3.0, 0.0), (2.4, 1.3), (-5.5, 3.7), (0.0, 0.0)])
def test_a_face_that_only_moved_is_placed_within_1_percent_of_its_width(newton, keyed, shift):
    face, key = keyed
    frame, m = _scene(newton, *shift)
    got = motion.follow(frame, key, face, 1)
    assert got is not None, "a plain shift was not followed"
    err = np.linalg.norm(got.kps - _mapped(face, m), axis=1).mean() / face.width
    assert err <= 0.01, f"keypoints {100 * err:.2f} % of the face width from where the face moved"
    assert got.width == pytest.approx(face.width)


@pytest.mark.parametrize("change", ["turned 2°", "scaled 2 %", "mouth opened", "light 8 % brighter", "another face"])
def test_a_face_that_changed_otherwise_is_re_detected(newton, keyed, change):
    face, key = keyed
    kw = {"turned 2°": {"angle": 2.0, "centre": tuple(face.kps.mean(0))},
          "scaled 2 %": {"scale": 1.02, "centre": tuple(face.kps.mean(0))}}.get(change, {})
    frame, _ = _scene(newton, 3.0, 0.0, **kw)
    if change == "mouth opened":
        mouth = face.kps[3:5].mean(0) + (3.0, 4.0)
        cv2.ellipse(frame, (int(mouth[0]), int(mouth[1])), (int(face.width * 0.15), int(face.width * 0.06)), 0, 0, 360, (40, 40, 60), -1)
    elif change == "light 8 % brighter":
        frame = cv2.convertScaleAbs(frame, alpha=1.08)
    elif change == "another face":
        x1, y1, x2, y2 = (int(v) for v in face.box)
        frame[y1:y2, x1:x2] = cv2.flip(frame[y1:y2, x1:x2], 1)
    assert motion.follow(frame, key, face, 1) is None


def _noisy(frame: np.ndarray, sigma: float, seed: int = 0) -> np.ndarray:
    """`frame` with a camera's sensor noise (Gaussian, `sigma` levels a pixel, each channel)."""
    noise = np.random.default_rng(seed).normal(0.0, sigma, frame.shape)
    return np.clip(np.rint(frame + noise), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("shift", [(1.5, 0.0), (0.0, -1.0), (0.8, 0.8)])
def test_a_face_moved_a_pixel_or_so_under_noise_is_measured_and_placed_not_taken_as_is(newton, keyed, shift):
    """The noise rule takes a face as is only while its difference shows no shift (NOISE_SHIFT
    patch pixels): a face moved a pixel or so before the same noise is measured, and placed
    within 1 % of its width, as any moved face."""
    face, key = keyed
    frame, m = _scene(newton, *shift)
    got = motion.follow(_noisy(frame, 2.0), key, face, 1)
    assert got is not None and got is not key.face
    assert np.linalg.norm(got.kps - _mapped(face, m), axis=1).mean() / face.width <= 0.01


def test_the_detector_looks_again_at_least_every_redetect_every_frames(newton, keyed):
    face, key = keyed
    frame, _ = _scene(newton, 1.0, 0.0)
    assert motion.follow(frame, key, face, motion.REDETECT_EVERY - 1) is not None
    assert motion.follow(frame, key, face, motion.REDETECT_EVERY) is None


def test_a_tiny_face_or_one_larger_than_half_the_frame_has_no_key_and_is_always_re_detected(newton):
    frame, _ = _scene(newton)
    tiny = Face(box=(600.0, 300.0, 606.0, 307.0), score=0.9, kps=np.zeros((5, 2), np.float32))
    huge = Face(box=(300.0, 0.0, 700.0, 400.0), score=0.9, kps=np.zeros((5, 2), np.float32))  # its square: 800 px, the frame 720
    assert motion.key_patch(frame, tiny, 0) is None and motion.key_patch(frame, huge, 0) is None


def test_a_face_at_the_frame_edge_is_followed_as_anywhere_and_re_detected_when_it_changed(newton, detector, keyed):
    """Its square, which would reach past the edge, is moved inside the frame (a crowd's faces
    along the edges would otherwise be re-detected in every frame)."""
    centre_x = (keyed[0].box[0] + keyed[0].box[2]) / 2
    at_edge = -(centre_x - 0.8 * keyed[0].width)  # the face's centre 0.8 of its width from the left edge
    frame, _ = _scene(newton, at_edge)
    face = max(detector.detect(frame, 640), key=lambda f: f.width)
    key = motion.key_patch(frame, face, 0)
    assert key is not None and key.x0 == 0  # moved inside the frame
    for shift in ((0.0, 0.0), (2.5, 1.0), (-1.5, 0.0)):
        moved, m = _scene(newton, at_edge + shift[0], shift[1])
        got = motion.follow(moved, key, face, 1)
        assert got is not None, f"a plain shift {shift} at the edge was not followed"
        expected = np.c_[face.kps, np.ones(5)] @ np.array([[1.0, 0.0, shift[0]], [0.0, 1.0, shift[1]]]).T
        assert np.linalg.norm(got.kps - expected, axis=1).mean() / face.width <= 0.01
    changed, _ = _scene(newton, at_edge)
    x1, y1, x2, y2 = (int(v) for v in face.box)
    changed[y1:y2, max(0, x1):x2] = cv2.flip(changed[y1:y2, max(0, x1):x2], 1)
    assert motion.follow(changed, key, face, 1) is None


class CountingDetector:
    def __init__(self, detector) -> None:
        self._d = detector
        self.calls = 0

    def detect(self, frame, input_size=None, threshold=None):
        self.calls += 1
        return self._d.detect(frame, input_size, threshold)


def test_the_tracker_follows_a_sliding_face_and_runs_the_detector_on_fewer_frames(detector, newton):
    counting = CountingDetector(detector)
    full = FullDetector(counting, LiveStats(), time.monotonic)
    full.start()
    tracker = LiveTracker(counting, full, full_every=1000)
    try:
        worst, crop_calls = 0.0, 0
        for i in range(24):
            frame, m = _scene(newton, 3.0 * i, float(int(6 * np.sin(i / 7.0))))
            before = counting.calls
            report = tracker.update(frame, i, full_size=640, track_size=192, deadline_s=30.0)
            if i == 0:
                deadline = time.monotonic() + 30
                while not full.idle and time.monotonic() < deadline:
                    time.sleep(0.01)  # the first full detection lands
                continue
            crop_calls += counting.calls - before
            if i >= 2:
                assert report.known and len(report.faces) == 1
                reference = detector.detect(frame, 640)[0]
                worst = max(worst, float(np.linalg.norm(report.faces[0].kps - reference.kps, axis=1).mean() / reference.width))
        # Without following, every one of the 23 frames runs its crop.
        assert crop_calls <= 23 * 2 // motion.REDETECT_EVERY + 2, f"{crop_calls} detector runs in 23 frames"
        assert tracker.followed_faces >= 23 // 2
        assert worst <= 0.03, f"worst keypoint error {worst:.3f} of the face width"
    finally:
        full.stop()
        tracker.stop()


def test_a_face_that_turns_is_re_detected_every_frame(detector, newton):
    counting = CountingDetector(detector)
    full = FullDetector(counting, LiveStats(), time.monotonic)
    full.start()
    tracker = LiveTracker(counting, full, full_every=1000)
    try:
        for i in range(8):
            frame, _ = _scene(newton, angle=3.0 * i, centre=(600.0, 300.0))
            before = counting.calls
            tracker.update(frame, i, full_size=640, track_size=192, deadline_s=30.0)
            if i == 0:
                deadline = time.monotonic() + 30
                while not full.idle and time.monotonic() < deadline:
                    time.sleep(0.01)
            elif i >= 2:
                assert counting.calls - before == 1, f"frame {i}: a turning face was not re-detected"
        assert tracker.followed_faces == 0
    finally:
        full.stop()
        tracker.stop()


def test_the_live_loop_asks_for_a_swap_only_when_the_tracker_looked_again_and_never_shows_the_raw_face(
        live_config, clip_20fps, run_live, face_engine_factory):
    """The face slides 3 px a frame: on followed frames the last swap is pasted where the face is
    now, so the swap model runs on about one frame in REDETECT_EVERY — and every frame after the
    first swap is still swapped, none shows the raw face."""
    from tests.live.test_engine import leaks_raw_face, raw_face_regions

    cfg = live_config()
    handed: list[tuple[bool, bool]] = []  # per job handed in: (a followed frame, the worker idle with a swap to paste)

    stats, sink, engine = run_live(cfg, clip_20fps, frames=40, keep_every=1, before_run=lambda e: _record_jobs(e, handed))
    assert engine.parts.tracker.followed_frames >= 10
    # A followed frame hands a job in only while a swap is running (the newest frame for the next
    # one, next test); an idle worker with a swap to paste gets none for a face that only moved.
    assert not any(followed and idle for followed, idle in handed), handed
    fresh = sum(1 for followed, _ in handed if not followed)
    assert fresh <= 40 - engine.parts.tracker.followed_frames + 1, f"{fresh} swap jobs from detections for 40 frames"
    f = stats["frames"]
    assert f["passthrough"] == 0 and f["swapped"] >= 30
    raws = raw_face_regions(clip_20fps, face_engine_factory(cfg))
    assert not any(leaks_raw_face(frame, raws) for frame in sink.frames)


def _record_jobs(engine, handed: list[tuple[bool, bool]]) -> None:
    """Wrap the swap worker's `submit`: each job handed in, with whether the frame was followed
    (the frame work's report for it) and whether the worker was idle with a result to paste."""
    worker, frames = engine.parts.worker, engine.frames
    submit = worker.submit

    def recorded(job) -> None:
        handed.append((frames._report.followed, worker.idle and worker.latest()[0] is not None))
        submit(job)

    worker.submit = recorded


def test_while_a_swap_runs_the_job_waiting_for_it_is_the_newest_frame_followed_or_not(live_config, clip_20fps, run_live) -> None:
    """A swap held (the first one after a swap landed) while the face slides: a followed frame's
    job replaces the one waiting, and the job the worker takes once released is that frame's or
    newer — not the last detection's, up to a few frames older (the face on screen that much
    older for the whole next swap). Before, followed frames handed nothing in: never released."""
    release, holding = threading.Event(), threading.Event()
    engines: list = []

    class Held:
        def __init__(self, faces) -> None:
            self._faces = faces

        def __getattr__(self, name):
            return getattr(self._faces, name)

        def swap_faces(self, *args, **kw):
            if engines and engines[0].parts.worker.latest()[0] is not None and not holding.is_set():
                holding.set()
                release.wait(30)
            return self._faces.swap_faces(*args, **kw)

    trigger: list[float] = []  # the followed frame whose job was handed in while the swap was held
    taken: list[float] = []  # jobs the worker took after the release

    def watch(engine) -> None:
        engines.append(engine)
        worker, frames = engine.parts.worker, engine.frames
        submit, work = worker.submit, worker._work

        def recorded(job) -> None:
            if holding.is_set() and not release.is_set() and frames._report.followed:
                trigger.append(job.t_capture)
                release.set()
            submit(job)

        def working(job):
            if release.is_set():
                taken.append(job.t_capture)
            return work(job)

        worker.submit, worker._work = recorded, working

    run_live(live_config(), clip_20fps, frames=400, wrap=Held, before_run=watch, until=lambda sink: bool(taken))
    assert trigger, "no followed frame's job was handed in while a swap ran"
    assert taken and taken[0] >= trigger[0]


def test_a_still_face_gets_the_last_frames_paste_back_and_never_shows_raw(live_config, tmp_path, newton, run_live, face_engine_factory):
    from tests.live.test_engine import leaks_raw_face, raw_face_regions
    from vcamd.bench.clips import write_sliding_clip

    clip = write_sliding_clip(tmp_path / "still.avi", newton, size=(640, 480), fps=20.0, frames=40, step_px=0)
    cfg = live_config()
    stats, sink, engine = run_live(cfg, clip, frames=40, keep_every=1)
    assert engine.frames._repaint.put_back >= 10
    f = stats["frames"]
    assert f["passthrough"] == 0 and f["swapped"] >= 30
    raws = raw_face_regions(clip, face_engine_factory(cfg))
    assert not any(leaks_raw_face(frame, raws) for frame in sink.frames)
    # A replayed frame is the same picture as a pasted one (the face did not move).
    swapped = [fr for fr in sink.frames[20:]]
    assert max(float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean()) for a, b in zip(swapped, swapped[1:])) < 1.0


@pytest.fixture(scope="module")
def crowd_keys(detector, assets: Path):
    """crowd_selfie.jpg as a 1080p camera frame (every grey level under 250: room for a step up), and
    each face SCRFD-2.5G finds in it with its key patch."""
    frame = cv2.resize(cv2.imread(str(assets / "images" / "crowd_selfie.jpg")), (1920, 1080), interpolation=cv2.INTER_AREA)
    frame = np.minimum(frame, 249).astype(np.uint8)
    keys = [(face, key) for face in detector.detect(frame, 640) if (key := motion.key_patch(frame, face, 0)) is not None]
    assert len(keys) >= 100 and len({k.factor for _, k in keys}) >= 2  # a crowd, small and larger faces
    return frame, keys


def _crowd_variants(frame: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(38)
    half = frame.copy()
    half[:, 960:] = cv2.warpAffine(frame, np.float32([[1, 0, 2.4], [0, 1, -1.3]]), (1920, 1080), borderMode=cv2.BORDER_REPLICATE)[:, 960:]
    lines = frame.copy()
    lines[::9] = 0
    return {
        "the same picture": frame,
        "camera noise": np.clip(frame + rng.normal(0.0, 1.5, frame.shape), 0, 255).astype(np.uint8),
        "re-encoded": cv2.imdecode(cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 75])[1], cv2.IMREAD_COLOR),
        "half the crowd moved": half,
        "brighter": cv2.add(frame, 6),
        "one level brighter": frame + np.uint8(1),  # block differences of exactly ZERO_LIMIT: ties decided alike
        "changed": lines,
    }


def test_a_crowd_is_followed_in_one_batch_exactly_as_face_by_face(crowd_keys):
    """`follow_many` (the tracker's call: a crowd's still faces checked together) answers for every
    face what `follow` answers for it alone, as it did face by face — followed or not, taken as is or
    moved, and where — on a still picture, camera noise, a re-encode, half the crowd moved, light
    changes (one level: every block at exactly ZERO_LIMIT) and a changed picture."""
    frame, keys = crowd_keys
    answers: set[str] = set()
    for name, now in _crowd_variants(frame).items():
        many = motion.follow_many(now, [(key, face) for face, key in keys])
        for (face, key), got in zip(keys, many, strict=True):
            alone = motion.follow(now, key, face, 1, backstop=False)
            assert (got is None) == (alone is None), name
            if got is not None and alone is not None:
                assert got.box == alone.box and np.array_equal(got.kps, alone.kps), name
                assert (got is key.face) == (alone is key.face), name  # a still face is handed on as the same object
                answers.add("same place" if got is key.face else "moved")
            else:
                answers.add("re-detected")
    assert answers == {"same place", "moved", "re-detected"}  # every kind of answer was compared



def test_a_faces_blocks_are_an_area_resize_of_its_box_at_any_size_alone_or_padded_in_a_batch():
    """The block means every follow decision reads (`motion._block_means`, one batched product for a
    crowd) are what OpenCV's INTER_AREA resize of the face's box to BLOCK_GRID² gives, for boxes of
    every size from BLOCK_GRID to 160 pixels a side, whether a face is alone or padded among larger ones."""
    rng = np.random.default_rng(7)
    sizes = np.array([(h, w) for h in range(motion.BLOCK_GRID, 161, 3) for w in (motion.BLOCK_GRID, 17, 64, 101, 160)])
    diffs = np.zeros((len(sizes), 160, 160), np.float32)
    for j, (h, w) in enumerate(sizes):
        diffs[j, :h, :w] = rng.random((h, w), np.float32) * 255
    batched = motion._block_means(diffs, sizes)
    for j, (h, w) in enumerate(sizes):
        area = cv2.resize(diffs[j, :h, :w], (motion.BLOCK_GRID, motion.BLOCK_GRID), interpolation=cv2.INTER_AREA)
        alone = motion._block_means(diffs[j : j + 1, :h, :w], sizes[j : j + 1])[0]
        assert np.abs(batched[j] - area).max() < 1e-3, (h, w)
        assert np.abs(batched[j] - alone).max() < 1e-4, (h, w)
    # whole grey levels (a picture one level brighter: every block exactly at ZERO_LIMIT) alike to the bit
    levels = np.ones_like(diffs)
    assert np.array_equal(motion._block_means(levels, sizes), np.ones((len(sizes), motion.BLOCK_GRID, motion.BLOCK_GRID), np.float32))


@pytest.mark.parametrize("factor", [1, 2, 3, 6, 11])
def test_a_squares_patch_pixels_are_its_blocks_exact_means_alone_or_stacked(factor):
    """The patch a key and every later frame are compared on (`motion._block_grey`): each patch pixel
    is the mean of its factor × factor block of grey pixels, correctly rounded to float32 — for one
    square, a stack of squares (a crowd's, cut together), a flat one, and squares whose sums pass what
    a 32-bit table holds; a square that is not whole blocks is refused, not averaged past its edge."""
    rng = np.random.default_rng(factor)
    n = 23

    def exact(grey: np.ndarray) -> np.ndarray:
        *lead, hf, wf = grey.shape
        blocks = grey.reshape(*lead, hf // factor, factor, wf // factor, factor).astype(np.float64)
        return blocks.mean(axis=(-3, -1)).astype(np.float32)

    one = rng.integers(0, 256, (n * factor, n * factor), np.uint8)
    stack = rng.integers(0, 256, (5, n * factor, n * factor), np.uint8)
    flat = np.full((n * factor, n * factor), 255, np.uint8)
    for grey in (one, stack, flat):
        assert np.array_equal(motion._block_grey(grey, factor), exact(grey))
    if factor > 1:
        with pytest.raises(ValueError, match="whole"):
            motion._block_grey(one[:-1], factor)
        big = np.full((8_500_000 // (n * factor) // factor * factor, n * factor), 255, np.uint8)  # its sum: past 2³¹
        assert np.array_equal(motion._block_grey(big, factor), exact(big))


@pytest.mark.parametrize("sigma", [1.5, 3.0])
def test_a_still_crowd_before_a_noisy_camera_is_taken_as_is_without_measuring_shifts(crowd_keys, monkeypatch, sigma):
    """Sensor noise moves every block of a small still face by a level or more (past ZERO_LIMIT), but
    shows no shift: the crowd's faces are handed on as their keys' detections, in the batch — not a
    phase correlation a face every frame (~0.18 ms each: 28 ms for this crowd) — and not one of them is
    re-detected for the noise. The same crowd moved a pixel is measured face by face, as before."""
    frame, keys = crowd_keys
    calls = []
    correlate = motion.cv2.phaseCorrelate
    monkeypatch.setattr(motion.cv2, "phaseCorrelate", lambda *a: calls.append(1) or correlate(*a))
    pairs = [(key, face) for face, key in keys]
    for seed in range(2):
        got = motion.follow_many(_noisy(frame, sigma, seed), pairs)
        assert all(g is not None for g in got)
        assert sum(g is key.face for g, (key, _) in zip(got, pairs)) >= 0.95 * len(pairs)
        assert len(calls) <= 0.05 * len(pairs) * (seed + 1)
    moved = cv2.warpAffine(frame, np.float32([[1, 0, 1.0], [0, 1, 0.0]]), (1920, 1080), borderMode=cv2.BORDER_REPLICATE)
    got = motion.follow_many(_noisy(moved, sigma), pairs)
    small = [k for k, (key, _) in enumerate(pairs) if key.factor == 1]
    assert sum(got[k] is pairs[k][0].face for k in small) <= 0.05 * len(small)  # moved a patch pixel: measured
    # A third of a pixel: most faces' blocks stay inside the noise band, where the noise rule itself
    # must see the shift (`_no_shift`) — not one face in twenty taken as is.
    nudged = cv2.warpAffine(frame, np.float32([[1, 0, 0.3], [0, 1, 0.0]]), (1920, 1080), borderMode=cv2.BORDER_REPLICATE)
    got = motion.follow_many(_noisy(nudged, sigma), pairs)
    assert sum(g is key.face for g, (key, _) in zip(got, pairs)) <= 0.05 * len(pairs)
