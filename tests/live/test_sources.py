"""Sources and the newest-frame slot: a video file paced like a camera, drops counted, no queue."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.errors import VcamdError
from vcamd.common.types import Captured
from vcamd.config.schema import CameraConfig
from vcamd.live.capture.jpeg import NOT_AN_IMAGE, decode_jpeg
from vcamd.live.capture.reader import CameraReader, LatestFrame, SourceState, as_bgr
from vcamd.live.capture.sources import SyntheticCamera, VideoFileCamera, open_source


def captured(seq: int) -> Captured:
    return Captured(frame=np.zeros((2, 2, 3), np.uint8), t_capture=float(seq), seq=seq)


def test_slot_keeps_only_the_newest_frame_and_counts_the_rest():
    slot = LatestFrame()
    for seq in range(1, 6):
        slot.put(captured(seq))
    assert slot.depth == 1
    assert slot.take(timeout=0).seq == 5
    assert slot.dropped == 4 and slot.taken_count == 1 and slot.max_depth == 1
    assert slot.take(timeout=0.01) is None  # nothing newer: no re-delivery of an old frame


def test_slot_take_waits_for_the_next_frame():
    slot = LatestFrame()
    threading.Timer(0.05, lambda: slot.put(captured(7))).start()
    got = slot.take(timeout=2.0)
    assert got is not None and got.seq == 7


class OwnedClock:
    """The pacer's time, owned by the test: `sleep` moves it on, `advance` is a reader busy
    elsewhere. Decoding takes no time on it, so what the camera does depends on the file's clock
    alone, not on how busy the machine is."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_video_file_plays_at_its_own_rate_by_the_wall_clock(make_clip):
    clip = make_clip("pace.avi", fps=25.0, frames=15)
    clock = OwnedClock()
    cam = VideoFileCamera(clip, loop=False, clock=clock, sleep=clock.sleep)
    cam.open()
    assert cam.fps == pytest.approx(25.0) and cam.frame_size == (640, 480)
    released = []
    while cam.read() is not None:
        released.append(clock.now)
    cam.close()
    # Every frame, none skipped, each released at its own time on the file's clock: frame k at
    # t0 + k / 25 (never earlier), so 15 frames span 14 intervals.
    assert len(released) == 15 and cam.skipped == 0
    assert [t - released[0] for t in released] == pytest.approx([k / 25.0 for k in range(15)])


def test_video_file_skips_frames_whose_time_passed_like_a_camera(make_clip):
    clip = make_clip("skip.avi", fps=25.0, frames=50)
    clock = OwnedClock()
    cam = VideoFileCamera(clip, loop=False, clock=clock, sleep=clock.sleep)
    cam.open()
    first = cam.read()
    clock.advance(0.41)  # a reader that was busy for over 10 frame intervals
    now_due = cam.read()
    # It jumped to the frame that is due now (frame 10) instead of playing the 9 late ones, and
    # released it at once: skipping never makes the reader wait.
    assert cam.skipped == 9 and clock.slept == []
    reference = cv2.VideoCapture(str(clip))
    expected = [reference.read()[1] for _ in range(11)]
    reference.release()
    # The frames the file holds there (decoded by FFmpeg here, by libjpeg-turbo in the camera: the
    # two differ by a grey level or so, a frame from the next by far more).
    assert nearest(first, expected) == 0 and nearest(now_due, expected) == 10
    cam.close()


def nearest(frame: np.ndarray, candidates: list[np.ndarray]) -> int:
    return int(np.argmin([cv2.absdiff(frame, c).mean() for c in candidates]))


