"""The live engine: camera in, swapped frames out at the camera's cadence, whatever the model costs.

`LiveEngine` owns the parts, runs the loop and is the control surface; each decision lives in its
own module: `tracking` (where the faces are, which were lost), `swapworker` (the swap model),
`compose` (the privacy rule: what each face gets), `publisher` (badge, sink, the frames kept),
`reconfigure` (how each config key takes effect), `newest` (the newest-wins hand-offs).

Threads:
* **camera-reader** (`sources.CameraReader`) writes the newest frame into a one-frame slot;
* **the loop** (`LiveEngine.run`, on the caller's thread) applies queued commands, takes the newest
  frame, asks the tracker where the faces are, hands the face region to the swap worker without
  waiting, composes (swapped / held / obscured per face), badges and publishes — one output frame
  per camera frame;
* **face-tracker** (`newest.BoundedCall`) runs the crop re-detection; the loop waits for it at most
  two frame intervals;
* **full-detector** and **swap-worker** (`newest.NewestWorker`) work on the newest job handed in;
* **face-loader** embeds a new source photo (set-face, tray, a config edit) off the control
  threads and off the loop;
* **pipeline-rebuild** (only while a `[models]`-like edit loads) builds the new face pipeline;
* **gpu-sampler** (only with an NVIDIA GPU) polls utilisation once a second.

Every change from the control socket, the tray, the config watcher and SIGHUP is a command the loop
applies between two frames; callers that wait get the state after it applied. `status()` is a
snapshot the loop refreshes (every few frames and after each command), so asking costs the loop
nothing. Engine states: starting → running ⇄ offline → stopped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import cv2
import numpy as np

from vcamd.config import CameraConfig, Config, load_config
from vcamd.errors import VcamdError
from vcamd.live import reconfigure
from vcamd.live.compose import Composed, Scene, compose, lost_to_cover, match_swaps, region
from vcamd.live.publisher import Publisher
from vcamd.live.sources import CameraReader, FrameSource, LatestFrame, SourceState
from vcamd.live.stats import GpuSampler, LiveStats, count_misses
from vcamd.live.swapworker import SwapJob, SwapWorker
from vcamd.live.tracking import FaceReport, FullDetector, LiveTracker, all_detect_sizes, detect_sizes
from vcamd.live.watchdog import Transition, TransitionResult, Watchdog
from vcamd.process import StageTimer
from vcamd.quality import Level, rung
from vcamd.sinks.base import Sink
from vcamd.types import Captured, Face, Frame, Outcome

log = logging.getLogger(__name__)

Clock = Callable[[], float]

STATUS_EVERY = 10
"""The loop refreshes the status snapshot every this many frames (and after every command)."""

COMMAND_WAIT_S = 8.0
"""How long a control request waits for the loop to apply it (the CLI gives up after 10 s)."""

FACE_LOAD_WAIT_S = 8.0
"""How long set-face waits for the photo to be read and embedded."""

TRACK_DEADLINE_FRAMES = 2.0
"""The loop waits at most this many frame intervals for the crop re-detection of a frame."""

SWAP_REGION_SCALE = 2.0
"""The region handed to the swap worker around the faces, relative to each box."""

NO_SOURCE_FACE = "no source face is set — use `vcamd set-face PHOTO`, the tray's Source face menu, or [swap] source_face"


class FacePipeline(Protocol):
    """What the live engine needs from the face engine (`vcamd.process.FaceEngine`)."""

    def detect(self, frame: Frame, input_size: int | None = None) -> list[Face]: ...

    def select(self, faces: list[Face], frame: Frame) -> list[Face]: ...

    def swap_faces(self, frame: Frame, faces: list[Face], level: Level = ..., timer: StageTimer | None = ...) -> list[Any]: ...

    def composite(self, frame: Frame, swapped: Any, face: Face) -> None: ...


@dataclass
class _Command:
    """A change for the loop to apply between two frames; `done` is set once it ran."""

    apply: Callable[[], None]
    what: str
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    state: dict[str, Any] = field(default_factory=dict)  # the status right after it applied


class FaceLoader:
    """One daemon thread that reads and embeds source photos, one at a time (the detector and
    recognizer are shared with the live threads; the loop and the control threads never wait on
    a photo longer than they choose to)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="face-loader", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._jobs.put((fn, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)


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
        log_level_pinned: bool = False,
        clock: Clock = time.monotonic,
    ) -> None:
        """`source_factory` rebuilds the source when a config reload changes [camera];
        `pipeline_factory` rebuilds the face pipeline (and says which provider runs each model)
        when a reload changes a key marked "rebuild" in `reconfigure.TABLE`. Without them such
        changes wait for a restart. `file_cfg` is the config as the file says it, when `cfg`
        carries command-line overrides (`--face`); `log_level_pinned` (`-v`) keeps the log level
        whatever [runtime] log_level says."""
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
        self._log_level_pinned = log_level_pinned
        self._captured_before = 0  # frames captured by readers replaced on a camera change
        self._skipped_before = 0  # frames skipped by sources replaced on a camera change (dropped)
        self.config_path = config_path
        self.source = source
        self.faces = faces
        self._providers = providers or {}
        self._clock = clock
        self.stats = LiveStats(clock)
        self.slot = LatestFrame()
        self.reader = CameraReader(source, self.slot, reopen_interval_s=cfg.camera.reopen_interval_s, clock=clock)
        self.watchdog = Watchdog(cfg.watchdog, clock, enhancer_enabled=cfg.enhancer.enabled)
        self.worker = SwapWorker(faces, self.stats, clock)
        self.full_detector = FullDetector(faces, self.stats, clock)
        self.tracker = LiveTracker(faces, self.full_detector, full_every=cfg.detection.full_every)
        self.publisher = Publisher(sink_factory, badge=badge or _load_badge(), placeholder=placeholder or _load_placeholder(), clock=clock)
        self._face_loader = FaceLoader()
        self._gpu = GpuSampler()
        # -- control plane
        self._commands: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._quit = threading.Event()
        self._loop_lock = threading.Lock()  # guards _looping
        self._looping = False  # run() is on: commands go through the queue
        # -- state the loop owns (read by other threads only through the status snapshot)
        self._enabled = cfg.swap.enabled
        self._problems: dict[str, str] = {}  # the one owner of config_error: topic → message
        self._state = "starting"
        self._frame_index = 0
        self._report: FaceReport | None = None  # the last frame's, reused on frame_skip's skipped frames
        self._targets: list[Face] = []  # faces being swapped, as of the last processed frame
        self._covered_lost: list[Face] = []  # lost faces covered in the last frame
        self._last_frame_at: float | None = None
        self._no_source_logged = False
        self._status: dict[str, Any] = {}
        self._refresh_status()

    @property
    def sink(self) -> Sink | None:
        return self.publisher.sink

    # -- Controllable -----------------------------------------------------------------------------
    def status(self) -> dict:
        """The snapshot the loop refreshed last (every few frames and after each command)."""
        return dict(self._status)

    def set_enabled(self, on: bool) -> dict:
        value = bool(on)
        return self._ask(lambda: setattr(self, "_enabled", value), "on" if value else "off")

    def toggle(self) -> dict:
        """Swap on if off, off if on — decided by the loop, so two toggles never race."""
        return self._ask(lambda: setattr(self, "_enabled", not self._enabled), "toggle")

    def set_source_face(self, path: Path) -> dict:
        """Read and embed the photo (face-loader thread), then make it the source face (loop).
        Raises FaceError on a bad image, before anything changes; returns the state after."""
        path = Path(path)
        faces = self.faces
        setter = getattr(faces, "set_source_face", None)
        if setter is None:
            raise VcamdError("this face engine cannot change the source face at run time", fix="restart `vcamd run`")
        loaded = self._face_loader.submit(lambda: setter(path))
        # If the wait below gives up, the face is still recorded once it is read.
        loaded.add_done_callback(lambda f: f.exception() is None and self._tell(lambda: self._record_source_face(path, faces), "set-face"))
        try:
            loaded.result(FACE_LOAD_WAIT_S)
        except FutureTimeout:
            raise VcamdError(
                f"the face in {path} is still being read after {FACE_LOAD_WAIT_S:g} s",
                fix="it is used once read; check `vcamd status` in a moment",
            ) from None
        return self._ask(lambda: self._record_source_face(path, faces), "set-face")

    def set_quality(self, level: Level | None) -> dict:
        return self._ask(lambda: self._log_events([t] if (t := self.watchdog.force(level)) else []), "quality")

    def reload_config(self) -> dict:
        """Re-read the config file now. A broken file raises its ConfigError (and is reported in
        status until fixed); the running settings stay."""
        try:
            new, _ = load_config(self.config_path)
        except VcamdError as err:
            broken = err  # `err` is unbound after the except block; the loop may apply this later
            self._ask(lambda: self._file_broken(broken), "reload")
            raise
        return self._ask(lambda: self._file_valid(new), "reload")

    def request_reload(self) -> None:
        """Reload the config file at the loop's next frame, without waiting (SIGHUP)."""
        self._tell(self._reload_on_loop, "reload (SIGHUP)")

    def snapshot_png(self) -> bytes:
        frame = self.publisher.last_published
        if frame is None:
            raise VcamdError("no frame has been published yet", fix="try again in a moment")
        ok, buf = cv2.imencode(".png", frame)
        if not ok:
            raise VcamdError("could not encode the snapshot as PNG")
        return buf.tobytes()

    def latest_frame(self) -> Frame | None:
        """The frame last published (read-only: the caller must not draw on it)."""
        return self.publisher.last_published

    def recent_transitions(self) -> list[dict]:
        """The watchdog's transitions with their reasons and measured results, oldest first."""
        return self.watchdog.history()

    def set_badge(self, on: bool) -> dict:
        """Show or hide the "AI-altered" badge from the next frame on."""
        value = bool(on)
        return self._ask(
            lambda: setattr(self, "cfg", self.cfg.model_copy(update={"disclosure": self.cfg.disclosure.model_copy(update={"badge": value})})),
            "badge",
        )

    def request_quit(self) -> None:
        self._quit.set()
        self.slot.wake()

    # -- the config watcher (its thread) ----------------------------------------------------------
    def on_config_change(self, new: Config, changed: set[str]) -> None:
        """The watcher saw a valid file: applied between two frames."""
        self._tell(lambda: self._file_valid(new), "config change")

    def on_config_error(self, err: VcamdError) -> None:
        """The edited config is broken: keep running on the last good one and report why."""
        self._tell(lambda: self._file_broken(err), "config error")

    # -- commands -----------------------------------------------------------------------------------
    def _ask(self, apply: Callable[[], None], what: str) -> dict:
        """Apply on the loop and wait for it; the state after it applied. Before run() and after
        it ended (nothing else touches the state then) the change is applied at once."""
        command = _Command(apply, what)
        with self._loop_lock:
            if not self._looping:
                self._execute(command)
            else:
                self._commands.put(command)
        if not command.done.wait(COMMAND_WAIT_S):
            raise VcamdError(f"the camera loop did not apply {what} within {COMMAND_WAIT_S:g} s",
                             fix="it applies when the loop catches up; check `vcamd status`")
        if command.error is not None:
            raise command.error
        return dict(command.state)

    def _tell(self, apply: Callable[[], None], what: str) -> None:
        """Queue a change for the loop without waiting (watcher, SIGHUP, background threads)."""
        self._commands.put(_Command(apply, what))

    def _run_commands(self) -> None:
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return
            self._execute(command)

    def _execute(self, command: _Command) -> None:
        try:
            command.apply()
        except VcamdError as err:  # the user's problem: answered to whoever asked
            command.error = err
        except Exception as exc:  # a failed request must never end the stream
            self._problems["settings"] = f"could not apply {command.what}: {exc}"
            log.exception("applying %s failed; running on", command.what)
            command.error = VcamdError(self._problems["settings"])
        finally:
            self._refresh_status()
            command.state = self._status
            command.done.set()

    # -- status -------------------------------------------------------------------------------------
    def _refresh_status(self) -> None:
        source_face = self.cfg.swap.source_face
        self._status = {
            "enabled": self._enabled,
            "state": self._state,
            "camera": self.reader.state.value,
            "level": self.watchdog.level.name,
            "quality": "auto" if self.watchdog.automatic else self.watchdog.level.name,
            **self.stats.live_numbers(captured=self._captured(), dropped=self._dropped(), misses=self._misses()),
            "source_face": str(source_face) if source_face else None,
            "providers": dict(self._providers),
            "config_error": self._config_error(),
            "queue_depth": self.slot.depth,
            "gpu": self._gpu.latest(),
        }

    def _config_error(self) -> str | None:
        if self._problems:
            return "; ".join(self._problems.values())
        return self._missing_source_face()

    def _missing_source_face(self) -> str | None:
        """Derived, not stored: swapping is on but there is no face to swap in (nothing leaks —
        the faces are held/obscured — but the user must be told why their face is not swapped)."""
        if self._enabled and not self._has_source_face():
            return NO_SOURCE_FACE
        return None

    def _has_source_face(self) -> bool:
        return getattr(self.faces, "source", True) is not None

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, max_frames: int | None = None) -> dict:
        """Publish until `max_frames` frames went out or `request_quit()`; returns the stats JSON."""
        with self._loop_lock:
            self._looping = True  # from now on changes queue up for the loop (applied once it runs)
        try:
            self.reader.open_first()  # a bad source fails here, with its own message
            self._warm_up_detector()
            self.publisher.open(_source_size(self.source, self.cfg), self.source.fps)
        except BaseException:
            # Nothing started yet: release the camera (its light goes off) and the tracker's thread.
            self._end_loop()
            self.reader.stop()
            self.tracker.stop()
            self._face_loader.stop()
            raise
        try:
            self.reader.start()
            self.worker.start()
            self.full_detector.start()
            self._gpu.start()
            self.stats.reset_clock()
            self._last_frame_at = self._clock()
            self._state = "running"
            self._refresh_status()
            if not self._has_source_face():
                log.warning("%s; faces are covered (on_miss) until one is chosen", NO_SOURCE_FACE)
            interval = 1.0 / max(1.0, self.source.fps)
            while not self._quit.is_set():
                if max_frames is not None and self.stats.published >= max_frames:
                    break
                self._run_commands()
                captured = self.slot.take(timeout=interval)
                if captured is None:
                    self._maybe_offline()
                    continue
                self._last_frame_at = self._clock()
                if self._state != "running":
                    self._state = "running"
                    self._refresh_status()
                self._process(captured)
                if self.stats.published % STATUS_EVERY == 0:
                    self._refresh_status()
        finally:
            self._state = "stopped"
            self._end_loop()
            self.reader.stop()
            self.worker.stop()
            self.full_detector.stop()
            self.tracker.stop()
            self._face_loader.stop()
            self.publisher.close()
            self._refresh_status()
        return self.stats_json()

    def _end_loop(self) -> None:
        """Stop queueing: answer whatever is still queued, then apply later changes at once."""
        with self._loop_lock:
            self._looping = False
            self._run_commands()

    def stats_json(self) -> dict:
        return self.stats.to_json(
            captured=self._captured(),
            dropped=self._dropped(),
            source_fps=self.source.fps,
            transitions=self.watchdog.history(),
            queue_depth_max=self.slot.max_depth,
            providers=self._providers,
            gpu=self._gpu.stop(),
            misses=self._misses(),
        )

    def _captured(self) -> int:
        return self._captured_before + self.reader.captured + getattr(self.source, "skipped", 0)

    def _misses(self):
        return count_misses(reader=self.reader, tracker=self.tracker, full_detector=self.full_detector, swap_worker=self.worker)

    def _dropped(self) -> int:
        """Frames captured but never processed: replaced in the slot, or skipped by a file source
        that fell behind (also those of sources replaced on a camera change)."""
        return self.slot.dropped + self._skipped_before + getattr(self.source, "skipped", 0)

    def _maybe_offline(self) -> None:
        """No camera frame within one interval: publish a placeholder if the camera is gone."""
        assert self._last_frame_at is not None
        gone = self.reader.state is SourceState.offline
        stalled = self._clock() - self._last_frame_at > self.cfg.camera.stall_timeout_s
        if not (gone or stalled):
            return
        if self._state != "offline":
            log.warning("publishing the offline frame: camera %s", "lost" if gone else "stalled")
            self._state = "offline"
            self._refresh_status()
        frame = self.publisher.offline_frame()
        self._send(frame, Outcome.offline, None)

    def _process(self, captured: Captured) -> None:
        t_take = self._clock()
        self.stats.record_stage("queue", (t_take - captured.t_capture) * 1000.0)
        self.stats.processed += 1
        frame = self._fit(captured.frame)
        level = self.watchdog.level
        self._frame_index += 1
        stage_ms: dict[str, float] = {}
        if not self._enabled:
            self._send(frame, Outcome.off, captured.t_capture)
            return

        # 1. Where are the faces? (between strides of a frame-skipping rung: reuse the last positions)
        t0 = self._clock()
        if self._frame_index % rung(level).frame_stride != 0 and self._report is not None:
            report, targets, lost = self._report, self._targets, self._covered_lost
        else:
            report = self.tracker.update(frame, self._frame_index, **detect_sizes(self.cfg, level), deadline_s=self._track_deadline_s())
            targets, report = self._select(report, frame)
            # Lost faces are covered when they were faces being swapped (or already covered);
            # a bystander that face_selection leaves alone stays alone.
            lost = lost_to_cover(report.lost, report.known, self._targets + self._covered_lost)
            self._report, self._targets, self._covered_lost = report, targets, lost
            t1 = self._clock()
            stage_ms["detect"] = (t1 - t0) * 1000.0
            self.stats.record_stage("detect", stage_ms["detect"])
            # 2. Hand the face region to the swap worker (newest wins, never waits).
            if targets and report.known:
                self._submit(frame, targets, level, captured.t_capture)
                stage_ms["submit"] = (self._clock() - t1) * 1000.0
                self.stats.record_stage("submit", stage_ms["submit"])

        # 3. What each face gets: the latest swap at its current place, held, or obscured.
        t2 = self._clock()
        result, failed = self.worker.latest()
        usable = result is not None and not failed and not self.worker.stale(self._clock(), self.cfg.swap.max_result_age_s)
        swaps = match_swaps(targets, result.faces, result.swapped) if usable and result is not None else [None] * len(targets)
        composed = compose(
            Scene(frame=frame, enabled=True, on_miss=self.cfg.swap.on_miss, known=report.known, targets=targets,
                  swaps=swaps, lost=lost, held=self.publisher.held),
            self.faces.composite,
        )
        stage_ms["composite"] = (self._clock() - t2) * 1000.0
        self.stats.record_stage("composite", stage_ms["composite"])
        swapped_at = result.t_capture if result is not None and any(s is not None for s in swaps) else None
        self._send(composed.frame, composed.outcome, captured.t_capture, stage_ms, composed=composed, targets=targets, swapped_at=swapped_at)
        # The loop's own time for this frame (take → published), the base of the overhead figure.
        self.stats.record_stage("loop", (self._clock() - t_take) * 1000.0)

    def _select(self, report: FaceReport, frame: Frame) -> tuple[list[Face], FaceReport]:
        """The faces to swap. A failed selection (e.g. the recognizer behind face_selection =
        "reference") makes the positions unknown for this frame: covered, never shown raw."""
        if not report.faces:
            return [], report
        try:
            return self.faces.select(report.faces, frame), report
        except Exception as exc:
            log.error("face selection failed: %s", exc)
            return list(report.faces), FaceReport(known=False, faces=report.faces, lost=report.lost, appeared=report.appeared, full=report.full)

    def _track_deadline_s(self) -> float:
        """How long the loop waits for the tracker: TRACK_DEADLINE_FRAMES frame intervals. Long
        enough that a busy machine's slow frame is late rather than a miss; short enough that a
        hung detector costs the stream one short hiccup."""
        return TRACK_DEADLINE_FRAMES / max(1.0, self.source.fps)

    def _warm_up_detector(self) -> None:
        """Build the detector's session for every input size a level may ask for, now: building
        one mid-stream costs a few hundred ms, a visible stall."""
        for blank in _warm_up_frames(_source_size(self.source, self.cfg)):
            for size in all_detect_sizes(self.cfg):
                self.faces.detect(blank, size)

    def _fit(self, frame: Frame) -> Frame:
        """Frames must keep the size the sink was opened with (a camera may reopen at another)."""
        size = self.publisher.size
        assert size is not None
        if (frame.shape[1], frame.shape[0]) != size:
            return cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
        return frame

    def _submit(self, frame: Frame, targets: list[Face], level: Level, t_capture: float) -> None:
        if not self._has_source_face():
            if not self._no_source_logged:
                log.warning("%s; faces are covered until one is chosen", NO_SOURCE_FACE)
                self._no_source_logged = True
            return
        self._no_source_logged = False
        x0, y0, x1, y1 = region(frame, targets, SWAP_REGION_SCALE)
        crop = frame[y0:y1, x0:x1].copy()  # private copy: the loop keeps drawing on `frame`
        local = [_shift(f, x0, y0) for f in targets]
        self.worker.submit(SwapJob(crop, local, list(targets), level, t_capture))

    def _send(
        self,
        frame: Frame,
        outcome: Outcome,
        t_capture: float | None,
        stage_ms: dict | None = None,
        *,
        composed: Composed | None = None,
        targets: list[Face] | None = None,
        swapped_at: float | None = None,
    ) -> None:
        if composed is not None and composed.fresh_badge:
            # held whole frames already carry the badge; off/passthrough/offline frames are not altered
            t = self._clock()
            self.publisher.badge(frame, self.cfg.disclosure)
            if stage_ms is not None:
                stage_ms["badge"] = (self._clock() - t) * 1000.0
                self.stats.record_stage("badge", stage_ms["badge"])
        t_send = self._clock()
        self.publisher.send(frame, self._status)
        now = self._clock()
        self.stats.record_stage("publish", (now - t_send) * 1000.0)
        if composed is not None:
            if composed.all_swapped:
                self.publisher.remember_good(frame, targets or [])
            self.stats.record_faces(composed.faces, None if swapped_at is None else (now - swapped_at) * 1000.0)
        latency = None if t_capture is None else (now - t_capture) * 1000.0
        self.stats.record_publish(outcome, self.watchdog.level, latency)
        if latency is not None and outcome is not Outcome.off:
            self._log_events(self.watchdog.observe(latency, stage_ms))

    def _log_events(self, events: list[Transition | TransitionResult]) -> None:
        for event in events:
            log.info(event.log_line())

    # -- settings (the loop's thread) -------------------------------------------------------------
    def _file_broken(self, err: VcamdError) -> None:
        self._problems["file"] = str(err)
        log.error("config reload failed, keeping the running settings: %s", err)

    def _file_valid(self, file_cfg: Config) -> None:
        """A valid file: the broken-file problem is gone; apply what changed."""
        self._problems.pop("file", None)
        new = self._with_runtime_choices(file_cfg)
        if new == self.cfg and not reconfigure.needs_rebuild(self._pipeline_cfg, new):
            log.info("config file is valid; running settings unchanged")
            return
        self.apply_config(new)

    def _reload_on_loop(self) -> None:
        try:
            new, _ = load_config(self.config_path)
        except VcamdError as err:
            self._file_broken(err)
            return
        log.info("reloading the config (SIGHUP)")
        self._file_valid(new)

    def _with_runtime_choices(self, file_cfg: Config) -> Config:
        """The file's new config, with a source face chosen at run time kept unless the file's own
        source_face was edited (then the file wins)."""
        previous, self._file_cfg = self._file_cfg, file_cfg
        if file_cfg.swap.source_face != previous.swap.source_face:
            self._face_override = None
        if self._face_override is None:
            return file_cfg
        return file_cfg.model_copy(update={"swap": file_cfg.swap.model_copy(update={"source_face": self._face_override})})

    def apply_config(self, new: Config) -> None:
        """Apply a changed config between two frames (the loop's thread), key by key as
        `reconfigure.TABLE` says."""
        plan = reconfigure.plan(self.cfg, new)
        # Against what the running pipeline was built from: after a failed load, every later edit
        # tries again (and keeps reporting the error) until the models load.
        rebuild = reconfigure.needs_rebuild(self._pipeline_cfg, new)
        if not rebuild:
            self._pipeline_generation += 1  # an edit reverted while a load was in flight: drop it
            self._problems.pop("models", None)
        waiting = sorted(plan.restart)
        if rebuild and self._pipeline_factory is None:
            waiting.append("[models] and what the face engine is built with")
        if plan.live_in("camera") and self._source_factory is None:
            waiting.append("[camera]")
        self._problems.pop("restart", None)
        if waiting:
            message = f"{', '.join(waiting)}: take effect after a restart of vcamd run"
            log.warning(message)
            if rebuild and self._pipeline_factory is None or plan.live_in("camera") and self._source_factory is None:
                self._problems["restart"] = message
        if plan.live_in("camera") and self._source_factory is not None:
            self._restart_camera(new)
        if plan.live_in("watchdog"):
            old = self.watchdog
            self.watchdog = Watchdog(new.watchdog, self._clock, enhancer_enabled=old.enhancer_enabled)
            self.watchdog.transitions, self.watchdog.results = old.transitions, old.results  # keep the history
            self.watchdog._forced = old._forced  # a quality the user pinned stays pinned
        if "detection.full_every" in plan.live:
            self.tracker.full_every = new.detection.full_every
        if "swap.enabled" in plan.live:
            self._enabled = new.swap.enabled
        if "swap.source_face" in plan.live and new.swap.source_face is not None:
            self._load_source_face(new.swap.source_face)
        if plan.live_in("enhancer") and not rebuild:
            self._apply_enhancer(new)
        if "runtime.log_level" in plan.live and not self._log_level_pinned:
            logging.getLogger().setLevel(new.runtime.log_level.upper())
        if rebuild and self._pipeline_factory is not None:
            self._rebuild_pipeline(new)
        old_cfg, self.cfg = self.cfg, new
        if plan.live_in("virtual_camera") or plan.live_in("preview"):
            self._reopen_output(old_cfg)
        log.info("config applied: changed %s", ", ".join(sorted(plan.live | plan.rebuild | plan.restart)) or "nothing")

    def _rebuild_pipeline(self, new: Config) -> None:
        """Load the new models in a background thread (seconds for a real swapper) while the
        running pipeline keeps publishing; swap the new one in between two frames when ready."""
        assert self._pipeline_factory is not None
        self._pipeline_generation += 1
        generation, factory = self._pipeline_generation, self._pipeline_factory
        sizes = all_detect_sizes(new)
        frame_size = self.publisher.size or _source_size(self.source, new)

        def build() -> None:
            try:
                faces, providers = factory(new)
                for blank in _warm_up_frames(frame_size):  # build every detector input shape now, not mid-stream
                    for size in sizes:
                        faces.detect(blank, size)
            except Exception as exc:  # reported until a later edit loads; never takes the daemon down
                if not isinstance(exc, VcamdError):
                    log.exception("face pipeline rebuild failed")
                error = exc
                self._tell(lambda: self._pipeline_failed(generation, error), "models")
                return
            self._tell(lambda: self._install_pipeline(generation, faces, providers, new, new.swap.source_face), "models")

        log.info("loading the face pipeline for the new settings in the background")
        threading.Thread(target=build, name="pipeline-rebuild", daemon=True).start()

    def _pipeline_failed(self, generation: int, exc: Exception) -> None:
        if generation != self._pipeline_generation:
            return
        self._problems["models"] = f"new models not loaded, keeping the running ones: {exc}"
        log.error(self._problems["models"])

    def _install_pipeline(self, generation: int, faces: FacePipeline, providers: dict[str, str], built_from: Config, face: Path | None) -> None:
        if generation != self._pipeline_generation:
            return  # a newer edit is being loaded; this one is already out of date
        wanted = self.cfg.swap.source_face
        setter = getattr(faces, "set_source_face", None)
        if wanted is not None and wanted != face and setter is not None:
            # A face chosen while the models loaded: read it into the new pipeline first (off the loop).
            loading = self._face_loader.submit(lambda: setter(wanted))
            loading.add_done_callback(lambda f: self._tell(
                lambda: self._install_pipeline(generation, faces, providers, built_from, wanted if f.exception() is None else face), "models"))
            return
        self._pipeline_cfg = built_from
        self.faces = faces
        self.worker.faces = faces
        self.full_detector.faces = faces
        self.tracker.faces = faces
        self.tracker.reset()
        self._providers = dict(providers)
        self._problems.pop("models", None)
        # The last swap stays on screen until the new pipeline's first swap lands (no leak: compose covers).
        self.watchdog.enhancer_enabled = self.cfg.enhancer.enabled
        log.info("face pipeline replaced; providers: %s", self._providers)

    def _record_source_face(self, path: Path, loaded_into: Any) -> None:
        """The face is read: keep the running config in step with it (status shows it) and
        remember it as the user's choice over the file's. Until the first swap with the new face
        lands, the last swap stays on screen."""
        self._face_override = path
        self._problems.pop("source_face", None)
        self.cfg = self.cfg.model_copy(update={"swap": self.cfg.swap.model_copy(update={"source_face": path})})
        if loaded_into is not self.faces:  # a rebuilt pipeline was installed meanwhile
            self._load_source_face(path)

    def _load_source_face(self, path: Path) -> None:
        """Read `path` into the running pipeline on the face-loader thread; problems are reported."""
        faces = self.faces
        setter = getattr(faces, "set_source_face", None)
        if setter is None:
            return
        loading = self._face_loader.submit(lambda: setter(path))

        def loaded(f: Future) -> None:
            error = f.exception()
            if error is None:
                self._tell(lambda: self._problems.pop("source_face", None), "source face")
                if faces is not self.faces:
                    self._tell(lambda: self._load_source_face(path), "source face")
            else:
                self._tell(lambda: self._problems.__setitem__("source_face", f"[swap] source_face: {error}"), "source face")

        loading.add_done_callback(loaded)

    def _apply_enhancer(self, new: Config) -> None:
        """Enhancer on/off/strength takes effect on the next frame (the model loads on first use)."""
        setter = getattr(self.faces, "set_enhancer", None)
        self._problems.pop("enhancer", None)
        if setter is None:
            self._problems["enhancer"] = "this face engine cannot change [enhancer] at run time; restart vcamd run"
            return
        try:
            setter(new.enhancer.enabled, new.enhancer.strength)
        except VcamdError as err:
            self._problems["enhancer"] = f"[enhancer]: {err}; keeping the enhancer off"
            log.error(self._problems["enhancer"])
            setter(False, new.enhancer.strength)
            self.watchdog.enhancer_enabled = False
            return
        self.watchdog.enhancer_enabled = new.enhancer.enabled

    def _reopen_output(self, old_cfg: Config) -> None:
        """[virtual_camera]/[preview] changed: reopen the output with the new settings. If the new
        one cannot open, go back to the old settings so the output never vanishes."""
        self._problems.pop("output", None)
        problem = self.publisher.reopen()
        if problem is None:
            return
        self._problems["output"] = f"output settings: {problem}; keeping the previous output"
        log.error(self._problems["output"])
        self.cfg = self.cfg.model_copy(update={"virtual_camera": old_cfg.virtual_camera, "preview": old_cfg.preview})
        if (again := self.publisher.reopen()) is not None:
            log.error("the previous output does not open either: %s", again)

    def _restart_camera(self, new: Config) -> None:
        """Reopen the camera with the new [camera] settings; if it cannot be opened now, the
        reader keeps retrying every reopen_interval_s and the offline frame is published meanwhile."""
        assert self._source_factory is not None
        self._problems.pop("camera", None)
        try:
            source = self._source_factory(new.camera)
        except VcamdError as err:
            self._problems["camera"] = f"[camera]: {err}; keeping the current camera"
            log.error(self._problems["camera"])
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
        self.publisher.forget_good()
        log.info("camera reopened: %s", source.description)


