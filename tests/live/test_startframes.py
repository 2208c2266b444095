"""The start's covered frames are processed again as soon as what they waited for is here
(`vcamd.live.startframes`): the installed models, the first detection and the first swap reach the
newest frame without waiting for another camera frame — by the same rule as every frame.

The camera here is a real clip that stops delivering at a chosen moment (`StoppingCamera`): what
the engine does next happens on the frame it kept, or not at all."""

from __future__ import annotations

import threading

import numpy as np
from support.live import WatchedEvent, Wrapped
from support.waiting import wait_for

from vcamd.common.types import Outcome
from vcamd.live.capture.sources import SyntheticCamera, open_source
from vcamd.live.engine import LiveEngine


class StoppingCamera:
    """A camera that delivers frames until `stop` is set; its next read then blocks (`stopped` is
    set) until `one_more` or `resume` (a read under way when `stop` is set still delivers its frame).
    `last` is the last frame it delivered."""

    def __init__(self, source) -> None:
        self._source = source
        self.stop, self.stopped = threading.Event(), threading.Event()
        self._let_through = threading.Semaphore(0)
        self.last: np.ndarray | None = None
        self.reads_after_stop = 0

    def __getattr__(self, name):
        return getattr(self._source, name)

    def one_more(self) -> None:
        """Let one more frame through (the read after it blocks again)."""
        self._let_through.release()

    def resume(self) -> None:
        """Deliver again, for good (the end of a test)."""
        self._let_through.release(10_000)

    def read(self):
        if self.stop.is_set():
            self.stopped.set()
            self._let_through.acquire(timeout=60)
            self.reads_after_stop += 1
        frame = self._source.read()
        if frame is not None:
            self.last = frame.copy()
        return frame


def _run(engine: LiveEngine) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("stats", engine.run()), daemon=True)
    thread.start()
    return thread, result


def _end(engine: LiveEngine, camera: StoppingCamera, thread: threading.Thread) -> None:
    camera.resume()
    engine.request_quit()
    thread.join(30)


def test_the_installed_models_look_at_the_kept_frame_without_another_camera_frame(live_config, clip_20fps, recording_sink,
                                                                                face_engine_factory):
    """Models installed while the camera gives nothing new: the newest frame, covered while they
    loaded, is located at once — on the camera's own pixels (kept before the mosaic), not a later frame."""
    cfg = live_config(camera={"stall_timeout_s": 60.0})
    camera = StoppingCamera(open_source(str(clip_20fps), cfg.camera, loop=True))
    engine: LiveEngine

    def factory(cfg, warm_up):
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.blurred] >= 3, what="frames covered while loading")
        camera.stop.set()
        wait_for(camera.stopped.is_set, what="the camera stopped")
        return face_engine_factory(cfg), {}

    engine = LiveEngine(cfg, source=camera, sink_factory=lambda w, h, fps: recording_sink(keep_every=1), faces=None,
                        pipeline_factory=factory)
    located: list[np.ndarray] = []
    update = engine.parts.tracker.update

    def recorded(frame, frame_index, **kw):
        located.append(frame.copy())
        return update(frame, frame_index, **kw)

    engine.parts.tracker.update = recorded  # type: ignore[method-assign]
    thread, _ = _run(engine)
    try:
        wait_for(lambda: located, what="a look at the kept frame once the models are in")
        assert camera.reads_after_stop == 0 and camera.last is not None
        assert located[0].shape == camera.last.shape and np.array_equal(located[0], camera.last)
        assert engine.parts.stats.again >= 1
    finally:
        _end(engine, camera, thread)


SLOW_CAMERA_FPS = 2.0
"""The camera of the kept-frame swap test. The kept frame is located again when the swap lands,
and the loop waits two frame intervals for that look (`frames.TRACK_DEADLINE_FRAMES`): at 20 fps,
100 ms, which a crop session built for that look can outlast on a 2-core machine running the
suite beside two busy processes — the frame is then covered, as it must be, and with the camera
stopped no later frame shows the swap. At 2 fps the look has a second."""


def _swapped_on_the_last_frame(sink, camera: StoppingCamera, real) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]:
    """The frame shown last is the camera's last one with its face (the real detector's) swapped there:
    its pixels are not the camera's. Returns both frames and the face's box."""
    shown, kept = sink.frames[-1], camera.last
    assert kept is not None and shown.shape == kept.shape
    faces = real.detect(kept, 320)
    assert len(faces) == 1
    x1, y1, x2, y2 = (max(0, int(v)) for v in faces[0].box)
    assert np.abs(shown[y1:y2, x1:x2].astype(np.int16) - kept[y1:y2, x1:x2].astype(np.int16)).mean() > 3.0
    return shown, kept, (x1, y1, x2, y2)


