"""The live engine in real time: a video file as the camera, the real SCRFD detector, a stand-in
swapper that makes a visible change, and a sink that records what went out."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.live import Wrapped, make_engine
from support.video import read_video

from vcamd.common.quality import Level
from vcamd.common.types import Outcome
from vcamd.live.capture.sources import SyntheticCamera
from vcamd.live.engine import LiveEngine
from vcamd.sinks.null import NullSink

RATE = 20.0  # the test clip's frame rate


def raw_face_regions(clip, detector_engine) -> list[tuple[np.ndarray, tuple[int, int, int, int]]]:
    """Every frame of the clip with the box of its face, as the camera delivers it."""
    out = []
    for frame in read_video(clip):
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
    """The run published `frames` frames, exactly one for each camera frame it took (placeholder
    cards and the start's kept frames processed again aside): the output went on at the camera's pace whatever the models did — a loop waiting
    on a hung model would have stopped short of `frames` for good. How fast that pace is on a busy
    machine is a benchmark figure (`vcamd bench`: published ÷ camera fps), not asserted here."""
    f = stats["frames"]
    assert f["published"] == frames
    assert f["processed"] + f["again"] + f["offline"] + f["starting"] == f["published"], f


def test_publishes_every_frame_at_camera_rate_and_never_the_raw_face(live_config, clip_20fps, run_live, face_engine_factory):
    cfg = live_config()
    stats, sink, engine = run_live(cfg, clip_20fps, frames=50)
    assert_camera_rate(stats, 50)
    f = stats["frames"]
    assert f["passthrough"] == 0 and f["off"] == 0 and f["offline"] == 0
    assert f["swapped"] >= 0.8 * f["published"]
    assert f["swapped"] + f["held"] + f["blurred"] == f["published"]
    # Every frame the camera delivered was either processed or dropped as stale; none queued.
    assert f["processed"] + f["again"] == f["published"]  # again: the start's kept frames (`startframes`)
    assert f["captured"] - f["processed"] - f["dropped"] in (0, 1)
    assert stats["queue_depth"]["max"] <= 1
    assert set(stats["stages_ms"]) >= {"queue", "detect", "composite", "publish", "swap", "loop"}
    assert stats["cpu_ms_per_frame"] > 0
    # The camera's decode is counted apart, and is part of the whole.
    assert 0 < stats["camera_cpu_ms_per_frame"] < stats["cpu_ms_per_frame"]
    assert sink.opened and sink.closed
    raws = raw_face_regions(clip_20fps, face_engine_factory(cfg))
    assert not any(leaks_raw_face(frame, raws) for frame in sink.frames)


# Where the CPU went (`vcamd bench` prints it, so a regression names its stage): the shape of the
# breakdown, never its timing.
THREADS = {"loop", "camera-reader", "face-tracker", "full-detector", "swap-worker", "other threads"}
LOOP_STAGES = {"loop: between frames", "loop: cover changes", "loop: track", "loop: smooth, select", "loop: swap hand-off",
               "loop: composite", "loop: badge", "loop: publish", "loop: stats, watchdog"}
WORKER_STAGES = {"camera: read + decode", "crop detection (tracker thread)", "full detection", "swap: align, model, crops"}


def test_the_cpu_is_split_by_thread_and_by_stage_and_adds_up_to_the_whole(live_config, clip_20fps, run_live):
    stats, _, _ = run_live(live_config(), clip_20fps, frames=40)
    by = stats["cpu_ms_per_frame_by"]
    assert set(by["threads"]) == THREADS
    assert set(by["stages"]) <= LOOP_STAGES | WORKER_STAGES | {"other threads"}
    # Every stage a swapped frame passes through was reached (a frame that is swapped was tracked,
    # composed, badged and published; the workers ran).
    assert {"loop: track", "loop: composite", "loop: badge", "loop: publish", "loop: cover changes"} | WORKER_STAGES <= set(by["stages"])
    assert all(v >= 0 for part in by.values() for v in part.values())
    whole = stats["cpu_ms_per_frame"]
    # Threads and stages are two splits of one total: the process's CPU (rounding, and the readings
    # taken a moment apart at the end, aside).
    assert sum(by["threads"].values()) == pytest.approx(whole, rel=0.05, abs=0.1)
    assert sum(by["stages"].values()) == pytest.approx(whole, rel=0.05, abs=0.1)
    assert sum(v for k, v in by["stages"].items() if k.startswith("loop")) == pytest.approx(by["threads"]["loop"], abs=0.1)
    assert by["threads"]["camera-reader"] == by["stages"]["camera: read + decode"] == pytest.approx(stats["camera_cpu_ms_per_frame"], abs=0.05)


COSTLY_START_FRAMES = 20
START_BURN_S = 0.1


def _costly_start(engine) -> None:
    """Each published frame before the COSTLY_START_FRAMES-th burns START_BURN_S of the loop thread's
    CPU (as the start's first swaps and full looks cost more than a steady frame)."""
    stats = engine.parts.stats
    record = stats.record_publish

    def record_publish(*args, **kwargs) -> None:
        record(*args, **kwargs)
        if stats.published < COSTLY_START_FRAMES:
            until = time.thread_time() + START_BURN_S
            while time.thread_time() < until:
                pass

    stats.record_publish = record_publish


def test_the_cpu_figures_count_from_the_frame_asked_leaving_the_start_out(live_config, clip_20fps, run_live):
    """`count_cpu_from(k)` (`vcamd bench` and the loop-cost rows measure a steady frame): the figures
    are the frames from the k-th published one on — the start's cost left out, said in cpu_from_frame —
    and the splits still add up to the whole; a run shorter than k counts from its start."""
    frames = 60

    def before_run(engine) -> None:
        _costly_start(engine)
        engine.parts.stats.count_cpu_from(COSTLY_START_FRAMES)

    stats, _, _ = run_live(live_config(), clip_20fps, frames=frames, before_run=before_run)
    assert stats["cpu_from_frame"] == COSTLY_START_FRAMES
    by = stats["cpu_ms_per_frame_by"]
    # Counted from the start, the burn alone would be this much of every frame's loop.
    burn_ms = 1000 * START_BURN_S * (COSTLY_START_FRAMES - 1) / frames
    assert by["threads"]["loop"] < burn_ms / 2, by["threads"]
    assert sum(by["threads"].values()) == pytest.approx(stats["cpu_ms_per_frame"], rel=0.05, abs=0.1)
    assert sum(by["stages"].values()) == pytest.approx(stats["cpu_ms_per_frame"], rel=0.05, abs=0.1)
    assert by["threads"]["camera-reader"] == pytest.approx(stats["camera_cpu_ms_per_frame"], abs=0.05)

    short, _, _ = run_live(live_config(), clip_20fps, frames=10, before_run=lambda e: e.parts.stats.count_cpu_from(COSTLY_START_FRAMES))
    assert short["cpu_from_frame"] == 0 and short["cpu_ms_per_frame"] > 0


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


def first_swap_waits(engine, ready) -> Wrapped:
    """The real face engine whose first swap waits until `ready()` says so (then works)."""
    calls = []

    def swap_faces(frame, faces, *args, **kw):
        calls.append(1)
        if len(calls) == 1:
            deadline = time.monotonic() + 60.0
            while not ready() and time.monotonic() < deadline:
                time.sleep(0.005)
        return engine.swap_faces(frame, faces, *args, **kw)

    return Wrapped(engine, swap_faces=swap_faces)


def test_while_the_first_swap_runs_the_frame_is_covered_whole_and_the_faces_tracked_sparsely(
        live_config, clip_20fps, face_engine_factory, recording_sink):
    """Until the first swap lands nothing can be pasted: every frame is covered whole (a mosaic:
    no face, no background detail) and the tracker runs on every FIRST_SWAP_TRACK_STRIDE-th frame
    only, which leaves the cores to the swap; it keeps the face found, so the swap is pasted as
    soon as it lands."""
    from vcamd.live.frames import FIRST_SWAP_TRACK_STRIDE

    cfg = live_config()
    sink = recording_sink(keep_every=1)
    held_frames = 30
    first_job: list[int] = []  # the loop's index of the frame whose faces went to the swap worker first
    released_at: list[int] = []  # frames published when the first swap was let go

    def held_long_enough() -> bool:
        if not first_job or len(sink.times) < first_job[0] + held_frames:
            return False
        released_at[:] = released_at or [len(sink.times)]
        return True

    faces = first_swap_waits(face_engine_factory(cfg), ready=held_long_enough)
    engine = make_engine(cfg, clip_20fps, faces, sink)
    updates: list[int] = []
    update, submit = engine.parts.tracker.update, engine.parts.worker.submit

    def counted(frame, frame_index, **kw):
        updates.append(frame_index)
        return update(frame, frame_index, **kw)

    def first_noted(job, *args, **kw):
        first_job[:] = first_job or [job.frame_index]
        return submit(job, *args, **kw)

    engine.parts.tracker.update = counted  # type: ignore[method-assign]
    engine.parts.worker.submit = first_noted  # type: ignore[method-assign]
    stats = engine.run(max_frames=held_frames + 40)
    assert first_job and released_at, "the first swap was never submitted, or never let go"
    start, end = first_job[0], released_at[0]
    covered = [_covered_whole(f) for f in sink.frames]
    # Covered whole until the first swap landed — from the frame after the one whose faces went
    # to the swap worker (the frames before it: no face known yet, or the face obscured alone).
    assert sum(not c for c in covered[:end]) <= 2, covered[:end]
    # While the first swap ran the tracker looked on every FIRST_SWAP_TRACK_STRIDE-th frame, not on
    # each. (Before it, it looks on every frame until a face is found: how many frames that takes
    # depends on how busy the machine is, so those are not counted.)
    sparse = [i for i in updates if start < i <= end]
    assert 0 < len(sparse) <= (end - start) // FIRST_SWAP_TRACK_STRIDE + 2, (start, end, sparse)
    # The face was still tracked when the swap landed: pasted within two frames of it, and from
    # then on the frames show the swapped face, not a cover.
    first_swapped = next(i for i in range(end, len(covered)) if not covered[i])
    assert first_swapped <= end + 2, (first_swapped, end)
    assert stats["frames"]["swapped"] >= 15 and stats["frames"]["passthrough"] == 0
    raws = raw_face_regions(clip_20fps, face_engine_factory(cfg))
    assert not any(leaks_raw_face(frame, raws) for frame in sink.frames)


def _covered_whole(frame: np.ndarray) -> bool:
    """The whole-frame mosaic (`obscure_frame`: 4 blocks along the longer side): the middle of a
    block inside the frame is one flat colour (a camera frame, or one with a pasted face, never is)."""
    height, width = frame.shape[:2]
    block = -(-max(width, height) // 4)
    patch = frame[block + 8 : 2 * block - 8, block + 8 : 2 * block - 8]
    return bool(patch.size) and bool((patch == patch[0, 0]).all())


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
    frames = stats["frames"]
    # Every frame is the raw camera frame, counted as such — but a frame that comes while the first
    # (crashing) swap is still running is covered whole (`send_covered`: passthrough is the opt-out
    # for a running swapper's misses, not for the wait before any swap exists). On a busy machine
    # the worker may take a frame interval to get the crash back, so such frames are allowed, and
    # counted as covered, never as passthrough.
    assert frames["passthrough"] + frames["blurred"] == 20, frames
    assert frames["passthrough"] >= 15, frames


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
    assert engine.parts.reader.times_lost >= 1 and engine.parts.reader.reopen_attempts >= 1
    assert f["passthrough"] == 0


def test_tracked_keypoints_stay_within_3_percent_of_a_full_detection(live_config, clip_20fps, face_engine_factory):
    from vcamd.live.measures.stats import LiveStats
    from vcamd.live.tracking.full import FullDetector
    from vcamd.live.tracking.tracker import LiveTracker

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
    assert engine.parts.watchdog.level is Level.frame_skip


class FailingDetector:
    """Wraps the real face engine; after `good_calls` detections every detection hangs or raises
    (`failed` is set at the first bad call)."""

    def __init__(self, engine, good_calls: int, mode: str) -> None:
        self._engine = engine
        self._good = good_calls
        self.mode = mode
        self.calls = 0
        self.release = threading.Event()
        self.failed = threading.Event()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def detect(self, frame, input_size=None, threshold=None):
        self.calls += 1
        if self.calls > self._good:
            self.failed.set()
            if self.mode == "hang":
                self.release.wait()
            else:
                raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION (test)")
        return self._engine.detect(frame, input_size, threshold)


@pytest.mark.parametrize("mode", ["hang", "raise"])
def test_a_hung_or_failing_detector_never_stalls_the_output_nor_leaks(live_config, clip_20fps, run_live, mode):
    """The detector goes bad after its 10th call; the run goes on for 30 frames past that point.
    How many frames those 10 calls take depends on the machine (on a busy one the watchdog skips
    frames and detections come less often), so the run stops on that condition, not on a count."""
    cfg = live_config(swap={"on_miss": "hold"})
    holder = {}
    after_failure = 30

    def wrap(engine):
        holder["d"] = FailingDetector(engine, good_calls=10, mode=mode)
        return holder["d"]

    def failed_long_ago(sink) -> bool:
        if not holder["d"].failed.is_set():
            return False
        seen_at = holder.setdefault("frames_when_seen", len(sink.times))
        return len(sink.times) >= seen_at + after_failure

    cap = 2000
    stats, sink, engine = run_live(cfg, clip_20fps, frames=cap, wrap=wrap, keep_every=1, until=failed_long_ago)
    holder["d"].release.set()
    assert holder["d"].failed.is_set(), f"the detector was called {holder['d'].calls} times in {cap} frames"
    assert_camera_rate(stats, len(sink.times))
    f = stats["frames"]
    assert f["swapped"] > 0 and f["held"] > 0 and f["passthrough"] == 0, f
    gaps = np.diff(sink.times)
    assert gaps.max() < 0.5, f"output paused {gaps.max():.2f} s"


def test_frame_skip_keeps_an_unselected_face_a_passthrough_not_a_blur_every_other_frame(
    live_config, clip_20fps, face_engine_factory, recording_sink
):
    """At frame_skip, skipped frames took `found` from the reused targets: faces present but none
    selected (face_selection = reference, someone else) became a 'miss' — blurred — every other frame.
    `others = "show"`: the face left alone by choice (with the default "obscure" it is obscured,
    and counted blurred, on every frame)."""
    cfg = live_config(swap={"on_miss": "blur", "others": "show"})
    faces = Wrapped(face_engine_factory(cfg), select=lambda found, frame: [])
    sink = recording_sink(keep_every=100)
    engine = make_engine(cfg, clip_20fps, faces, sink)
    engine.set_quality(Level.frame_skip)
    stats = engine.run(max_frames=40)
    f = stats["frames"]
    # Only the first frames (before the first full detection lands) may be blurred.
    assert f["passthrough"] >= 30 and f["blurred"] <= 8, f


def test_a_failed_start_releases_the_camera_and_the_tracker_thread(live_config, clip_20fps, face_engine_factory, recording_sink):
    """A detector failing its warm-up (after the camera was opened) left the camera open and the
    tracker's worker thread waiting forever."""
    cfg = live_config()

    def broken_detect(frame, input_size=None):
        raise RuntimeError("CUDA error: out of memory (test)")

    faces = Wrapped(face_engine_factory(cfg), detect=broken_detect)
    engine = make_engine(cfg, clip_20fps, faces, recording_sink())
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.run(max_frames=5)
    assert engine.parts.source._cap is None, "the camera was left open"
    engine.parts.tracker.call_thread.join(2.0)
    assert not engine.parts.tracker.call_thread.is_alive(), "the tracker thread was left running"


class CallsOnSend:
    """A sink that calls `on_send()` at every published frame: what the process is like then."""

    url = None

    def __init__(self, on_send) -> None:
        self.on_send = on_send

    def open(self) -> None: ...

    def send(self, frame, stats) -> None:
        self.on_send()

    def close(self) -> None: ...


def test_opencv_runs_single_threaded_while_the_engine_runs_and_is_given_back_after(live_config, clip_20fps, face_engine_factory):
    """OpenCV's own pool is off while the engine runs (its small per-face operations already run on
    the engine's threads: docs/performance.md), and the process gets its setting back after — also
    after a start that failed."""
    from vcamd.live.process import OPENCV_THREADS

    cfg = live_config()
    before = cv2.getNumThreads()
    cv2.setNumThreads(3)
    try:
        seen: list[int] = []
        threads_seen = CallsOnSend(lambda: seen.append(cv2.getNumThreads()))
        engine = LiveEngine(cfg, source=SyntheticCamera(160, 120, 30.0), sink_factory=lambda w, h, fps: threads_seen,
                            faces=face_engine_factory(cfg))
        engine.run(max_frames=3)
        assert seen and set(seen) == {OPENCV_THREADS} and cv2.getNumThreads() == 3

        def broken_detect(frame, input_size=None):
            raise RuntimeError("the detector failed its warm-up (test)")

        failing = make_engine(cfg, clip_20fps, Wrapped(face_engine_factory(cfg), detect=broken_detect), threads_seen)
        with pytest.raises(RuntimeError, match="warm-up"):
            failing.run(max_frames=3)
        assert cv2.getNumThreads() == 3
    finally:
        cv2.setNumThreads(before)


def test_objects_from_before_the_engine_are_out_of_the_collectors_reach_while_it_runs_and_given_back_after(
        live_config, clip_20fps, face_engine_factory):
    """A full collection walks every tracked object with the GIL held; the engine's threads all wait.
    Objects made before the engine opened are left out of collections while it runs (a long test
    process's heap took 100–460 ms a pass on two busy cores and stalled the output), and handed back
    to the collector once it stops, also after a start that failed."""
    cfg = live_config()
    assert gc.get_freeze_count() == 0
    made_before = [[] for _ in range(3)]  # containers: tracked by the collector
    seen: list[tuple[int, bool]] = []

    def look() -> None:
        if not seen:  # gc.get_objects() walks the whole heap: once is enough
            tracked = {id(o) for o in gc.get_objects()}
            seen.append((gc.get_freeze_count(), id(made_before[1]) in tracked))

    engine = LiveEngine(cfg, source=SyntheticCamera(160, 120, 30.0), sink_factory=lambda w, h, fps: CallsOnSend(look),
                        faces=face_engine_factory(cfg))
    engine.run(max_frames=3)
    frozen, still_collected = seen[0]
    assert frozen > len(made_before) and not still_collected, seen
    assert gc.get_freeze_count() == 0 and id(made_before[1]) in {id(o) for o in gc.get_objects()}

    def broken_detect(frame, input_size=None):
        raise RuntimeError("the detector failed its warm-up (test)")

    failing = make_engine(cfg, clip_20fps, Wrapped(face_engine_factory(cfg), detect=broken_detect), CallsOnSend(look))
    with pytest.raises(RuntimeError, match="warm-up"):
        failing.run(max_frames=3)
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_keeps_them_frozen_after_the_engine(live_config, face_engine_factory):
    """The process's own freezing is its policy: the engine adds to it and takes nothing back."""
    cfg = live_config()
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        engine = LiveEngine(cfg, source=SyntheticCamera(160, 120, 30.0), sink_factory=lambda w, h, fps: NullSink(),
                            faces=face_engine_factory(cfg))
        engine.run(max_frames=3)
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()


class SkippingCamera(SyntheticCamera):
    """A source that reports frames it skipped (like a video file whose decoding fell behind)."""

    def __init__(self, skipped: int) -> None:
        super().__init__(64, 48, 50.0)
        self.skipped = skipped


def test_frames_skipped_by_a_replaced_camera_stay_counted_as_dropped(live_config, face_engine_factory, recording_sink):
    """On a camera change the old source's skipped frames went into `captured` but vanished from
    `dropped`, so captured − dropped no longer matched what was processed."""
    cfg = live_config(camera={"fps": 50.0})
    engine = LiveEngine(
        cfg,
        source=SkippingCamera(7),
        sink_factory=lambda w, h, fps: recording_sink(keep_every=100),
        faces=face_engine_factory(cfg),
        source_factory=lambda camera_cfg: SkippingCamera(0),
    )
    engine.on_config_change(live_config(camera={"fps": 50.0, "width": 320}))
    stats = engine.run(max_frames=5)
    assert stats["frames"]["captured"] >= 7 + 5
    assert stats["frames"]["dropped"] >= 7
    assert engine.status()["frames"]["dropped"] >= 7


@pytest.fixture(scope="module")
def two_faces_clip(tmp_path_factory, newton, assets) -> Path:
    """Two heads side by side (left in colour, right in grey, so a test can tell their crops apart)."""
    from vcamd.bench.clips import write_sliding_clip

    # Newton's head, cut square around where SCRFD finds it in newton.png.
    head = newton[40:296, 260:516]
    grey = cv2.cvtColor(cv2.cvtColor(head, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    gap = np.full((head.shape[0], head.shape[1] // 3, 3), 128, np.uint8)
    return write_sliding_clip(
        tmp_path_factory.mktemp("two") / "two_faces.avi", np.hstack([head, gap, grey]), size=(640, 480), fps=20.0, frames=40, step_px=3
    )


class LosesTheGreyFace(Wrapped):
    """After `arm()`: the crop re-detection no longer finds the grey (right) face, and full-frame
    detections hang — the window between losing a track and the next full detection, held open."""

    def __init__(self, engine, track_size: int) -> None:
        super().__init__(engine)
        self.track_size = track_size
        self.armed = threading.Event()
        self.release = threading.Event()

    def detect(self, frame, input_size=None, threshold=None):
        if self.armed.is_set():
            if input_size is not None and input_size <= self.track_size and np.abs(frame[..., 0].astype(np.int16) - frame[..., 2]).mean() < 5:
                return []
            if input_size != self.track_size:
                self.release.wait(10.0)
        return self._engine.detect(frame, input_size, threshold)


def test_a_swapped_face_lost_by_the_tracker_among_several_is_a_miss_not_a_raw_face(
    live_config, two_faces_clip, face_engine_factory, recording_sink
):
    """With several faces swapped, a face the crop re-detection lost was dropped from the targets
    and the frame still published as "swapped" — that face raw — until a full detection found it
    again. Now it is a miss for on_miss (blurred here) until a full detection says where it is.
    (Until the crop re-detection looks at it again — at the latest REDETECT_EVERY frames after its
    last detection — the face is followed by its pixels, which are all still there: swapped where
    it is.)"""
    from vcamd.live.tracking.motion import REDETECT_EVERY

    cfg = live_config(swap={"on_miss": "blur", "face_selection": "all"}, detection={"full_every": 5})
    faces = LosesTheGreyFace(face_engine_factory(cfg), cfg.detection.track_size)
    engine = make_engine(cfg, two_faces_clip, faces, recording_sink(keep_every=100))
    outcomes: list = []
    armed_at: list[int] = []
    lost_at: list[int] = []
    record = engine.parts.stats.record_publish

    def record_and_arm(outcome, level, latency_ms):
        outcomes.append(outcome)
        if not armed_at and outcome is Outcome.swapped and engine.parts.worker.swaps >= 1 and len(engine.frames.targets) == 2:
            armed_at.append(len(outcomes))
            faces.armed.set()  # both faces are being swapped: now lose the grey one
        elif armed_at and not lost_at and engine.parts.tracker.book.lost:
            lost_at.append(len(outcomes))  # this frame's report has the face lost
        record(outcome, level, latency_ms)

    engine.parts.stats.record_publish = record_and_arm
    try:
        engine.run(max_frames=60)
    finally:
        faces.release.set()
    assert armed_at, f"both faces were never swapped together: {outcomes}"
    assert lost_at and lost_at[0] - armed_at[0] <= REDETECT_EVERY + 2, (armed_at, lost_at, outcomes)
    after = outcomes[lost_at[0] - 1 :]
    assert len(after) > 10
    assert Outcome.swapped not in after, f"a frame with the lost face raw was published as swapped: {after}"
    assert after.count(Outcome.blurred) == len(after)


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
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine
    from vcamd.live.output.placeholder import OFFLINE_MESSAGE, STARTING_MESSAGE, offline_frame

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
    # Counted as what they are: a healthy start reports starting cards, not offline frames.
    frames = result["frames"]
    assert frames["starting"] >= 3 and frames["offline"] == 0, frames


def test_when_the_first_swap_lands_a_groups_faces_are_pasted_a_few_a_frame_each_covered_until_its_turn(
        live_config, face_engine_factory, recording_sink, solvay, tmp_path):
    """While the first swap runs the frame is covered whole, so every face was covered: when the
    swap lands, at most NEW_SWAPS_PER_FRAME faces are pasted in a frame and the others keep a cover
    until their turn — never shown raw — and within a few frames every face is swapped. Before, the
    frame the first swap landed in pasted every face at once (a 150-face crowd: 44–114 ms)."""
    from vcamd.bench.clips import fitted_frame
    from vcamd.live.output.repaint import NEW_SWAPS_PER_FRAME

    size = (1280, 720)
    camera = fitted_frame(solvay, size)
    clip = tmp_path / "group.avi"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter.fourcc(*"MJPG"), RATE, size)
    for _ in range(20):
        writer.write(camera)
    writer.release()
    camera = read_video(clip)[0]  # as the camera decodes it
    cfg = live_config(swap={"face_selection": "all"}, detection={"size": 640})
    sink = recording_sink(keep_every=1)
    first_job: list[int] = []  # how many faces the first swap was asked for
    pastes = [0]  # composite calls so far
    at_send: list[int] = []  # `pastes` as each frame went out
    engine_faces = face_engine_factory(cfg)

    def swap_faces(frame, faces, *args, **kw):
        if not first_job:
            first_job.append(len(faces))
            deadline = time.monotonic() + 60.0
            while len(sink.times) < 8 and time.monotonic() < deadline:  # a few frames covered whole
                time.sleep(0.005)
        return engine_faces.swap_faces(frame, faces, *args, **kw)

    def composite(frame, swapped, face):
        pastes[0] += 1
        return engine_faces.composite(frame, swapped, face)

    send = sink.send

    def counted_send(frame, stats=None):
        at_send.append(pastes[0])
        send(frame, stats)

    sink.send = counted_send  # type: ignore[method-assign]
    engine = make_engine(cfg, clip, Wrapped(engine_faces, swap_faces=swap_faces, composite=composite), sink)
    engine.run(max_frames=45)
    assert first_job and first_job[0] > 2 * NEW_SWAPS_PER_FRAME, first_job  # a group, not a few faces
    per_frame = np.diff([0, *at_send]).tolist()
    landed = next(i for i, n in enumerate(per_frame) if n)
    assert per_frame[landed] <= NEW_SWAPS_PER_FRAME, per_frame
    turns = -(-first_job[0] // NEW_SWAPS_PER_FRAME)
    assert sum(per_frame[landed : landed + turns + 3]) >= first_job[0], per_frame
    # No face shown as the camera shows it, in any frame from the landing one on (a paste or a
    # cover changes every pixel of the face's box).
    boxes = [tuple(int(v) for v in f.box) for f in engine_faces.detect(camera, 640)]
    assert len(boxes) >= first_job[0] - 2
    for i, frame in enumerate(sink.frames[landed:], landed):
        for x0, y0, x1, y1 in boxes:
            diff = np.abs(frame[y0:y1, x0:x1].astype(np.int16) - camera[y0:y1, x0:x1].astype(np.int16)).mean()
            assert diff >= 3.0, (i, (x0, y0, x1, y1), diff)
