"""The live engine: camera in, swapped frames out at the camera's cadence, whatever the model costs.

`LiveEngine` builds the running parts (`parts.LiveParts`: one record the loop's `frames.FrameProcessor`
and the `settings.Settings` take), runs the loop and is the control surface. The rooms, in the
order a frame passes them: `capture/` (camera, reader, newest-frame slot), `tracking/` (where the
faces are, which were lost, what changed unseen), `swapworker` (the swap model), `output/`
(`compose`, the privacy rule; `obscure`; `publisher`: badge, sink, the frames kept), `measures/`
(stats, the watchdog). Around them: `reconfigure` (how each config key takes effect, and which part
applies it), `settings` (applying a config change, the one owner of `config_error`), `loading`
(models and photos loaded off the loop), `commands` (the loop's command queue), `engine_status` (the
status snapshot and the stats JSON), `vcamd.common.newest` (the newest-wins hand-offs).

Threads:
* **camera-reader** (`capture.reader.CameraReader`) writes the newest frame into a one-frame slot;
* **the loop** (`LiveEngine.run`, on the caller's thread) applies queued commands, takes the newest
  frame, asks the tracker where the faces are, hands the face region to the swap worker without
  waiting, composes (swapped / held / obscured per face), badges and publishes — one output frame
  per camera frame;
* **face-tracker** (`newest.BoundedCall`) runs the crop re-detection; the loop waits for it at most
  two frame intervals;
* **full-detector** and **swap-worker** (`newest.NewestWorker`) work on the newest job handed in;
* **face-loader** embeds a new source photo (set-face, tray, a config edit) off the control
  threads and off the loop;
* **pipeline-rebuild** (only while models load: at start-up, when the engine starts without a
  pipeline, and after a `[models]`-like edit) builds the face pipeline, with the swapper's session
  on **swapper-load** beside it (`FaceEngine.from_config`);
* **gpu-sampler** (only with an NVIDIA GPU) polls utilisation once a second.

Every change from the control socket, the tray, the config watcher and SIGHUP is a command the loop
applies between two frames; callers that wait get the state after it applied. Started without a
face pipeline, the engine publishes at once — every frame obscured — and installs the pipeline when
it has loaded. Started without what swapping needs (the model files, consent, a source face:
`readiness`), it runs with swapping off, says what is missing, and loads the models once their
files are there; `on` is refused with the list until then. `status()` is a
snapshot the loop refreshes (every few frames and after each command), so asking costs the loop
nothing. Engine states: starting → running ⇄ offline → stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import cv2

from vcamd.common.errors import VcamdError
from vcamd.common.quality import Level
from vcamd.common.types import Captured, Frame, Outcome
from vcamd.config.reading import load_config
from vcamd.config.schema import CameraConfig, Config
from vcamd.files.photo_lane import PhotoLane
from vcamd.live.capture.reader import CameraReader, LatestFrame, SourceState
from vcamd.live.capture.sources import FrameSource
from vcamd.live.commandqueue import CommandQueue
from vcamd.live.engine_settings import Settings
from vcamd.live.engine_status import EngineStatus
from vcamd.live.frames import FrameProcessor, log_events
from vcamd.live.loading import FacePipeline, PipelineFactory, warm_up_detector
from vcamd.live.measures.stats import GpuSampler, LiveStats
from vcamd.live.measures.watchdog import Watchdog
from vcamd.live.output.publisher import Publisher, PublisherSettings
from vcamd.live.parts import LiveParts
from vcamd.live.process import ProcessSettings
from vcamd.live.readiness import ModelFilesSeen, log_needs
from vcamd.live.swapworker import SwapWorker
from vcamd.live.tracking.full import FullDetector
from vcamd.live.tracking.sizes import TrackerSettings
from vcamd.live.tracking.tracker import LiveTracker
from vcamd.sinks.base import Sink

log = logging.getLogger(__name__)

Clock = Callable[[], float]

FIRST_FRAME_GRACE_S = 5.0
"""A camera may take seconds to deliver its first frame (USB set-up, auto exposure): until then the
placeholder published after the stall timeout says it is starting, and the state stays
"starting"; a camera silent longer than this from the start is offline."""

STATUS_EVERY = 10
"""The loop refreshes the status snapshot every this many frames (and after every command)."""

FACE_LOAD_WAIT_S = 8.0
"""How long set-face waits for the photo to be read and embedded."""


class LiveEngine:
    """Runs the live pipeline; also the `Controllable` the control socket and tray drive."""

    def __init__(
        self,
        cfg: Config,
        *,
        source: FrameSource,
        sink_factory: Callable[[int, int, float], Sink],
        faces: FacePipeline | None,
        config_path: Path | None = None,
        providers: dict[str, str] | None = None,
        badge: Callable[[Frame, str, str], object] | None = None,
        placeholder: Callable[[int, int, str], Frame] | None = None,
        source_factory: Callable[[CameraConfig], FrameSource] | None = None,
        pipeline_factory: PipelineFactory | None = None,
        file_cfg: Config | None = None,
        log_level_pinned: bool = False,
        clock: Clock = time.monotonic,
        started_at: float | None = None,
        consent_given: bool | None = None,
        look_at_models: Callable[[Config], ModelFilesSeen] | None = None,
    ) -> None:
        """`faces=None` starts with no face pipeline: `run()` opens the camera and the output first
        and loads it with `pipeline_factory` in the background, covering every frame meanwhile.
        `source_factory` rebuilds the source when a config reload changes [camera];
        `pipeline_factory` rebuilds the face pipeline (and says which provider runs each model)
        when a reload changes a key marked "rebuild" in `reconfigure.TABLE`. Without them such
        changes wait for a restart. `file_cfg` is the config as the file says it, when `cfg`
        carries command-line overrides (`--face`); `log_level_pinned` (`-v`) keeps the log level
        whatever [runtime] log_level says. `started_at` (on `clock`): when the process started,
        the zero of the stats' `startup_ms` (default: now). `consent_given`: consent at start
        (`--i-have-consent`; default: [swap] source_consent). `look_at_models`
        (`readiness.look_at_model_files`): whether the model files are there, so the engine starts
        without them (swapping off) and loads them once they arrive; None: they are taken to be.
        Whatever swapping needs and lacks at start keeps it off (`Settings.swap_needs`)."""
        if faces is None and pipeline_factory is None:
            raise ValueError("LiveEngine needs a face pipeline or a pipeline_factory to load one")
        self.clock = clock
        stats = LiveStats(clock)
        slot = LatestFrame()
        # `faces` is None until the first pipeline is installed (`Settings`), which hands it to the
        # detector, the worker and the tracker before any job reaches them.
        full_detector = FullDetector(faces, stats, clock)  # type: ignore[arg-type]
        self.parts = LiveParts(
            clock=clock, stats=stats, slot=slot, source=source,
            reader=CameraReader(source, slot, reopen_interval_s=cfg.camera.reopen_interval_s, clock=clock),
            camera=cfg.camera,
            watchdog=Watchdog(cfg.watchdog, clock, enhancer_enabled=cfg.enhancer.enabled),
            # None until installed, as above.
            worker=SwapWorker(faces, stats, clock),  # type: ignore[arg-type]
            full_detector=full_detector,
            # None until installed, as above.
            tracker=LiveTracker(faces, full_detector, full_every=cfg.detection.full_every),  # type: ignore[arg-type]
            publisher=Publisher(sink_factory, badge=badge or _load_badge(), placeholder=placeholder or _load_placeholder(), clock=clock),
            faces=faces,  # None until the first pipeline is installed
            enabled=cfg.swap.enabled,
            providers=dict(providers or {}),
        )
        self.parts.tracker.configure(TrackerSettings.of(cfg))
        self.parts.publisher.configure(PublisherSettings.of(cfg))
        self.frames = FrameProcessor(self.parts, cfg, clock() if started_at is None else started_at)
        # -- control plane
        self._commands = CommandQueue(self._refresh_status, lambda message: self.settings.problems.report("settings", message))
        self._ask, self._tell = self._commands.ask, self._commands.tell
        self._quit = threading.Event()
        self.photo_lane = PhotoLane()  # every surface's set-face: one photo decoded at a time
        self.settings = Settings(self.parts, self.frames, cfg, tell=self._tell, file_cfg=file_cfg or cfg, config_path=config_path,
                                 source_factory=source_factory, pipeline_factory=pipeline_factory,
                                 log_level_pinned=log_level_pinned, on_first_pipeline=self._first_pipeline,
                                 consent_given=cfg.swap.source_consent if consent_given is None else consent_given,
                                 look_at_models=look_at_models)
        self._look_at_models = look_at_models
        self._gpu = GpuSampler()
        self._status = EngineStatus(self.parts, self.settings, self.frames, self._gpu)
        self.settings.start_swapping_off_if_not_ready()
        # -- state the loop owns (read by other threads only through the status snapshot)
        self._state = "starting"
        self._opened = False  # the camera and the output (open() or run())
        self._process = ProcessSettings()  # OpenCV's threads, the collector: applied by open(), restored at the end; the allocator's setting stays
        self._last_frame_at: float | None = None
        self._refresh_status()

    @property
    def cfg(self) -> Config:
        """The config the engine runs on (`Settings` keeps it)."""
        return self.settings.cfg

    @property
    def config_path(self) -> Path | None:
        return self.settings.config_path

    def _first_pipeline(self) -> None:
        """The first face pipeline was installed (`Settings`): say so, and what swapping still needs."""
        log.info("face models ready %.0f ms after start", (self.clock() - self.frames.startup.started_at) * 1000.0)
        log_needs(self.settings.swap_needs())

    def apply_config(self, new: Config) -> None:
        """Apply a changed config now (the loop's thread, or before/after run()): `Settings.apply`."""
        self.settings.apply(new)

    @property
    def sink(self) -> Sink | None:
        return self.parts.publisher.sink

    # -- Controllable -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The snapshot the loop refreshed last (every few frames and after each command)."""
        return dict(self.parts.status)

    def set_enabled(self, on: bool) -> dict[str, Any]:
        """Swapping on or off; on is refused with what swapping still needs (`SwapNotReady`)."""
        value = bool(on)
        seen = self._look_for_models() if value else None
        return self._ask(lambda: self._switch(value, seen), "on" if value else "off")

    def toggle(self) -> dict[str, Any]:
        """Swap on if off, off if on — decided by the loop, so two toggles never race."""
        seen = self._look_for_models()
        return self._ask(lambda: self._switch(not self.parts.enabled, seen), "toggle")

    def _look_for_models(self) -> ModelFilesSeen | None:
        """On the caller's thread (never the loop's: it touches the disk): the model files as they
        are now, so an `on` right after `vcamd models pull` finds them."""
        return self._look_at_models(self.cfg) if self._look_at_models is not None and self.parts.faces is None else None

    def _switch(self, on: bool, seen: ModelFilesSeen | None) -> None:
        if seen is not None:
            self.settings.models_seen(seen)
        self.settings.switch_swapping(on)

    def set_source_face(self, path: Path) -> dict[str, Any]:
        """Read and embed the photo (face-loader thread), then make it the source face (loop).
        Raises FaceError on a bad image, before anything changes; returns the state after."""
        path, faces = Path(path), self.parts.faces
        self.settings.consent.require()  # withdrawn: refused before the photo is even read
        self.photo_lane.enter()  # PhotoLaneBusy when another surface's photo is being read
        try:
            loaded = self.settings.read_source_face(path)  # if the wait below gives up, it is still recorded once read
        except BaseException:
            self.photo_lane.leave()
            raise
        loaded.add_done_callback(lambda _: self.photo_lane.leave())  # when the read ends, not when a wait gives up
        try:
            loaded.result(FACE_LOAD_WAIT_S)
        except FutureTimeout:
            raise VcamdError(
                f"the face in {path} is still being read after {FACE_LOAD_WAIT_S:g} s",
                fix="it is used once read; check `vcamd status` in a moment",
            ) from None
        # The state after: its "source_face_pick" says which face of a group photo was taken.
        return self._ask(lambda: self.settings.record_source_face(path, faces), "set-face")

    def set_quality(self, level: Level | None) -> dict[str, Any]:
        return self._ask(lambda: log_events([t] if (t := self.parts.watchdog.force(level)) else []), "quality")

    def reload_config(self) -> dict[str, Any]:
        """Re-read the config file now. A broken file raises its ConfigError (and is reported in
        status until fixed); the running settings stay."""
        try:
            new, _ = load_config(self.config_path)
        except VcamdError as err:
            broken = err  # `err` is unbound after the except block; the loop may apply this later
            self._ask(lambda: self.settings.file_broken(broken), "reload")
            raise
        return self._ask(lambda: self.settings.file_valid(new), "reload")

    def request_reload(self) -> None:
        """Reload the config file at the loop's next frame, without waiting (SIGHUP)."""
        self._tell(self.settings.reload_file, "reload (SIGHUP)")

    def snapshot_png(self) -> bytes:
        frame = self.parts.publisher.last_published
        if frame is None:
            raise VcamdError("no frame has been published yet", fix="try again in a moment")
        ok, buf = cv2.imencode(".png", frame)
        if not ok:
            raise VcamdError("could not encode the snapshot as PNG")
        return buf.tobytes()

    def latest_frame(self) -> Frame | None:
        """The frame last published (read-only: the caller must not draw on it)."""
        return self.parts.publisher.last_published

    def recent_transitions(self) -> list[dict[str, Any]]:
        """The watchdog's transitions with their reasons and measured results, oldest first."""
        return self.parts.watchdog.history()

    def set_badge(self, on: bool) -> dict[str, Any]:
        """Show or hide the "AI-altered" badge from the next frame on."""
        value = bool(on)
        return self._ask(lambda: self.settings.set_badge(value), "badge")

    def set_model(self, role: str, name: str) -> dict[str, Any]:
        """Switch the swapper or the enhancer to the manifest's model `name` (`Settings.set_model`):
        it loads in the background, the running one swapping meanwhile. Returns the state after."""
        return self._ask(lambda: self.settings.set_model(str(role), str(name)), "model")

    def request_quit(self) -> None:
        self._quit.set()
        self.parts.slot.wake()

    # -- the config watcher (its thread) ----------------------------------------------------------
    def on_config_change(self, new: Config) -> None:
        """The watcher saw a valid file: applied between two frames."""
        self._tell(lambda: self.settings.file_valid(new), "config change")

    def on_config_error(self, err: VcamdError) -> None:
        """The edited config is broken: keep running on the last good one and report why."""
        self._tell(lambda: self.settings.file_broken(err), "config error")

    def on_config_note(self, message: str) -> None:
        """The applied edit removed settings (sections back at their defaults): shown until the next edit."""
        self._tell(lambda: self.settings.file_note(message), "config note")

    # -- status (`engine_status.EngineStatus`) -------------------------------------------------------
    def _refresh_status(self) -> dict[str, Any]:
        return self._status.refresh(self._state)

    # -- the loop -----------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the camera and the output, publish the "starting" card at once, and (started without
        a face pipeline) start loading the models in the background. For a caller with more to do
        before `run()` (`vcamd run`: its control page, socket and config watcher): the output shows
        something meanwhile. `run()` opens by itself when this was not called, without the card
        (its loop's first frame follows at once). Raises what the camera or the output raise, with
        everything released; after it, `run()` or `close()`."""
        if self._opened:
            return
        self._open(load=False)
        self.frames.send(self.parts.publisher.starting_frame(), Outcome.starting, None)  # before the loading thread competes
        self._start_loading()

    def close(self) -> None:
        """Release what `open()` opened when `run()` will not run (the caller failed before it)."""
        if self._opened and self._state != "stopped":
            self._shut_down()

    def _open(self, *, load: bool = True) -> None:
        if self._opened:
            return
        self._process.apply()
        self._commands.start_looping()
        try:
            self.parts.reader.open_first()  # a bad source fails here, with its own message
            if self.parts.faces is not None:
                warm_up_detector(self.parts.faces, self.cfg, self.parts.frame_size(self.cfg))
            self.parts.publisher.open(self.parts.frame_size(self.cfg), self.parts.source.fps)
        except BaseException:
            # Nothing started yet: release the camera (its light goes off) and the tracker's thread.
            self._commands.stop_looping()
            self.parts.reader.stop()
            self.parts.tracker.stop()
            self.settings.stop()
            self._process.restore()
            raise
        self._opened = True
        if load:
            self._start_loading()

    def _start_loading(self) -> None:
        if self.parts.faces is None:
            # The camera and the output are open: frames go out (covered while swapping is on)
            # while the models load — or, without their files, while they are waited for.
            self.settings.load_pipeline(self.cfg)
        else:  # a pipeline built by the caller: its swapper's int8 copy, when it wants one, as for one loaded here
            self.settings.int8.start(self.parts.faces, self.cfg)

    def _shut_down(self) -> None:
        self._state = "stopped"
        self._commands.stop_looping()
        self.parts.reader.stop()
        self.parts.worker.stop()
        self.parts.full_detector.stop()
        self.parts.tracker.stop()
        self.settings.stop()
        self.parts.publisher.close()
        self._process.restore()
        self._refresh_status()

    def run(self, max_frames: int | None = None) -> dict[str, Any]:
        """Publish until `max_frames` frames went out or `request_quit()`; returns the stats JSON."""
        self._open()
        try:
            self.parts.reader.start()
            self.parts.worker.start()
            self.parts.full_detector.start()
            self._gpu.start()
            self._process.freeze_heap()
            self.parts.stats.reset_clock()
            self._last_frame_at = self.clock()  # "starting" until the camera's first frame
            self._refresh_status()
            interval = 1.0 / max(1.0, self.parts.source.fps)
            while not self._quit.is_set():
                if max_frames is not None and self.parts.stats.published >= max_frames:
                    break
                self._commands.run_pending()
                # At the start, a covered frame is processed again once what it waited on is here (`startframes`).
                captured, fresh = self.frames.start.take(self.parts.slot, interval, self.clock, self._between_frames)
                if captured is None:
                    self._maybe_offline()
                    continue
                if fresh:
                    self._last_frame_at = self.clock()
                if self._state != "running":
                    self._state = "running"
                    self._refresh_status()
                self.frames.process(captured, again=not fresh)
                if self.parts.stats.published % STATUS_EVERY == 0:
                    self._refresh_status()
        finally:
            self._shut_down()
        return self.stats_json()

    def _between_frames(self) -> Captured | None:
        """Between two camera frames: the commands applied, then the start's kept frame if its wait is over."""
        self._commands.run_pending()
        return self.frames.start.again(self.parts)

    def stats_json(self) -> dict[str, Any]:
        return self._status.stats_json()

    def _maybe_offline(self) -> None:
        """No camera frame within one interval: publish a placeholder if the camera is gone or
        stalled — before its first frame, the "starting" card, up to FIRST_FRAME_GRACE_S (a camera
        that has not started yet is not offline)."""
        assert self._last_frame_at is not None
        gone = self.parts.reader.state is SourceState.offline
        waited = self.clock() - self._last_frame_at
        if not (gone or waited > self.parts.camera.stall_timeout_s):
            return
        if self._state == "starting" and not gone and waited <= FIRST_FRAME_GRACE_S:
            self.frames.send(self.parts.publisher.starting_frame(), Outcome.starting, None)
            return
        if self._state != "offline":
            log.warning("publishing the offline frame: camera %s", "lost" if gone else "stalled")
            self._state = "offline"
            self._refresh_status()
        self.frames.send(self.parts.publisher.offline_frame(), Outcome.offline, None)


def _load_badge() -> Callable[[Frame, str, str], object]:
    from vcamd.privacy.badge import draw_badge

    return draw_badge


def _load_placeholder() -> Callable[[int, int, str], Frame]:
    from vcamd.live.output.placeholder import offline_frame

    return offline_frame