def build_face_pipeline(cfg: Config) -> tuple[FacePipeline, Callable[[], dict[str, str]]]:
    """The real face engine for `cfg`, and a function telling which provider runs each model."""
    from vcamd.process import FaceEngine
    from vcamd.runtime import Sessions

    sessions = Sessions(list(cfg.models.providers), cfg.models.threads)
    return FaceEngine.from_config(cfg, sessions), sessions.active_providers


def _shift(face: Face, dx: float, dy: float) -> Face:
    x1, y1, x2, y2 = face.box
    kps = (face.kps - np.array([dx, dy], np.float32)).astype(np.float32)
    return Face(box=(x1 - dx, y1 - dy, x2 - dx, y2 - dy), score=face.score, kps=kps)


def _warm_up_frames(frame_size: tuple[int, int]) -> list[Frame]:
    """Blank frames with the shapes the detector will see: square tracking crops, and the camera's
    aspect for full detections (the detector keeps a frame's aspect, one session per input shape)."""
    width, height = frame_size
    return [np.zeros((64, 64, 3), np.uint8), np.zeros((max(1, height), max(1, width), 3), np.uint8)]


def _source_size(source: FrameSource, cfg: Config) -> tuple[int, int]:
    size = getattr(source, "frame_size", None)
    return size if size else (cfg.camera.width, cfg.camera.height)


def _load_badge() -> Callable[[Frame, str, str], None]:
    from vcamd.badge import draw_badge

    return draw_badge


def _load_placeholder() -> Callable[[int, int, str], Frame]:
    from vcamd.live.placeholder import offline_frame

    return offline_frame
