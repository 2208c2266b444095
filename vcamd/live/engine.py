"""The live engine: camera in, swapped frames out at the camera's cadence, whatever the model costs.

Threads:
* **camera-reader** (`sources.CameraReader`) writes the newest frame into a one-frame slot;
* **the pipeline loop** (`LiveEngine.run`, on the caller's thread) takes the newest frame, finds the
  faces (full detection now and then, a cheap re-detection in a crop around each face otherwise),
  hands the face region to the swap worker without waiting, pastes the most recent swapped face at
  the face's *current* keypoints, adds the disclosure badge and publishes — one output frame per
  camera frame;
* **swap-worker** runs the swap model on the newest face region it was given. It may take 1.5 s
  (inswapper on a CPU) or 3 ms (a GPU); the output cadence does not depend on it.

When a face cannot be swapped (start-up before the first swap, detection miss, model error, a swap
model that hangs — see `[swap] max_result_age_s`), `[swap] on_miss` decides: hold the last good output,
blur the face region, or publish the raw frame. When the camera is lost, an offline placeholder is
published at the camera's rate and the reader reopens the source by itself.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import cv2
import numpy as np

from vcamd.config import CameraConfig, Config, OnMiss, load_config
from vcamd.errors import VcamdError
from vcamd.faces.track import crop_around, dedupe_faces, nearest_to_centre
from vcamd.live.obscure import obscure_region
from vcamd.live.sources import CameraReader, FrameSource, LatestFrame, SourceState
from vcamd.live.stats import GpuSampler, LiveStats
from vcamd.live.watchdog import Transition, TransitionResult, Watchdog
from vcamd.process import StageTimer
from vcamd.types import Captured, Face, Frame, Level, Outcome

log = logging.getLogger(__name__)

Clock = Callable[[], float]

TRACK_MATCH_WIDTHS = 1.5
"""A swap result belongs to a current face when their centres are closer than this × face width."""

SINK_STATS_EVERY = 15
"""Refresh the stats snapshot handed to the sink (preview page) every this many frames."""

MISS_REGION_SCALE = 1.6
"""The blurred rectangle around a face, relative to its box (covers hair line and chin)."""


class FacePipeline(Protocol):
    """What the live engine needs from the face engine (`vcamd.process.FaceEngine`)."""

    def detect(self, frame: Frame, input_size: int | None = None) -> list[Face]: ...

    def select(self, faces: list[Face], frame: Frame) -> list[Face]: ...

    def swap_faces(self, frame: Frame, faces: list[Face], level: Level = ..., timer: StageTimer | None = ...) -> list[Any]: ...

    def composite(self, frame: Frame, swapped: Any, face: Face) -> None: ...


class Sink(Protocol):
    """The part of `vcamd.live.sinks.Sink` the engine uses."""

    def open(self) -> None: ...

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# Face positions per frame
# ---------------------------------------------------------------------------------------------


def _level_size(size: int, level: Level, scale: float, floor: int) -> int:
    """Detector input size at this level: scaled at low_res and below, multiple of 32."""
    if level < Level.low_res:
        return size
    return max(floor, int(round(size * scale / 32.0)) * 32)


TRACK_DEADLINE_FRAMES = 2.0
"""The loop waits at most this many frame intervals for the crop re-detection of a frame."""


@dataclass(frozen=True, slots=True)
class FullDetection:
    faces: list[Face]  # frame coordinates
    frame_index: int


class NewestJobWorker:
    """A thread that works on the newest job handed to it: a job not started yet is replaced by a
    newer one (never queued), so the work is always about the freshest frame and the caller never
    waits. Subclasses implement `_work(job)`; `_begin(job)` runs under the lock as a job starts."""

    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._job: Any = None
        self._stop = False
        self.busy = False
        self.jobs_replaced = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        # Wait for a running job to finish (ONNX Runtime must not be torn down under a running
        # session); a model stuck inside a run is abandoned after `timeout` — the thread is a
        # daemon, so a blocked model never blocks shutdown.
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def idle(self) -> bool:
        with self._cond:
            return self._job is None and not self.busy

    def _hand_in(self, job: Any) -> None:
        with self._cond:
            if self._job is not None:
                self.jobs_replaced += 1
            self._job = job
            self._cond.notify_all()

    def _loop(self) -> None:
        self._on_thread_start()
        while True:
            with self._cond:
                while self._job is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                job, self._job = self._job, None
                self.busy = True
                self._begin(job)
            try:
                self._work(job)
            finally:
                with self._cond:
                    self.busy = False

    def _on_thread_start(self) -> None:
        """Runs once on the worker thread before the first job."""

    def _begin(self, job: Any) -> None:
        """Runs under the lock as `job` starts."""

    def _work(self, job: Any) -> None:
        raise NotImplementedError


class FullDetector(NewestJobWorker):
    """Full-frame detections on their own thread, so the 50–200 ms they cost on a CPU never
    holds up a published frame. The loop hands in a downscaled copy of the newest frame (the copy
    is the resize the detector would do anyway) and picks the result up when it is ready."""

    def __init__(self, faces: FacePipeline, stats: LiveStats, clock: Clock) -> None:
        super().__init__("full-detector")
        self._faces = faces
        self._stats = stats
        self._clock = clock
        self._result: FullDetection | None = None
        self.errors = 0
        self.runs = 0

    def submit(self, frame: Frame, frame_index: int, input_size: int) -> None:
        h, w = frame.shape[:2]
        scale = min(1.0, input_size / max(h, w))
        small = cv2.resize(frame, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA) if scale < 1.0 else frame.copy()
        self._hand_in((small, scale, frame_index, input_size))

    def take_result(self) -> FullDetection | None:
        with self._cond:
            result, self._result = self._result, None
            return result

    def _work(self, job: tuple[Frame, float, int, int]) -> None:
        small, scale, index, size = job
        t0 = self._clock()
        try:
            found = self._faces.detect(small, size)
        except Exception as exc:  # treated as "nothing found"; the next attempt comes soon
            self.errors += 1
            if self.errors <= 3:
                log.error("face detection failed: %s", exc)
            found = []
        self._stats.record_stage("full_detect", (self._clock() - t0) * 1000.0)
        faces = [_scaled(f, 1.0 / scale) for f in found] if scale != 1.0 else found
        with self._cond:
            self.runs += 1
            self._result = FullDetection(faces, index)


class BoundedCall(NewestJobWorker):
    """Runs model calls on its own thread so the loop can stop waiting after a deadline.

    A detector that hangs (driver stall, deadlock) then costs the loop one deadline, once: while
    the stuck call is still running, further calls return "not done" at once, so frames keep being
    published (as misses) until the model answers again.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._next_id = 0
        self._done_id = -1
        self._value: Any = None
        self._error: BaseException | None = None
        self.start()

    def call(self, fn: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
        """(True, fn()) when it finished within `timeout`; (False, None) when it did not or the
        previous call is still running. Re-raises fn's exception."""
        with self._cond:
            if self.busy or self._job is not None:
                return False, None
            my_id = self._next_id
            self._next_id += 1
            self._job = (my_id, fn)
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._done_id == my_id, timeout):
                return False, None
            error, self._error = self._error, None
            if error is not None:
                raise error
            return True, self._value

    def _work(self, job: tuple[int, Callable[[], Any]]) -> None:
        job_id, fn = job
        value, error = None, None
        try:
            value = fn()
        except Exception as exc:  # handed to the caller, who decides
            error = exc
        with self._cond:
            self._value, self._error = value, error
            self._done_id = job_id
            self.busy = False  # before the caller wakes, so its next call is accepted at once
            self._cond.notify_all()


