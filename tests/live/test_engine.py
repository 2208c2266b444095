"""The live engine in real time: a video file as the camera, the real SCRFD detector, a stand-in
swapper that makes a visible change, and a sink that records what went out."""

from __future__ import annotations

import threading
import time

import cv2
import numpy as np
import pytest

from vcamd.quality import Level

RATE = 20.0  # the test clip's frame rate


def raw_face_regions(clip, detector_engine) -> list[tuple[np.ndarray, tuple[int, int, int, int]]]:
    """Every frame of the clip with the box of its face, as the camera delivers it."""
    cap = cv2.VideoCapture(str(clip))
    out = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        faces = detector_engine.detect(frame, 320)
        assert faces, "the test clip must show a face in every frame"
        x1, y1, x2, y2 = (int(v) for v in faces[0].box)
        out.append((frame, (max(0, x1), max(0, y1), x2, y2)))
    return out


def leaks_raw_face(published: np.ndarray, raws) -> bool:
    """True when the face region of some raw camera frame appears unchanged in `published`."""
    for raw, (x1, y1, x2, y2) in raws:
        diff = np.abs(published[y1:y2, x1:x2].astype(np.int16) - raw[y1:y2, x1:x2].astype(np.int16)).mean()
        if diff < 3.0:  # MJPG decodes identically; a swapped/blurred face differs by far more
            return True
    return False


class BlockingSwapper:
    """Wraps the real face engine; its swap model never returns after `good_calls` calls."""

    def __init__(self, engine, good_calls: int = 0) -> None:
        self._engine = engine
        self._good = good_calls
        self.calls = 0
        self.release = threading.Event()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def swap_faces(self, frame, faces, *args, **kw):
        self.calls += 1
        if self.calls > self._good:
            self.release.wait()  # a hung GPU driver / deadlocked model: never returns in the test
        return self._engine.swap_faces(frame, faces, *args, **kw)


class CrashingSwapper:
    def __init__(self, engine) -> None:
        self._engine = engine
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def swap_faces(self, frame, faces, *args, **kw):
        self.calls += 1
        raise RuntimeError("CUDA error: an illegal memory access was encountered (test)")


def assert_camera_rate(stats, frames: int) -> None:
    assert stats["frames"]["published"] == frames
    assert stats["fps"]["published"] == pytest.approx(RATE, rel=0.12)


def test_publishes_every_frame_at_camera_rate_and_never_the_raw_face(live_config, clip_20fps, run_live, face_engine_factory):
    cfg = live_config()
    stats, sink, engine = run_live(cfg, clip_20fps, frames=50)
    assert_camera_rate(stats, 50)
    f = stats["frames"]
    assert f["passthrough"] == 0 and f["off"] == 0 and f["offline"] == 0
    assert f["swapped"] >= 0.8 * f["published"]
    assert f["swapped"] + f["held"] + f["blurred"] == f["published"]
    # Every frame the camera delivered was either processed or dropped as stale; none queued.
    assert f["processed"] == f["published"]
    assert f["captured"] - f["processed"] - f["dropped"] in (0, 1)
    assert stats["queue_depth"]["max"] <= 1
    assert set(stats["stages_ms"]) >= {"queue", "detect", "composite", "publish", "swap", "loop"}
    assert stats["cpu_ms_per_frame"] > 0
    assert sink.opened and sink.closed
    raws = raw_face_regions(clip_20fps, face_engine_factory(cfg))
    assert not any(leaks_raw_face(frame, raws) for frame in sink.frames)


def test_a_blocked_swapper_never_stalls_the_output(live_config, clip_20fps, run_live):
    cfg = live_config(swap={"on_miss": "hold"})
    holder = {}

    def wrap(engine):
        holder["w"] = BlockingSwapper(engine, good_calls=0)
        return holder["w"]

    stats, sink, _ = run_live(cfg, clip_20fps, frames=40, wrap=wrap)
    holder["w"].release.set()
    assert_camera_rate(stats, 40)
    f = stats["frames"]
    assert f["swapped"] == 0 and f["passthrough"] == 0
    # Nothing good to hold yet: the face is blurred instead of shown.
    assert f["blurred"] == 40
    assert holder["w"].calls == 1  # one job in the stuck model; the rest replaced each other
    # ...which the stats say, so "why is my face not swapped?" has an answer.
    assert stats["misses"]["swap_jobs_replaced"] > 0 and stats["misses"]["swap_errors"] == 0