def test_an_mjpg_file_is_decoded_as_a_webcam_is_and_a_corrupt_packet_is_a_bad_frame(make_clip):
    """MJPG files are read as their JPEG packets, each decoded as an MJPG webcam's frames are (to
    cv2.imdecode's pixels: tests/live/test_jpeg.py) — not by FFmpeg (about twice the CPU with its colour
    conversion). The frames are the file's frames; a packet that is not a JPEG is a bad frame,
    skipped by the reader, not a lost camera."""
    clip = make_clip("mjpg.avi", fps=25.0, frames=6)
    clock = OwnedClock()
    cam = VideoFileCamera(clip, loop=True, clock=clock, sleep=clock.sleep)
    cam.open()
    reference = cv2.VideoCapture(str(clip))
    expected = [reference.read()[1] for _ in range(6)]
    reference.release()
    played = [cam.read() for _ in range(8)]  # past the end: a loop
    cam.close()
    assert [nearest(f, expected) for f in played] == [0, 1, 2, 3, 4, 5, 0, 1]
    assert max(cv2.absdiff(f, expected[i % 6]).mean() for i, f in enumerate(played)) < 2.0
    packets = cv2.VideoCapture(str(clip))
    assert packets.set(cv2.CAP_PROP_FORMAT, -1)
    jpegs = [packets.read()[1] for _ in range(6)]
    packets.release()
    assert all(np.array_equal(f, cv2.imdecode(jpegs[i % 6], cv2.IMREAD_COLOR)) for i, f in enumerate(played))
    assert decode_jpeg(np.frombuffer(b"not a jpeg at all", np.uint8)) is NOT_AN_IMAGE
    assert decode_jpeg(np.empty(0, np.uint8)) is NOT_AN_IMAGE
    assert as_bgr(NOT_AN_IMAGE) is None  # the reader counts it in bad_frames and reads on


def test_slow_consumer_gets_fresh_frames_and_nothing_queues(make_clip):
    clip = make_clip("slow.avi", fps=25.0, frames=25)
    slot = LatestFrame()
    reader = CameraReader(VideoFileCamera(clip, loop=True), slot, reopen_interval_s=0.2)
    reader.open_first()
    reader.start()
    seqs, due = [], []
    try:
        for _ in range(8):
            # A pipeline three frames slow: it comes back once the camera delivered three more
            # (a condition, not a clock: a busy machine slows both sides).
            target = slot.latest()[1] + 3
            deadline = time.monotonic() + 30
            while slot.latest()[1] < target:
                assert time.monotonic() < deadline, "the reader stopped delivering"
                time.sleep(0.005)
            got = slot.take(timeout=1.0)
            assert got is not None
            seqs.append(got.seq)
            due.append(target)
    finally:
        reader.stop()
    # Always the newest frame: the ones delivered while the consumer was busy were dropped, not queued.
    assert all(seq >= t for seq, t in zip(seqs, due)), (seqs, due)
    assert all(b - a >= 3 for a, b in zip(seqs, seqs[1:]))
    assert slot.dropped >= 16
    assert reader.captured - slot.taken_count - slot.dropped in (0, 1)


def test_a_finished_file_goes_offline_and_is_reopened(make_clip):
    clip = make_clip("end.avi", fps=25.0, frames=5)
    slot = LatestFrame()
    reader = CameraReader(VideoFileCamera(clip, loop=False), slot, reopen_interval_s=0.15)
    reader.open_first()
    reader.start()
    try:
        deadline = time.monotonic() + 3.0
        saw_offline = False
        while time.monotonic() < deadline and reader.reopen_attempts < 2:
            saw_offline |= reader.state is SourceState.offline
            slot.take(timeout=0.02)
        assert saw_offline and reader.times_lost >= 2 and reader.reopen_attempts >= 1
        assert reader.captured >= 10  # it played the file again after reopening it
    finally:
        reader.stop()


def test_synthetic_camera_is_paced_and_moves():
    cam = SyntheticCamera(160, 120, 50.0)
    cam.open()
    t0 = time.monotonic()
    frames = [cam.read() for _ in range(10)]
    assert 9 / 50.0 - 0.02 <= time.monotonic() - t0 < 9 / 50.0 + 0.5
    assert frames[0].shape == (120, 160, 3)
    assert not np.array_equal(frames[0], frames[5])