class LiveTracker:
    """Where the faces are in every frame, cheaply.

    Known faces are re-detected in a crop about twice their size at `track_size` (192² is ~11×
    fewer pixels than 640²): the crops are cut on the loop's thread, the detector runs on a
    `BoundedCall` thread the loop waits on for at most `deadline_s`. A full-frame detection runs
    every `full_every` frames, whenever no face is known and as soon as a track is lost, on the
    `FullDetector` thread; its result replaces the tracks when it arrives (the next crop
    re-detection brings them up to date). `lost_now` / `full_arrived` tell the engine which
    tracks the last update lost and whether a full result came in with it.
    """

    def __init__(self, faces: FacePipeline, full: FullDetector, *, full_every: int) -> None:
        self._faces = faces
        self._full = full
        self.full_every = full_every
        self._tracks: list[Face] = []
        self._last_full_submit: int | None = None
        self._call = BoundedCall("face-tracker")
        self.errors = 0
        self.late = 0
        self.lost_now: list[Face] = []  # tracks the last update lost in their crop (last known place)
        self.full_arrived = False  # whether the last update took a full-detection result

    def reset(self) -> None:
        self._tracks = []
        self._last_full_submit = None

    def stop(self) -> None:
        self._call.stop()

    def update(self, frame: Frame, frame_index: int, *, full_size: int, track_size: int, deadline_s: float = 1.0) -> list[Face] | None:
        """The faces in this frame, or None when the detector could not tell in time (late,
        failed): a miss for this frame, while the known tracks are kept for the next one."""
        result = self._full.take_result()
        self.full_arrived = result is not None
        self.lost_now = []
        if result is not None:
            self._tracks = result.faces
        lost = False
        if self._tracks:
            tracked = self._redetect(frame, self._tracks, track_size, deadline_s)
            if tracked is None:
                return None
            self.lost_now = [old for old, new in zip(self._tracks, tracked) if new is None]
            lost = bool(self.lost_now)
            self._tracks = dedupe_faces([f for f in tracked if f is not None])
        due = self._last_full_submit is None or frame_index - self._last_full_submit >= self.full_every
        # A face that left its crop (turned, moved fast) is looked for everywhere at once: with
        # several faces, waiting for the next due detection would leave it unswapped that long.
        if (due or lost or not self._tracks) and self._full.idle:
            self._full.submit(frame, frame_index, full_size)
            self._last_full_submit = frame_index
        return list(self._tracks)

    def _redetect(self, frame: Frame, faces: list[Face], size: int, deadline_s: float) -> list[Face | None] | None:
        crops = [crop_around(frame, face, size) for face in faces]
        detect = self._faces.detect
        try:
            done, found_lists = self._call.call(lambda: [detect(patch, size) for patch, _ in crops], deadline_s)
        except Exception as exc:  # a failing detector is a miss for this frame, not a crash
            self.errors += 1
            if self.errors <= 3 or self.errors % 100 == 0:
                log.error("face tracking failed (%d so far): %s", self.errors, exc)
            return None
        if not done:
            self.late += 1
            return None
        return [crop.to_frame(nearest_to_centre(found, size)) if found else None for found, (_, crop) in zip(found_lists, crops)]


def _scaled(face: Face, k: float) -> Face:
    x1, y1, x2, y2 = face.box
    return Face(box=(x1 * k, y1 * k, x2 * k, y2 * k), score=face.score, kps=(face.kps * np.float32(k)).astype(np.float32))


# ---------------------------------------------------------------------------------------------
# The swap worker
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SwapJob:
    region: Frame  # a private copy of the faces' region of the frame
    faces: list[Face]  # in region coordinates
    frame_faces: list[Face]  # the same faces in frame coordinates, for matching later
    level: Level  # the enhancer runs only at Level.full
    t_capture: float