def test_the_first_swap_is_shown_on_the_kept_frame_where_the_face_is_found_in_it(live_config, make_clip, recording_sink,
                                                                               face_engine_factory):
    """The first swap lands while the camera gives nothing new: the newest frame (covered whole
    while it ran) is processed again at once and shows the swapped face — located in that frame,
    never its raw face — instead of waiting for the next camera frame."""
    cfg = live_config(camera={"stall_timeout_s": 60.0})
    clip = make_clip("newton_slow.avi", fps=SLOW_CAMERA_FPS, frames=8)
    camera = StoppingCamera(open_source(str(clip), cfg.camera, loop=True))
    real = face_engine_factory(cfg)
    calls: list[int] = []

    def swap_faces(frame, faces, *args, **kw):
        calls.append(1)
        if len(calls) == 1:  # the first swap lands only once the camera has stopped
            camera.stop.set()
            wait_for(camera.stopped.is_set, what="the camera stopped")
        return real.swap_faces(frame, faces, *args, **kw)

    sink = recording_sink(keep_every=1)
    engine = LiveEngine(cfg, source=camera, sink_factory=lambda w, h, fps: sink, faces=Wrapped(real, swap_faces=swap_faces))
    thread, _ = _run(engine)
    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 1, what="the swapped face on the kept frame",
                 detail=lambda: {"outcomes": dict(engine.parts.stats.outcomes), "again": engine.parts.stats.again,
                                 "swap calls": len(calls), "camera stopped": camera.stopped.is_set(),
                                 "late looks": engine.parts.tracker.late, "look errors": engine.parts.tracker.errors})
        assert camera.reads_after_stop == 0
        assert engine.parts.stats.again >= 1
        shown, kept, (x1, y1, _, _) = _swapped_on_the_last_frame(sink, camera, real)
        # The frame is not covered whole: the background far from the face is the camera's own.
        far = (slice(0, max(1, y1 // 2)), slice(0, max(1, x1 // 2))) if x1 > 40 and y1 > 40 else (slice(-20, None), slice(-20, None))
        assert np.array_equal(shown[far], kept[far])
    finally:
        _end(engine, camera, thread)


def test_a_first_swap_landing_while_a_frame_is_processed_is_shown_on_that_frame(live_config, make_clip, recording_sink,
                                                                               face_engine_factory):
    """The first swap lands on its own thread while the loop processes a frame: after that frame
    went by without it (covered), before the frame is kept. The frame is still news to it: kept and
    processed again at once, it shows the swapped face, though the camera gives nothing new. (What a
    frame waits on was judged at keep time: the swap counted as there, the frame went out covered and
    was not kept, and with the camera stalled nothing ever showed the swap.) The interleaving is made
    on purpose: the swap's result is held back, the camera lets one frame through, and the result
    goes out just before that frame is kept."""
    cfg = live_config(camera={"stall_timeout_s": 60.0})
    camera = StoppingCamera(open_source(str(make_clip("newton_slow.avi", fps=SLOW_CAMERA_FPS, frames=8)), cfg.camera, loop=True))
    real = face_engine_factory(cfg)
    calls: list[int] = []
    held_back: list = []
    held, put_out = threading.Event(), threading.Event()

    def swap_faces(frame, faces, *args, **kw):
        calls.append(1)
        if len(calls) == 1:  # the first swap ends once the camera has stopped
            camera.stop.set()
            wait_for(camera.stopped.is_set, what="the camera stopped")
        else:  # no later swap lands before the first one is out
            wait_for(put_out.is_set, what="the first swap's result out")
        return real.swap_faces(frame, faces, *args, **kw)

    sink = recording_sink(keep_every=1)
    engine = LiveEngine(cfg, source=camera, sink_factory=lambda w, h, fps: sink, faces=Wrapped(real, swap_faces=swap_faces))
    results = engine.parts.worker.results
    put = results.put

    def held_put(value):
        if not held.is_set():
            held_back.append(value)
            held.set()
            return 0
        return put(value)

    def put_out_before(keep):
        def kept(*args, **kw):
            if held_back and not put_out.is_set():
                put(held_back.pop())  # lands after this frame decided without it, before it is kept
                put_out.set()
            keep(*args, **kw)
        return kept

    results.put = held_put  # type: ignore[method-assign]
    engine.frames.start.keep = put_out_before(engine.frames.start.keep)  # type: ignore[method-assign]
    thread, _ = _run(engine)
    try:
        # (A frame the camera gave before it stopped may be processed after this: the result goes out before it is kept then.)
        wait_for(held.is_set, what="the first swap done, its result held back")
        camera.one_more()
        wait_for(put_out.is_set, what="a frame processed while the result went out")
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 1, what="the swapped face on that frame",
                 detail=lambda: {"outcomes": dict(engine.parts.stats.outcomes), "again": engine.parts.stats.again,
                                 "late looks": engine.parts.tracker.late})
        assert camera.reads_after_stop == 1
        _swapped_on_the_last_frame(sink, camera, real)
    finally:
        _end(engine, camera, thread)


def test_a_start_with_no_face_in_view_sends_its_kept_frame_again_at_most_once(live_config, face_engine_factory, recording_sink):
    """No face anywhere: each full detection lands with nothing. The kept frame is processed again
    once for the first look, not for every look after it (the output is not re-sent in a loop)."""
    cfg = live_config(camera={"stall_timeout_s": 0.5})
    camera = StoppingCamera(SyntheticCamera(320, 240, 20.0))
    engine = LiveEngine(cfg, source=camera, sink_factory=lambda w, h, fps: recording_sink(keep_every=1),
                        faces=face_engine_factory(cfg))
    thread, _ = _run(engine)
    try:
        wait_for(lambda: engine.parts.full_detector.runs >= 2, what="two full detections")
        camera.stop.set()
        runs = engine.parts.full_detector.runs
        # The camera stalled long enough for the offline card, and the detector ran again meanwhile.
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.offline] >= 2, what="the offline card")
        assert engine.parts.stats.again <= 1, (engine.parts.stats.again, runs, engine.parts.full_detector.runs)
    finally:
        _end(engine, camera, thread)