def test_open_source_understands_each_form(make_clip):
    cfg = CameraConfig()
    assert isinstance(open_source("synthetic", cfg), SyntheticCamera)
    assert open_source("0", cfg).device == 0
    assert open_source("/dev/video3", cfg).device == "/dev/video3"
    clip = make_clip("x.avi", fps=10.0, frames=2)
    src = open_source(str(clip), cfg, loop=True)
    assert isinstance(src, VideoFileCamera) and src.loop


def test_open_source_rejects_what_it_cannot_use(tmp_path):
    with pytest.raises(VcamdError, match="not a camera index.*--source"):
        open_source(str(tmp_path / "nope.mp4"), CameraConfig())
    with pytest.raises(VcamdError, match="empty camera source"):
        open_source("  ", CameraConfig())
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video")
    with pytest.raises(VcamdError, match="cannot open video file"):
        VideoFileCamera(junk, loop=False).open()


def test_a_missing_camera_device_fails_with_the_fix():
    src = open_source("/dev/video99", CameraConfig())
    with pytest.raises(VcamdError, match="cannot open camera /dev/video99.*--source"):
        src.open()


def test_odd_frames_from_a_driver_become_bgr_or_are_skipped():
    from vcamd.live.capture.reader import as_bgr

    gray = np.full((4, 6), 9, np.uint8)
    assert as_bgr(gray).shape == (4, 6, 3)
    bgra = np.zeros((4, 6, 4), np.uint8)
    assert as_bgr(bgra).shape == (4, 6, 3)
    bgr = np.zeros((4, 6, 3), np.uint8)
    assert as_bgr(bgr) is bgr  # no copy for the normal case
    assert as_bgr(np.zeros((0, 0, 3), np.uint8)) is None
    assert as_bgr(np.zeros((4, 6, 3), np.float32)) is None
    assert as_bgr(None) is None


# ---- a camera slower than its nominal rate ---------------------------------------------------------