@dataclass(frozen=True, slots=True)
class SwapResult:
    faces: list[Face]  # frame coordinates at capture time
    swapped: list[Any]  # one per face, what FacePipeline.composite pastes
    t_capture: float
    t_done: float


class SwapWorker(NewestJobWorker):
    """Runs the swap model on the newest job in its own thread; never blocks the caller."""

    def __init__(self, faces: FacePipeline, stats: LiveStats, clock: Clock) -> None:
        super().__init__("swap-worker")
        self._faces = faces
        self._stats = stats
        self._clock = clock
        self._result: SwapResult | None = None
        self._failed_since: float | None = None  # set after a model error, cleared by a success
        self._job_started: float | None = None  # when the swap now running began
        self._usual_s: float | None = None  # moving average of a swap's duration
        self.swaps = 0
        self.errors = 0

    def submit(self, job: SwapJob) -> None:
        self._hand_in(job)

    def latest(self) -> tuple[SwapResult | None, bool]:
        """The newest successful result, and whether the model failed after it."""
        with self._cond:
            return self._result, self._failed_since is not None

    def stale(self, now: float, max_age_s: float) -> bool:
        """True when the newest result is older than `max_age_s` *and* the swap now running has
        taken over 4× the usual swap time: the model hangs (driver, deadlock). A model that is
        merely slow (inswapper on a CPU: seconds per swap) keeps its results usable."""
        with self._cond:
            if self._result is None or now - self._result.t_done <= max_age_s:
                return False
            if self._job_started is None:
                return False  # idle (no face to swap for a while): the next result is on its way
            return now - self._job_started > 4.0 * (self._usual_s or 0.0)

    def _on_thread_start(self) -> None:
        lower_thread_priority()

    def _begin(self, job: SwapJob) -> None:
        self._job_started = self._clock()

    def _work(self, job: SwapJob) -> None:
        t0 = self._job_started or self._clock()
        timer = StageTimer()
        try:
            swapped = self._faces.swap_faces(job.region, job.faces, job.level, timer)
            if len(swapped) != len(job.faces):
                raise RuntimeError(f"swap_faces returned {len(swapped)} results for {len(job.faces)} faces")
            if any(_is_flat(getattr(sw, "crop", sw)) for sw in swapped):
                # NaN/Inf model output turns into a flat crop in the uint8 conversion: a model
                # error, never a face to publish.
                raise RuntimeError("swap model returned a flat (NaN or empty) face crop")
        except Exception as exc:  # a model error must never stop the output; on_miss covers it
            self.errors += 1
            if self.errors <= 3 or self.errors % 100 == 0:
                log.error("swap model failed (%d so far): %s", self.errors, exc)
            with self._cond:
                self._job_started = None
                if self._failed_since is None:
                    self._failed_since = self._clock()
            return
        t1 = self._clock()
        self._stats.record_stage("swap_job", (t1 - t0) * 1000.0)
        for stage, ms in timer.ms.items():  # align / swap (the model) / enhance
            self._stats.record_stage(stage, ms)
        with self._cond:
            self._job_started = None
            took = t1 - t0
            self._usual_s = took if self._usual_s is None else 0.8 * self._usual_s + 0.2 * took
            self.swaps += 1
            self._failed_since = None
            if self._result is None or job.t_capture >= self._result.t_capture:
                self._result = SwapResult(job.frame_faces, list(swapped), job.t_capture, t1)


FLAT_CROP_STD = 2.0
"""A swapped crop whose pixel spread is below this is not a face (a NaN output, an empty tensor)."""


def _is_flat(crop: Frame) -> bool:
    return float(np.std(crop[::4, ::4])) < FLAT_CROP_STD


def lower_thread_priority(nice: int = 10) -> None:
    """Let the publishing loop win the CPU over the model workers: on a 2-core machine a swap
    model that takes seconds must not take the cores the next frame needs. Linux: per-thread nice;
    elsewhere nothing (not allowed or not per thread)."""
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError as exc:
        log.debug("could not lower the worker thread's priority: %s", exc)


def _shift(face: Face, dx: float, dy: float) -> Face:
    x1, y1, x2, y2 = face.box
    kps = (face.kps - np.array([dx, dy], np.float32)).astype(np.float32)
    return Face(box=(x1 - dx, y1 - dy, x2 - dx, y2 - dy), score=face.score, kps=kps)


def _region(frame: Frame, faces: list[Face], scale: float) -> tuple[int, int, int, int]:
    """Integer rectangle (x0, y0, x1, y1) around all faces, each box grown by `scale`, clipped."""
    h, w = frame.shape[:2]
    x0, y0, x1, y1 = w, h, 0, 0
    for f in faces:
        cx, cy = (f.box[0] + f.box[2]) / 2, (f.box[1] + f.box[3]) / 2
        half = max(f.width, f.height) * scale / 2
        x0, y0 = min(x0, int(cx - half)), min(y0, int(cy - half))
        x1, y1 = max(x1, int(cx + half) + 1), max(y1, int(cy + half) + 1)
    return max(0, x0), max(0, y0), min(w, x1), min(h, y1)


SAME_TRACK_WIDTHS = 0.5
"""A lost track was a swapped face when their centres are closer than this × the smaller width
(both are positions of one face a frame or a detection apart; a neighbour is a width away)."""