class _Faces:
    """A swap model stand-in: returns each face's crop; `entered[k]` is set when call k starts."""

    def __init__(self) -> None:
        self.entered = [threading.Event() for _ in range(3)]
        self.calls = 0

    def swap_faces(self, frame, faces, level=None, timer=None):
        self.entered[min(self.calls, 2)].set()
        self.calls += 1
        crop = np.random.default_rng(self.calls).integers(0, 255, (32, 32, 3), dtype=np.uint8)
        return [_Swapped(crop) for _ in faces]


class _Swapped:
    def __init__(self, crop) -> None:
        self.crop, self.shown, self.source = crop, True, None


def test_the_swap_after_the_first_waits_until_the_first_is_shown():
    """The start's first swap lands: the frame that shows it is located and composed before the next
    swap takes the cores — the worker's next job waits until the first swapped face went out
    (`Startup.shown`); after that, jobs run at once. Before, the next job started with the result."""
    from vcamd.common.quality import Level
    from vcamd.common.types import Face
    from vcamd.live.measures.stats import LiveStats
    from vcamd.live.startframes import Startup
    from vcamd.live.swapworker import SwapJob, SwapWorker

    faces = _Faces()
    worker = SwapWorker(faces, LiveStats(), clock=lambda: 0.0)
    startup = Startup(0.0)
    startup.shown = WatchedEvent()
    worker.first_shown = startup.shown
    face = Face(box=(4.0, 4.0, 28.0, 28.0), score=0.9, kps=np.zeros((5, 2), np.float32))
    job = SwapJob(np.zeros((32, 32, 3), np.uint8), [face], [face], Level.full, 0.0)
    worker.start()
    try:
        worker.submit(job)
        wait_for(lambda: worker.latest()[0] is not None, what="the first swap's result")
        worker.submit(job)
        wait_for(lambda: faces.entered[1].is_set() or startup.shown.waited.is_set(), what="the next job taken")
        assert not faces.entered[1].is_set(), "the next swap started before the first was shown"
        startup.published(1.0, swapped=False)
        assert not startup.shown.is_set()
        startup.published(2.0, swapped=True)  # the first swapped face goes out
        assert startup.shown.is_set()
        wait_for(faces.entered[1].is_set, what="the next swap, once the first was shown")
        worker.submit(job)
        wait_for(faces.entered[2].is_set, what="a later swap at once")
    finally:
        worker.stop()
