"""Review R1 of the live per-frame path: one test per problem found, each failing before its fix."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.live.engine import LiveEngine
from vcamd.live.sources import CameraReader, LatestFrame, SourceState, SyntheticCamera, open_source
from vcamd.live.stats import LiveStats
from vcamd.live.tracking import FullDetection, FullDetector, LiveTracker
from vcamd.live.watchdog import HISTORY_CAP, Watchdog
from vcamd.quality import Level
from vcamd.types import Face, Outcome


class Wrapped:
    """The real face engine with one method replaced (a failure injected around it)."""

    def __init__(self, engine, **replace) -> None:
        self._engine = engine
        self.__dict__.update(replace)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def make_engine(cfg, clip, faces, sink):
    return LiveEngine(cfg, source=open_source(str(clip), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink, faces=faces)


def test_a_config_change_that_fails_unexpectedly_does_not_end_the_stream(
    live_config, clip_20fps, face_engine_factory, recording_sink, assets
):
    """apply_config only caught VcamdError from the source-face setter: an ONNX Runtime error while
    embedding the new photo propagated out of the loop and ended `vcamd run`."""
    cfg = live_config()

    def failing_set_source_face(path):
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION (test)")

    faces = Wrapped(face_engine_factory(cfg), set_source_face=failing_set_source_face)
    sink = recording_sink(keep_every=100)
    engine = make_engine(cfg, clip_20fps, faces, sink)
    new = live_config(swap={"source_face": str(assets / "images" / "crowd_selfie.jpg")})
    engine.on_config_change(new, {"swap"})  # applied by the loop, between frames
    stats = engine.run(max_frames=10)
    assert stats["frames"]["published"] == 10
    assert "RUNTIME_EXCEPTION" in (engine.status()["config_error"] or "")


def test_frame_skip_keeps_an_unselected_face_a_passthrough_not_a_blur_every_other_frame(
    live_config, clip_20fps, face_engine_factory, recording_sink
):
    """At frame_skip, skipped frames took `found` from the reused targets: faces present but none
    selected (face_selection = reference, someone else) became a 'miss' — blurred — every other frame."""
    cfg = live_config(swap={"on_miss": "blur"})
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
    assert engine.source._cap is None, "the camera was left open"
    engine.tracker.call_thread.join(2.0)
    assert not engine.tracker.call_thread.is_alive(), "the tracker thread was left running"


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


def test_watchdog_history_stays_bounded():
    """Transitions and results were kept in lists that grew for as long as the daemon ran."""
    from vcamd.config import WatchdogConfig

    dog = Watchdog(WatchdogConfig(), time.monotonic)
    for i in range(HISTORY_CAP + 50):
        dog.force(Level.low_res if i % 2 == 0 else None)
    assert len(dog.transitions) == HISTORY_CAP
    assert dog.transitions[-1].to_level is Level.full  # the newest are kept
    assert len(dog.history()) == HISTORY_CAP


class CloseFailsOnce(SyntheticCamera):
    """A camera that stops delivering once, and whose driver fails to release it that time."""

    def __init__(self) -> None:
        super().__init__(64, 48, 100.0)
        self.lost_once = False
        self.close_failed = False

    def read(self):
        if not self.lost_once and self._index >= 3:
            self.lost_once = True
            return None
        return super().read()

    def close(self) -> None:
        if self.lost_once and not self.close_failed:
            self.close_failed = True
            raise OSError("VIDIOC_STREAMOFF: No such device (test)")
        super().close()


def test_reader_keeps_reopening_when_closing_the_lost_camera_fails():
    """`_lost` called source.close() unguarded: a driver error there ended the reader thread, so the
    camera was never reopened (offline placeholder for good)."""
    source = CloseFailsOnce()
    slot = LatestFrame()
    reader = CameraReader(source, slot, reopen_interval_s=0.05)
    reader.open_first()
    reader.start()
    try:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not (source.close_failed and reader.state is SourceState.live and reader.captured > 6):
            time.sleep(0.02)
        assert source.close_failed
        assert reader.state is SourceState.live and reader.captured > 6, (reader.state, reader.captured)
    finally:
        reader.stop()


def test_switching_the_enhancer_off_during_a_swap_is_not_a_model_error(live_config, face_engine_factory, newton, tmp_path):
    """swap_faces checked `self.enhancer` and then used it again later: a hot reload switching the
    enhancer off (loop thread) in between made the swap worker fail (None has no enhance_aligned),
    a spurious model error — a miss frame and an error in the log."""
    from vcamd.bench.standins import build_enhancer

    enhancer = build_enhancer(tmp_path / "enhancer.onnx")
    cfg = live_config(enhancer={"enabled": True}, models={"enhancer": str(enhancer)})
    engine = face_engine_factory(cfg)
    assert engine.enhancer is not None
    faces = engine.detect(newton, 320)
    assert faces
    real_swap = engine.swapper.swap

    def swap_while_reload_switches_enhancer_off(crops, latent):
        out = real_swap(crops, latent)
        engine.set_enhancer(False, 0.8)  # what apply_config does on the loop's thread meanwhile
        return out

    engine.swapper.swap = swap_while_reload_switches_enhancer_off
    swapped = engine.swap_faces(newton, faces[:1], Level.full)
    assert len(swapped) == 1 and swapped[0].enhanced  # this swap finishes as it started
    assert engine.enhancer is None
    assert not engine.swap_faces(newton, faces[:1], Level.full)[0].enhanced  # the next one without


class StuckRead(SyntheticCamera):
    """A camera whose read blocks in the driver (a stalled USB camera) until released."""

    def __init__(self) -> None:
        super().__init__(64, 48, 100.0)
        self.release = threading.Event()
        self.reading = threading.Event()
        self.closed_during_read = False
        self.closes = 0

    def read(self):
        self.reading.set()
        self.release.wait()
        frame = super().read()
        self.reading.clear()
        return frame

    def close(self) -> None:
        if self.reading.is_set():
            self.closed_during_read = True
        self.closes += 1
        super().close()


def test_stopping_a_reader_stuck_in_a_read_does_not_release_the_camera_under_it():
    """stop() closed the source after its join timed out, while the reader thread was still inside
    source.read(): releasing a V4L2/MSMF capture under a running read can crash the backend."""
    source = StuckRead()
    reader = CameraReader(source, LatestFrame(), reopen_interval_s=0.05)
    reader.open_first()
    reader.start()
    assert source.reading.wait(2.0)
    reader.stop(timeout=0.1)
    assert not source.closed_during_read
    assert reader.state is SourceState.stopped
    source.release.set()  # the read returns: the thread exits and releases the camera itself
    reader._thread.join(2.0)
    assert not reader._thread.is_alive() and source.closes >= 1 and not source.closed_during_read


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
    engine.on_config_change(live_config(camera={"fps": 50.0, "width": 320}), {"camera"})
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

    def detect(self, frame, input_size=None):
        if self.armed.is_set():
            if input_size is not None and input_size <= self.track_size and np.abs(frame[..., 0].astype(np.int16) - frame[..., 2]).mean() < 5:
                return []
            if input_size != self.track_size:
                self.release.wait(10.0)
        return self._engine.detect(frame, input_size)


def test_a_swapped_face_lost_by_the_tracker_among_several_is_a_miss_not_a_raw_face(
    live_config, two_faces_clip, face_engine_factory, recording_sink
):
    """With several faces swapped, a face the crop re-detection lost was dropped from the targets
    and the frame still published as "swapped" — that face raw — until a full detection found it
    again. Now it is a miss for on_miss (blurred here) until a full detection says where it is."""
    cfg = live_config(swap={"on_miss": "blur", "face_selection": "all"}, detection={"full_every": 5})
    faces = LosesTheGreyFace(face_engine_factory(cfg), cfg.detection.track_size)
    engine = make_engine(cfg, two_faces_clip, faces, recording_sink(keep_every=100))
    outcomes: list = []
    armed_at: list[int] = []
    record = engine.stats.record_publish

    def record_and_arm(outcome, level, latency_ms):
        outcomes.append(outcome)
        if not armed_at and outcome is Outcome.swapped and engine.worker.swaps >= 2 and len(engine.frames.targets) == 2:
            armed_at.append(len(outcomes))
            faces.armed.set()  # both faces are being swapped: now lose the grey one
        record(outcome, level, latency_ms)

    engine.stats.record_publish = record_and_arm
    try:
        engine.run(max_frames=60)
    finally:
        faces.release.set()
    assert armed_at, f"both faces were never swapped together: {outcomes}"
    after = outcomes[armed_at[0] + 2 :]  # the frame being processed when it was armed may still swap
    assert len(after) > 10
    assert Outcome.swapped not in after, f"a frame with the lost face raw was published as swapped: {after}"
    assert after.count(Outcome.blurred) == len(after)


def test_a_pinned_quality_survives_an_edit_of_the_watchdog_section(live_config, clip_20fps, face_engine_factory, recording_sink):
    """A [watchdog] edit rebuilt the watchdog and silently dropped the quality the user pinned
    (tray / `vcamd quality low_res`): back to automatic without anyone asking."""
    cfg = live_config()
    engine = make_engine(cfg, clip_20fps, face_engine_factory(cfg), recording_sink(keep_every=100))
    engine.set_quality(Level.low_res)
    engine.on_config_change(live_config(watchdog={"budget_ms": 120.0}), {"watchdog"})
    engine.run(max_frames=3)
    assert engine.cfg.watchdog.budget_ms == 120.0  # the edit was applied
    assert engine.status()["quality"] == "low_res" and engine.watchdog.level is Level.low_res