def _near_any(face: Face, others: list[Face]) -> bool:
    """Whether `face` is one of `others` (see SAME_TRACK_WIDTHS)."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    return any(
        np.hypot((o.box[0] + o.box[2]) / 2 - cx, (o.box[1] + o.box[3]) / 2 - cy) < SAME_TRACK_WIDTHS * max(min(face.width, o.width), 1.0)
        for o in others
    )


def _match(current: list[Face], previous: list[Face]) -> list[int | None]:
    """For each current face, the index of the previous face it is (greedy nearest centre)."""
    if len(current) == 1 and len(previous) == 1:
        return [0]  # one face in, one swapped face out: it is the same person moving
    taken: set[int] = set()
    out: list[int | None] = []
    for face in current:
        cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
        best, best_d = None, TRACK_MATCH_WIDTHS * max(face.width, 1.0)
        for i, p in enumerate(previous):
            if i in taken:
                continue
            d = float(np.hypot((p.box[0] + p.box[2]) / 2 - cx, (p.box[1] + p.box[3]) / 2 - cy))
            if d < best_d:
                best, best_d = i, d
        if best is not None:
            taken.add(best)
        out.append(best)
    return out


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


@dataclass
class _Controls:
    """Requests from other threads (control socket, tray), applied by the pipeline loop."""

    commands: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    quit: threading.Event = field(default_factory=threading.Event)


class LiveEngine:
    """Runs the live pipeline; also the `Controllable` the control socket and tray drive."""

    def __init__(
        self,
        cfg: Config,
        *,
        source: FrameSource,
        sink_factory: Callable[[int, int, float], Sink],
        faces: FacePipeline,
        config_path: Path | None = None,
        providers: dict[str, str] | None = None,
        badge: Callable[[Frame, str, str], None] | None = None,
        placeholder: Callable[[int, int, str], Frame] | None = None,
        source_factory: Callable[[CameraConfig], FrameSource] | None = None,
        pipeline_factory: Callable[[Config], tuple[FacePipeline, dict[str, str]]] | None = None,
        file_cfg: Config | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        """`source_factory` rebuilds the source when a config reload changes [camera];
        `pipeline_factory` rebuilds the face pipeline (and says which provider runs each model)
        when a reload changes the models or what they were built with. Without them such changes
        wait for a restart. `file_cfg` is the config as the file says it, when `cfg` carries
        command-line overrides (`--face`)."""
        self.cfg = cfg
        # A source face chosen at run time (`--face`, `vcamd set-face`, the tray) outlives edits of
        # other keys in the file; it gives way only when the file's own source_face is edited.
        self._file_cfg = file_cfg or cfg
        self._face_override: Path | None = (
            cfg.swap.source_face if cfg.swap.source_face != self._file_cfg.swap.source_face else None
        )
        self._source_factory = source_factory
        self._pipeline_factory = pipeline_factory
        self._pipeline_generation = 0  # the newest rebuild asked for; older ones are discarded
        self._pipeline_cfg = cfg  # what the running face pipeline was built from
        self._captured_before = 0  # frames captured by readers replaced on a camera change
        self._skipped_before = 0  # frames skipped by sources replaced on a camera change (dropped)
        self.config_path = config_path
        self.source = source
        self._sink_factory = sink_factory
        self.sink: Sink | None = None  # built once the source's frame size is known
        self.faces = faces
        self._providers = providers or {}
        self._badge = badge or _load_badge()
        self._placeholder = placeholder or _load_placeholder()
        self._clock = clock
        self.stats = LiveStats(clock)
        self.slot = LatestFrame()
        self.reader = CameraReader(source, self.slot, reopen_interval_s=cfg.camera.reopen_interval_s, clock=clock)
        self.watchdog = Watchdog(cfg.watchdog, clock, enhancer_enabled=cfg.enhancer.enabled)
        self.worker = SwapWorker(faces, self.stats, clock)
        self.full_detector = FullDetector(faces, self.stats, clock)
        self.tracker = LiveTracker(faces, self.full_detector, full_every=cfg.detection.full_every)
        self._controls = _Controls()
        self._enabled = cfg.swap.enabled
        self._config_error: str | None = None
        self._frame_index = 0
        self._targets: list[Face] = []  # faces being swapped, as of the last processed frame
        self._found = False  # whether the last detection knew where the faces are (see _process)
        # Swapped faces the tracker lost in their crop, until the next full detection says whether
        # they are still there: a miss (on_miss) meanwhile, never a raw face in a "swapped" frame.
        self._unseen: list[Face] = []
        self._last_seen: list[Face] = []  # where faces were last seen (for blur after a miss)
        self._last_good: Frame | None = None  # last published swapped frame (for hold)
        self._last_published: Frame | None = None
        self._last_frame_at: float | None = None
        self._size: tuple[int, int] | None = None  # (width, height) of the output
        self._gpu = GpuSampler()
        self._sink_stats: dict | None = None  # the status snapshot the preview page shows
        self._state = "starting"
        self._sink_failure_streak = 0  # consecutive failed sink writes (logged once per streak)

    # -- Controllable ---------------------------------------------------------------------------
    def status(self) -> dict:
        lat = self.stats.latency_percentiles()
        source_face = self.cfg.swap.source_face
        return {
            "enabled": self._enabled,
            "state": self._state,
            "camera": self.reader.state.value,
            "level": self.watchdog.level.name,
            "quality": "auto" if self.watchdog.automatic else self.watchdog.level.name,
            "fps": round(self.stats.recent_fps(), 2),
            "latency_ms": lat,
            "source_face": str(source_face) if source_face else None,
            "providers": dict(self._providers),
            "config_error": self._config_error or self._missing_source_face(),
            "frames": {
                "published": self.stats.published,
                "dropped": self._dropped(),
                **{o.value: self.stats.outcomes[o] for o in (Outcome.swapped, Outcome.held, Outcome.blurred, Outcome.passthrough)},
            },
            "queue_depth": self.slot.depth,
            "gpu": self._gpu.latest(),
        }

    def _missing_source_face(self) -> str | None:
        """Derived, not stored: swapping is on but there is no face to swap in (nothing leaks —
        the face is held/blurred — but the user must be told why their face is not swapped)."""
        if self._enabled and getattr(self.faces, "source", True) is None:
            return "no source face is set — use `vcamd set-face PHOTO`, the tray's Source face menu, or [swap] source_face"
        return None

    def set_enabled(self, on: bool) -> None:
        self._enabled = bool(on)  # a plain bool store: read once per frame by the loop

    def set_source_face(self, path: Path) -> None:
        setter = getattr(self.faces, "set_source_face", None)
        if setter is None:
            raise VcamdError("this face engine cannot change the source face at run time", fix="restart `vcamd run`")
        setter(Path(path))  # raises FaceError on a bad image, before anything changes
        self._controls.commands.put(lambda: self._record_source_face(Path(path)))

    def set_quality(self, level: Level | None) -> None:
        self._controls.commands.put(lambda: self._log_events([t] if (t := self.watchdog.force(level)) else []))

    def reload_config(self) -> None:
        try:
            new, _ = load_config(self.config_path)
        except VcamdError as err:
            self.on_config_error(err)
            return
        self.on_config_change(new, self._file_cfg.changed_sections(new))

    def snapshot_png(self) -> bytes:
        frame = self._last_published
        if frame is None:
            raise VcamdError("no frame has been published yet", fix="try again in a moment")
        ok, buf = cv2.imencode(".png", frame)
        if not ok:
            raise VcamdError("could not encode the snapshot as PNG")
        return buf.tobytes()

    def latest_frame(self) -> Frame | None:
        """The frame last published (read-only: the caller must not draw on it)."""
        return self._last_published

    def recent_transitions(self) -> list[dict]:
        """The watchdog's transitions with their reasons and measured results, oldest first."""
        return self.watchdog.history()

    def set_badge(self, on: bool) -> None:
        """Show or hide the "AI-altered" badge from the next frame on."""
        value = bool(on)
        self._controls.commands.put(
            lambda: setattr(self, "cfg", self.cfg.model_copy(update={"disclosure": self.cfg.disclosure.model_copy(update={"badge": value})}))
        )

    def request_quit(self) -> None:
        self._controls.quit.set()
        self.slot.wake()

    # -- settings ---------------------------------------------------------------------------------
    def on_config_change(self, new: Config, changed: set[str]) -> None:
        """The config watcher saw a valid file (any thread): clear the error, apply between frames."""
        self._config_error = None
        if changed:
            self._controls.commands.put(lambda: self.apply_config(self._with_runtime_choices(new)))
        else:
            log.info("config file is valid again; running settings unchanged")

    def _with_runtime_choices(self, file_cfg: Config) -> Config:
        """The file's new config, with a source face chosen at run time kept unless the file's own
        source_face was edited (then the file wins). Runs on the loop's thread."""
        previous, self._file_cfg = self._file_cfg, file_cfg
        if file_cfg.swap.source_face != previous.swap.source_face:
            self._face_override = None
        if self._face_override is None:
            return file_cfg
        return file_cfg.model_copy(update={"swap": file_cfg.swap.model_copy(update={"source_face": self._face_override})})

    def on_config_error(self, err: VcamdError) -> None:
        """The edited config is broken: keep running on the last good one and report why."""
        self._config_error = str(err)
        log.error("config reload failed, keeping the running settings: %s", err)

    def apply_config(self, new: Config) -> None:
        """Apply a changed config between two frames (the loop's thread)."""
        changed = self.cfg.changed_sections(new)
        # Against what the running pipeline was built from: after a failed load, every later edit
        # tries again (and keeps reporting the error) until the models load.
        rebuild = pipeline_needs_rebuild(self._pipeline_cfg, new)
        if not rebuild:
            self._pipeline_generation += 1  # an edit reverted while a load was in flight: drop it
        needs_restart = {"models"} if rebuild and self._pipeline_factory is None else set()
        if "camera" in changed and self._source_factory is None:
            needs_restart.add("camera")
        if needs_restart:
            self._config_error = f"changes to [{'], ['.join(sorted(needs_restart))}] take effect after a restart of vcamd run"
            log.warning(self._config_error)
        if "camera" in changed and self._source_factory is not None:
            self._restart_camera(new)
        if "watchdog" in changed:
            old = self.watchdog
            self.watchdog = Watchdog(new.watchdog, self._clock, enhancer_enabled=old.enhancer_enabled)
            self.watchdog.transitions, self.watchdog.results = old.transitions, old.results  # keep the history
            self.watchdog._forced = old._forced  # a quality the user pinned stays pinned
        if "detection" in changed:
            self.tracker.full_every = new.detection.full_every
        if "swap" in changed:
            if new.swap.enabled != self.cfg.swap.enabled:
                self._enabled = new.swap.enabled
            if new.swap.face_selection != self.cfg.swap.face_selection and hasattr(self.faces, "selection"):
                self.faces.selection = new.swap.face_selection
            if new.swap.source_face != self.cfg.swap.source_face and new.swap.source_face is not None:
                setter = getattr(self.faces, "set_source_face", None)
                if setter is not None:
                    try:
                        setter(new.swap.source_face)
                    except VcamdError as err:
                        self._config_error = str(err)
        if "enhancer" in changed and not rebuild:
            self._apply_enhancer(new)
        if rebuild and self._pipeline_factory is not None:
            self._rebuild_pipeline(new)
        old_cfg, self.cfg = self.cfg, new
        if changed & {"virtual_camera", "preview"}:
            self._reopen_sink(old_cfg)
        log.info("config applied: changed %s", ", ".join(sorted(changed)) or "nothing")

    def _rebuild_pipeline(self, new: Config) -> None:
        """Load the new models in a background thread (seconds for a real swapper) while the
        running pipeline keeps publishing; swap the new one in between two frames when ready."""
        assert self._pipeline_factory is not None
        self._pipeline_generation += 1
        generation, factory = self._pipeline_generation, self._pipeline_factory
        sizes = sorted({size for level in Level for size in _detect_sizes(new, level).values()})

        def build() -> None:
            try:
                faces, providers = factory(new)
                blank = np.zeros((64, 64, 3), np.uint8)
                for size in sizes:  # build every detector input size now, not mid-stream
                    faces.detect(blank, size)
            except VcamdError as err:
                self._config_error = f"new models not loaded, keeping the running ones: {err}"
                log.error(self._config_error)
                return
            except Exception as exc:  # an unexpected failure must not take the daemon down
                self._config_error = f"new models not loaded, keeping the running ones: {exc}"
                log.exception("face pipeline rebuild failed")
                return
            self._controls.commands.put(lambda: self._install_pipeline(generation, faces, providers, new))

        log.info("loading the face pipeline for the new settings in the background")
        threading.Thread(target=build, name="pipeline-rebuild", daemon=True).start()

    def _install_pipeline(self, generation: int, faces: FacePipeline, providers: dict[str, str], built_from: Config) -> None:
        if generation != self._pipeline_generation:
            return  # a newer edit is being loaded; this one is already out of date
        self._pipeline_cfg = built_from
        self.faces = faces
        self.worker._faces = faces
        self.full_detector._faces = faces
        self.tracker._faces = faces
        self.tracker.reset()
        self._providers = dict(providers)
        # The last swap stays on screen until the new pipeline's first swap lands (no miss, no leak).
        self.watchdog.enhancer_enabled = self.cfg.enhancer.enabled
        log.info("face pipeline replaced; providers: %s", self._providers)

    def _apply_enhancer(self, new: Config) -> None:
        """Enhancer on/off/strength takes effect on the next frame (the model loads on first use)."""
        setter = getattr(self.faces, "set_enhancer", None)
        if setter is None:
            self._config_error = "this face engine cannot change [enhancer] at run time; restart vcamd run"
            return
        try:
            setter(new.enhancer.enabled, new.enhancer.strength)
        except VcamdError as err:
            self._config_error = f"[enhancer]: {err}; keeping the enhancer off"
            log.error(self._config_error)
            setter(False, new.enhancer.strength)
            self.watchdog.enhancer_enabled = False
            return
        self.watchdog.enhancer_enabled = new.enhancer.enabled

    def _reopen_sink(self, old_cfg: Config) -> None:
        """[virtual_camera]/[preview] changed: close the output and open it with the new settings.
        If the new one cannot open, go back to the old settings so the output never vanishes."""
        if self.sink is None or self._size is None:
            return
        width, height = self._size
        self.sink.close()
        try:
            self.sink = self._sink_factory(width, height, self.source.fps)
            self.sink.open()
            log.info("output reopened with the new settings")
        except VcamdError as err:
            self._config_error = f"output settings: {err}; keeping the previous output"
            log.error(self._config_error)
            self.cfg = self.cfg.model_copy(update={"virtual_camera": old_cfg.virtual_camera, "preview": old_cfg.preview})
            self.sink = self._sink_factory(width, height, self.source.fps)
            self.sink.open()

    def _restart_camera(self, new: Config) -> None:
        """Reopen the camera with the new [camera] settings; if it cannot be opened now, the
        reader keeps retrying every reopen_interval_s and the offline frame is published meanwhile."""
        assert self._source_factory is not None
        try:
            source = self._source_factory(new.camera)
        except VcamdError as err:
            self._config_error = f"[camera]: {err}; keeping the current camera"
            log.error(self._config_error)
            return
        self._captured_before += self.reader.captured + getattr(self.source, "skipped", 0)
        self._skipped_before += getattr(self.source, "skipped", 0)
        self.reader.stop()
        self.source = source
        self.reader = CameraReader(source, self.slot, reopen_interval_s=new.camera.reopen_interval_s, clock=self._clock)
        try:
            self.reader.open_first()
        except VcamdError as err:
            log.warning("new camera not available yet (%s); retrying every %.1f s", err, new.camera.reopen_interval_s)
        self.reader.start()
        self.tracker.reset()
        log.info("camera reopened: %s", source.description)

    def _record_source_face(self, path: Path) -> None:
        """The engine already swaps with the new face; keep the running config in step with it
        (status shows it) and remember it as the user's choice over the file's. Until the first
        swap with the new face lands, the last swap stays on screen."""
        self._face_override = path
        self.cfg = self.cfg.model_copy(update={"swap": self.cfg.swap.model_copy(update={"source_face": path})})

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, max_frames: int | None = None) -> dict:
        """Publish until `max_frames` frames went out or `request_quit()`; returns the stats JSON."""
        try:
            self.reader.open_first()  # a bad source fails here, with its own message
            self._warm_up_detector()
            self._size = _source_size(self.source, self.cfg)
            self.sink = self._sink_factory(self._size[0], self._size[1], self.source.fps)
            self.sink.open()  # opened before the first frame and kept open
        except BaseException:
            # Nothing started yet: release the camera (its light goes off) and the tracker's thread.
            self.reader.stop()
            self.tracker.stop()
            raise
        try:
            self.reader.start()
            self.worker.start()
            self.full_detector.start()
            self._gpu.start()
            self.stats.reset_clock()
            self._last_frame_at = self._clock()
            self._state = "running"
            if (missing := self._missing_source_face()) is not None:
                log.warning(missing)
            interval = 1.0 / max(1.0, self.source.fps)
            while not self._controls.quit.is_set():
                if max_frames is not None and self.stats.published >= max_frames:
                    break
                self._run_commands()
                captured = self.slot.take(timeout=interval)
                if captured is None:
                    self._maybe_offline()
                    continue
                self._last_frame_at = self._clock()
                self._state = "running"
                self._process(captured)
        finally:
            self._state = "stopped"
            self.reader.stop()
            self.worker.stop()
            self.full_detector.stop()
            self.tracker.stop()
            if self.sink is not None:
                self.sink.close()
        return self.stats_json()

    def stats_json(self) -> dict:
        skipped = getattr(self.source, "skipped", 0)
        return self.stats.to_json(
            captured=self._captured_before + self.reader.captured + skipped,
            dropped=self._dropped(),
            source_fps=self.source.fps,
            transitions=self.watchdog.history(),
            queue_depth_max=self.slot.max_depth,
            providers=self._providers,
            gpu=self._gpu.stop(),
        )

    def _dropped(self) -> int:
        """Frames captured but never processed: replaced in the slot, or skipped by a file source
        that fell behind (also those of sources replaced on a camera change)."""
        return self.slot.dropped + self._skipped_before + getattr(self.source, "skipped", 0)

    def _run_commands(self) -> None:
        while True:
            try:
                command = self._controls.commands.get_nowait()
            except queue.Empty:
                return
            try:
                command()
            except Exception as exc:  # a failed reload/control request must never end the stream
                self._config_error = f"could not apply a settings change: {exc}"
                log.exception("applying a control or config request failed; running on")

    def _maybe_offline(self) -> None:
        """No camera frame within one interval: publish a placeholder if the camera is gone."""
        assert self._last_frame_at is not None and self._size is not None
        gone = self.reader.state is SourceState.offline
        stalled = self._clock() - self._last_frame_at > self.cfg.camera.stall_timeout_s
        if not (gone or stalled):
            return
        if self._state != "offline":
            log.warning("publishing the offline frame: camera %s", "lost" if gone else "stalled")
        self._state = "offline"
        frame = self._placeholder(self._size[0], self._size[1], "Camera offline — reconnecting…")
        self._publish(frame, Outcome.offline, None)

    def _process(self, captured: Captured) -> None:
        t_take = self._clock()
        self.stats.record_stage("queue", (t_take - captured.t_capture) * 1000.0)
        self.stats.processed += 1
        frame = self._fit(captured.frame)
        level = self.watchdog.level
        self._frame_index += 1
        stage_ms: dict[str, float] = {}
        if not self._enabled:
            self._publish(frame, Outcome.off, captured.t_capture)
            return

        # 1. Where are the faces? (every other frame at frame_skip: reuse the last positions)
        t0 = self._clock()
        if level is Level.frame_skip and self._frame_index % 2 == 1:
            # The skipped frame inherits the last decision: "faces there, none selected" stays a
            # passthrough, never a blurred frame every other frame.
            targets = self._targets
            found = self._found
        else:
            faces = self.tracker.update(
                frame, self._frame_index, **self._detect_sizes(level), deadline_s=self._track_deadline_s()
            )
            previous = self._targets + self._unseen  # faces swapped last frame, or still unaccounted for
            if self.tracker.full_arrived:
                self._unseen = []
            self._unseen += [f for f in self.tracker.lost_now if _near_any(f, previous)]
            targets = self._select(faces or [], frame)
            # A frame whose faces are unknown (detector late or failing, selection failing) is a
            # miss, never a "no one to swap here" frame.
            found = bool(faces) and targets is not None
            targets = targets or []
            self._targets, self._found = targets, found
            t1 = self._clock()
            stage_ms["detect"] = (t1 - t0) * 1000.0
            self.stats.record_stage("detect", stage_ms["detect"])
            # 2. Hand the face region to the swap worker (newest wins, never waits).
            if targets:
                self._submit(frame, targets, level, captured.t_capture)
                stage_ms["submit"] = (self._clock() - t1) * 1000.0
                self.stats.record_stage("submit", stage_ms["submit"])
        if targets:
            self._last_seen = targets

        # 3. Paste the latest swap at the faces' current positions; on_miss for what cannot be.
        t2 = self._clock()
        out, outcome = self._compose(frame, targets, found, self._unseen)
        stage_ms["composite"] = (self._clock() - t2) * 1000.0
        self.stats.record_stage("composite", stage_ms["composite"])
        self._publish(out, outcome, captured.t_capture, stage_ms)
        # The loop's own time for this frame (take → published), the base of the overhead figure.
        self.stats.record_stage("loop", (self._clock() - t_take) * 1000.0)

    def _select(self, faces: list[Face], frame: Frame) -> list[Face] | None:
        """The faces to swap; None when selection failed (treated as a miss)."""
        if not faces:
            return []
        try:
            return self.faces.select(faces, frame)
        except Exception as exc:  # e.g. the recognizer behind face_selection = "reference" failed
            log.error("face selection failed: %s", exc)
            return None

    def _track_deadline_s(self) -> float:
        """How long the loop waits for the tracker: TRACK_DEADLINE_FRAMES frame intervals. Long
        enough that a busy machine's slow frame is late rather than a miss; short enough that a
        hung detector costs the stream one short hiccup."""
        return TRACK_DEADLINE_FRAMES / max(1.0, self.source.fps)

    def _detect_sizes(self, level: Level) -> dict[str, int]:
        return _detect_sizes(self.cfg, level)

    def _warm_up_detector(self) -> None:
        """Build the detector's session for every input size a level may ask for, now: building
        one mid-stream costs a few hundred ms, a visible stall."""
        blank = np.zeros((64, 64, 3), np.uint8)
        sizes = {size for level in Level for size in self._detect_sizes(level).values()}
        for size in sorted(sizes):
            self.faces.detect(blank, size)

    def _fit(self, frame: Frame) -> Frame:
        """Frames must keep the size the sink was opened with (a camera may reopen at another)."""
        assert self._size is not None
        if (frame.shape[1], frame.shape[0]) != self._size:
            return cv2.resize(frame, self._size, interpolation=cv2.INTER_AREA)
        return frame

    def _submit(self, frame: Frame, targets: list[Face], level: Level, t_capture: float) -> None:
        x0, y0, x1, y1 = _region(frame, targets, 2.0)
        region = frame[y0:y1, x0:x1].copy()  # private copy: the loop keeps drawing on `frame`
        local = [_shift(f, x0, y0) for f in targets]
        self.worker.submit(SwapJob(region, local, list(targets), level, t_capture))

    def _compose(self, frame: Frame, targets: list[Face], found: bool, unseen: list[Face] | None = None) -> tuple[Frame, Outcome]:
        on_miss = self.cfg.swap.on_miss
        unseen = unseen or []
        if not targets and found and not unseen:
            # Faces are there but none is selected (face_selection = reference): nothing to swap.
            return frame, Outcome.passthrough
        result, failed = self.worker.latest()
        usable = result is not None and not failed and not self.worker.stale(self._clock(), self.cfg.swap.max_result_age_s)
        matches = _match(targets, result.faces) if usable and targets else [None] * len(targets)
        missing = [f for f, m in zip(targets, matches) if m is None]
        if targets and not missing:
            for face, m in zip(targets, matches):
                try:
                    self.faces.composite(frame, result.swapped[m], face)
                except Exception as exc:  # a paste failure is a miss for this frame, not a crash
                    log.error("composite failed: %s", exc)
                    missing.append(face)
            if not missing and not unseen:
                return frame, Outcome.swapped
        missing = missing + unseen
        # A miss: no usable swap for (some of) the faces, a swapped face lost, or no face found at all.
        if on_miss is OnMiss.passthrough:
            return frame, Outcome.passthrough
        if on_miss is OnMiss.hold and self._last_good is not None:
            return self._last_good, Outcome.held
        # blur (or hold with nothing to hold yet): pixelate where the faces are or were last seen.
        where = missing or self._last_seen
        if where:
            obscure_region(frame, _region(frame, where, MISS_REGION_SCALE))
        else:
            obscure_region(frame, (0, 0, frame.shape[1], frame.shape[0]))  # no idea where a face is: all of it
        return frame, Outcome.blurred

    def _publish(self, frame: Frame, outcome: Outcome, t_capture: float | None, stage_ms: dict | None = None) -> None:
        disclosure = self.cfg.disclosure
        if disclosure.badge and outcome in (Outcome.swapped, Outcome.blurred):
            # held frames already carry the badge; off/passthrough/offline frames are not altered
            t = self._clock()
            self._badge(frame, disclosure.text, disclosure.corner.value)
            if stage_ms is not None:
                stage_ms["badge"] = (self._clock() - t) * 1000.0
                self.stats.record_stage("badge", stage_ms["badge"])
        t_send = self._clock()
        if self.stats.published % SINK_STATS_EVERY == 0:
            self._sink_stats = self.status()
        try:
            self.sink.send(frame, self._sink_stats)
        except Exception as exc:  # a failed write is retried with the next frame, never fatal
            # One line when a streak starts and one when it ends, not one per frame at 30 fps.
            if self._sink_failure_streak == 0:
                log.warning("sink write failed (retrying with every frame): %s", exc)
            self._sink_failure_streak += 1
        else:
            if self._sink_failure_streak:
                log.info("sink writes work again after %d failed frames", self._sink_failure_streak)
                self._sink_failure_streak = 0
        now = self._clock()
        self.stats.record_stage("publish", (now - t_send) * 1000.0)
        self._last_published = frame
        if outcome is Outcome.swapped:
            self._last_good = frame
        latency = None if t_capture is None else (now - t_capture) * 1000.0
        self.stats.record_publish(outcome, self.watchdog.level, latency)
        if latency is not None and outcome is not Outcome.off:
            self._log_events(self.watchdog.observe(latency, stage_ms))

    def _log_events(self, events: list[Transition | TransitionResult]) -> None:
        for event in events:
            log.info(event.log_line())