def test_a_swapper_that_stalls_later_is_held_then_never_leaks(live_config, clip_20fps, run_live, face_engine_factory):
    cfg = live_config(swap={"on_miss": "hold", "max_result_age_s": 0.6})
    holder = {}

    def wrap(engine):
        holder["w"] = BlockingSwapper(engine, good_calls=3)
        return holder["w"]

    stats, sink, _ = run_live(cfg, clip_20fps, frames=50, wrap=wrap, keep_every=1)
    holder["w"].release.set()
    assert_camera_rate(stats, 50)
    f = stats["frames"]
    # Swapped while the model ran, then held once it counted as stalled: never raw.
    assert f["swapped"] > 0 and f["held"] > 0 and f["passthrough"] == 0
    raws = raw_face_regions(clip_20fps, face_engine_factory(cfg))
    assert not any(leaks_raw_face(frame, raws) for frame in sink.frames[::3])


def test_a_crashing_swapper_never_stalls_the_output_and_blur_hides_the_face(live_config, clip_20fps, run_live, face_engine_factory):
    cfg = live_config(swap={"on_miss": "blur"})
    stats, sink, engine = run_live(cfg, clip_20fps, frames=40, wrap=CrashingSwapper)
    assert_camera_rate(stats, 40)
    f = stats["frames"]
    assert f["blurred"] == 40 and f["passthrough"] == 0 and f["swapped"] == 0
    assert stats["misses"]["swap_errors"] > 0  # the reason, counted
    assert set(engine.status()["misses"]) == set(stats["misses"])  # status carries the same counters
    raws = raw_face_regions(clip_20fps, face_engine_factory(cfg))
    assert not any(leaks_raw_face(frame, raws) for frame in sink.frames)


def test_passthrough_policy_publishes_the_raw_frame_and_counts_it(live_config, clip_20fps, run_live):
    """The counter the other tests rely on can fail: with on_miss = passthrough it does count."""
    cfg = live_config(swap={"on_miss": "passthrough"})
    stats, _, _ = run_live(cfg, clip_20fps, frames=20, wrap=CrashingSwapper)
    assert stats["frames"]["passthrough"] == 20


def test_swapping_off_is_not_a_miss(live_config, clip_20fps, run_live, face_engine_factory):
    cfg = live_config(swap={"enabled": False})
    stats, sink, _ = run_live(cfg, clip_20fps, frames=20, keep_every=1)
    f = stats["frames"]
    assert f["off"] == 20 and f["passthrough"] == 0 and f["held"] == 0 and f["blurred"] == 0
    raws = raw_face_regions(clip_20fps, face_engine_factory(cfg))
    assert leaks_raw_face(sink.frames[5], raws)  # the raw picture, as the user asked


def test_camera_lost_publishes_offline_frames_then_resumes(live_config, make_clip, run_live):
    # A 1 s file without loop: it "unplugs" at its end and is reopened (plays again) 0.3 s later.
    clip = make_clip("short.avi", fps=RATE, frames=20)
    cfg = live_config(camera={"reopen_interval_s": 0.3})
    stats, sink, engine = run_live(cfg, clip, frames=60, loop=False, keep_every=1)
    assert_camera_rate(stats, 60)
    f = stats["frames"]
    assert f["offline"] >= 3  # the gap was filled with the offline frame, at the camera's rate
    assert f["processed"] > 20  # camera frames came back after the gap: it resumed by itself
    assert engine.reader.times_lost >= 1 and engine.reader.reopen_attempts >= 1
    assert f["passthrough"] == 0


def test_tracked_keypoints_stay_within_3_percent_of_a_full_detection(live_config, clip_20fps, face_engine_factory):
    from vcamd.live.stats import LiveStats
    from vcamd.live.tracking import FullDetector, LiveTracker

    cfg = live_config()
    faces = face_engine_factory(cfg)
    full = FullDetector(faces, LiveStats(), time.monotonic)
    full.start()
    tracker = LiveTracker(faces, full, full_every=1000)  # one full detection, then tracking only
    cap = cv2.VideoCapture(str(clip_20fps))
    worst, tracked_frames = 0.0, 0
    try:
        for index in range(40):
            ok, frame = cap.read()
            assert ok
            got = tracker.update(frame, index, full_size=320, track_size=192).faces
            if index == 0:
                deadline = time.monotonic() + 5
                while not full.idle and time.monotonic() < deadline:
                    time.sleep(0.01)  # let the first full detection land
                continue
            if not got:
                continue
            reference = faces.detect(frame, 640)[0]
            # mean distance of the five keypoints, as a share of the face width
            err = np.linalg.norm(got[0].kps - reference.kps, axis=1).mean() / reference.width
            worst = max(worst, float(err))
            tracked_frames += 1
    finally:
        full.stop()
    assert tracked_frames >= 35 and full.runs == 1
    assert worst <= 0.03, f"worst tracked keypoint error {worst:.3f} of the face width"