@pytest.fixture(scope="module")
def slow_4k_clip(tmp_path_factory, newton) -> Path:
    """A 4K MJPEG clip at a nominal 120 fps whose frames take far longer than 1/120 s to decode
    here (noise does not compress): a camera that cannot keep its nominal rate."""
    import cv2

    width, height = 3840, 2160
    face = cv2.resize(newton, (height * newton.shape[1] // newton.shape[0], height))
    base = np.full((height, width, 3), 110, np.uint8)
    base[:, : face.shape[1]] = face
    noise = np.random.default_rng(0).integers(0, 48, (height, width, 3), dtype=np.uint8)
    path = tmp_path_factory.mktemp("slow") / "uhd_120fps.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 120.0, (width, height))
    assert writer.isOpened()
    for k in range(8):  # 30 reads loop it several times; each 4K noisy frame costs much to encode
        writer.write(cv2.add(np.roll(base, 16 * k, axis=1), noise))
    writer.release()
    return path


def _read_cost_s(path) -> float:
    import cv2

    cap = cv2.VideoCapture(str(path))
    t0 = time.monotonic()
    for _ in range(4):
        assert cap.read()[0]
    cap.release()
    return (time.monotonic() - t0) / 4


def test_a_file_decoding_slower_than_its_rate_delivers_every_frame_it_decodes(slow_4k_clip):
    assert _read_cost_s(slow_4k_clip) > 2 / 120, "the clip decodes in real time here: it tests nothing"
    cam = VideoFileCamera(slow_4k_clip, loop=True)
    cam.open()
    gaps: list[float] = []

    def play() -> None:
        last = time.monotonic()
        for _ in range(30):  # longer than the file: a loop too
            assert cam.read() is not None
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    player = threading.Thread(target=play, daemon=True)
    player.start()
    player.join(120)
    finished = not player.is_alive()
    if finished:
        cam.close()
    assert finished, f"30 reads not done in 120 s; gaps so far {[round(g, 3) for g in gaps]}"
    # Before: skipping (a grab decodes too) fell further behind with every read, so reads took
    # longer and longer and the output went "offline" while frames were still being decoded.
    # Now every read decodes one frame (plus at most a few skips, bounded by 0.1 s each): however
    # loaded the machine, 30 reads finish.
    assert cam.skipped <= 3, cam.skipped  # skipping cannot catch up when one decode outlasts a frame interval
    print("gaps between frames (s):", [round(g, 3) for g in gaps])


def test_the_engine_publishes_a_slow_camera_and_never_calls_it_offline(slow_4k_clip, run_live, live_config):
    # Offline means no frame for stall_timeout_s; on a loaded 2-core machine one 4K decode can take
    # over a second, so the timeout here is well above that (the runaway before the fix left gaps
    # that grew without bound, far past it).
    cfg = live_config(camera={"stall_timeout_s": 5.0})
    stats, sink, engine = run_live(cfg, slow_4k_clip, frames=30, loop=True, keep_every=100)
    frames = stats["frames"]
    assert frames["offline"] == 0, frames
    assert frames["published"] == 30
    assert stats["fps"]["source"] == pytest.approx(120.0)


# ---- a camera index that does not exist --------------------------------------------------------------


def test_the_cameras_that_exist_are_listed_with_their_names(tmp_path):
    from vcamd.live.capture.sources import cameras_here, list_cameras

    sysfs = tmp_path / "video4linux"  # the layout of /sys/class/video4linux
    for entry, name in (("video0", "Integrated Camera: Integrated C"), ("video10", "FaceLive Camera"), ("video2", "")):
        (sysfs / entry).mkdir(parents=True)
        (sysfs / entry / "name").write_text(name + "\n")
    (sysfs / "v4l-subdev0").mkdir()  # not a capture device node
    assert list_cameras(sysfs) == [("/dev/video0", "Integrated Camera: Integrated C"), ("/dev/video2", "unnamed"),
                                   ("/dev/video10", "FaceLive Camera")]
    assert cameras_here(sysfs) == ("cameras here: /dev/video0 (Integrated Camera: Integrated C), /dev/video2 (unnamed), "
                                   "/dev/video10 (FaceLive Camera)")
    empty = tmp_path / "none"
    empty.mkdir()
    assert cameras_here(empty) == "no camera was found (no /dev/video device)"


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


class CostlyRead(SyntheticCamera):
    """A camera whose every read costs its reader `busy_s` of CPU (a decode) or, with `busy=False`,
    as long waiting for the driver (no CPU)."""

    def __init__(self, busy_s: float, *, busy: bool) -> None:
        super().__init__(64, 48, 1000.0)
        self.busy_s, self.busy = busy_s, busy

    def read(self):
        if self.busy:
            start = time.thread_time()
            while time.thread_time() - start < self.busy_s:
                pass
        else:
            time.sleep(self.busy_s)
        return super().read()


@pytest.mark.parametrize("busy", [True, False], ids=["decoding", "waiting"])
def test_the_reader_counts_the_cpu_its_camera_costs_not_the_time_it_waits(busy: bool):
    """`cpu_s` (stats: camera_cpu_ms_per_frame) is the reader thread's CPU — a camera's decode —
    whatever the machine's load; the time it waits for the driver's next frame is not CPU."""
    source = CostlyRead(0.004, busy=busy)
    reader = CameraReader(source, LatestFrame(), reopen_interval_s=0.05)
    reader.open_first()
    reader.start()
    try:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and reader.captured < 50:
            time.sleep(0.01)
    finally:
        reader.stop()
    assert reader.captured >= 50
    per_frame_ms = 1000.0 * reader.cpu_s / reader.captured
    if busy:
        assert per_frame_ms >= 3.0, per_frame_ms
    else:
        assert per_frame_ms < 1.0, per_frame_ms