def _detect_sizes(cfg: Config, level: Level) -> dict[str, int]:
    det, scale = cfg.detection, cfg.watchdog.lowres_scale
    return {"full_size": _level_size(det.size, level, scale, 128), "track_size": _level_size(det.track_size, level, scale, 128)}


def pipeline_needs_rebuild(old: Config, new: Config) -> bool:
    """Whether a config change needs new model sessions or a face engine built with other values.

    Everything else (source face, face selection, enhancer on/off and strength, full_every,
    on_miss, the watchdog) is applied to the running pipeline directly."""
    if old.models != new.models:
        return True
    if old.detection.model_copy(update={"full_every": 0}) != new.detection.model_copy(update={"full_every": 0}):
        return True
    swap_keys = ("mouth_mask", "color_correction", "reference_face")
    if any(getattr(old.swap, k) != getattr(new.swap, k) for k in swap_keys):
        return True
    # Switching to "reference" needs the reference photo embedded, which the engine does at build.
    return new.swap.face_selection != old.swap.face_selection and new.swap.face_selection == "reference"


def build_face_pipeline(cfg: Config) -> tuple[FacePipeline, Callable[[], dict[str, str]]]:
    """The real face engine for `cfg`, and a function telling which provider runs each model."""
    from vcamd.process import FaceEngine
    from vcamd.runtime import Sessions

    sessions = Sessions(list(cfg.models.providers), cfg.models.threads)
    return FaceEngine.from_config(cfg, sessions), sessions.active_providers


def _source_size(source: FrameSource, cfg: Config) -> tuple[int, int]:
    size = getattr(source, "frame_size", None)
    return size if size else (cfg.camera.width, cfg.camera.height)


def _load_badge() -> Callable[[Frame, str, str], None]:
    from vcamd.badge import draw_badge

    return draw_badge


def _load_placeholder() -> Callable[[int, int, str], Frame]:
    from vcamd.live.placeholder import offline_frame

    return offline_frame