def test_the_watchdog_degrades_a_run_that_cannot_keep_its_budget(live_config, clip_20fps, run_live):
    # A 2 ms budget no CPU can keep: the ladder walks down to frame_skip, each step logged with
    # its trigger and (once the next window completed) its result; frames keep flowing.
    cfg = live_config(watchdog={"budget_ms": 2.0, "window": 5, "cooldown_s": 0.2})
    stats, _, engine = run_live(cfg, clip_20fps, frames=50)
    assert_camera_rate(stats, 50)
    transitions = stats["degradation"]["transitions"]
    assert [(t["from"], t["to"]) for t in transitions] == [("full", "low_res"), ("low_res", "frame_skip")]  # enhancer is off
    assert all(t["trigger"]["over_budget_share"] > 0.3 for t in transitions)
    assert transitions[0]["after"] is not None and transitions[0]["after"]["frames"] == 5
    share = stats["degradation"]["level_share"]
    assert share["frame_skip"] > 0 and sum(share.values()) == pytest.approx(1.0, abs=0.01)
    assert engine.watchdog.level is Level.frame_skip


class FailingDetector:
    """Wraps the real face engine; after `good_calls` detections every detection hangs or raises."""

    def __init__(self, engine, good_calls: int, mode: str) -> None:
        self._engine = engine
        self._good = good_calls
        self.mode = mode
        self.calls = 0
        self.release = threading.Event()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def detect(self, frame, input_size=None):
        self.calls += 1
        if self.calls > self._good:
            if self.mode == "hang":
                self.release.wait()
            else:
                raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION (test)")
        return self._engine.detect(frame, input_size)


@pytest.mark.parametrize("mode", ["hang", "raise"])
def test_a_hung_or_failing_detector_never_stalls_the_output_nor_leaks(live_config, clip_20fps, run_live, mode):
    cfg = live_config(swap={"on_miss": "hold"})
    holder = {}

    def wrap(engine):
        holder["d"] = FailingDetector(engine, good_calls=40, mode=mode)
        return holder["d"]

    stats, sink, engine = run_live(cfg, clip_20fps, frames=60, wrap=wrap, keep_every=1)
    holder["d"].release.set()
    assert_camera_rate(stats, 60)
    f = stats["frames"]
    assert f["swapped"] > 0 and f["held"] > 0 and f["passthrough"] == 0
    gaps = np.diff(sink.times)
    assert gaps.max() < 0.5, f"output paused {gaps.max():.2f} s"


class LateFirstFrame:
    """A camera whose first frame comes only when the test says so (a webcam still starting)."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.release = threading.Event()

    def read(self):
        self.release.wait(60)
        return self._inner.read()

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_a_camera_that_has_not_started_yet_shows_the_starting_card_not_offline(live_config, clip_20fps, recording_sink,
                                                                                face_engine_factory):
    from vcamd.live.engine import LiveEngine
    from vcamd.live.placeholder import OFFLINE_MESSAGE, STARTING_MESSAGE, offline_frame
    from vcamd.live.sources import open_source

    cfg = live_config(camera={"stall_timeout_s": 0.2})
    camera = LateFirstFrame(open_source(str(clip_20fps), cfg.camera, loop=True))
    sink = recording_sink(keep_every=1)
    engine = LiveEngine(cfg, source=camera, sink_factory=lambda w, h, fps: sink, faces=face_engine_factory(cfg))
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(engine.run(max_frames=40)))
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while len(sink.times) < 3:  # the stall timeout passed with no camera frame: cards went out
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.01)
        assert engine.status()["state"] == "starting"
    finally:
        camera.release.set()
        runner.join(120)
    assert not runner.is_alive() and result["frames"]["processed"] > 0
    assert engine.status()["state"] == "stopped"
    w, h = sink.frames[0].shape[1], sink.frames[0].shape[0]
    starting, offline = offline_frame(w, h, STARTING_MESSAGE), offline_frame(w, h, OFFLINE_MESSAGE)
    assert all(np.array_equal(frame, starting) for frame in sink.frames[:3])
    assert not any(np.array_equal(frame, offline) for frame in sink.frames)
