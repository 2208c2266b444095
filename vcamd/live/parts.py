"""The running parts of the live engine, as one record: what the loop and the settings work on.

`LiveEngine` builds a `LiveParts` and hands it to the loop's per-frame work (`frames.FrameProcessor`) and
to the settings (`settings.Settings`); neither sees the engine. Each part applies its own settings
(`configure(...)`, each with its own part of the config: the watchdog, the tracker, the frame policy,
the publisher); the settings replace
a part whole where a change needs a new one (a camera reopened, a face pipeline rebuilt) — here, so
the loop picks the new one up at its next frame. Every field is read and written on the loop's
thread only (the status snapshot is how other threads see it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vcamd.common.errors import VcamdError
from vcamd.config.schema import CameraConfig, Config
from vcamd.live.capture.reader import CameraReader, LatestFrame
from vcamd.live.capture.sources import FrameSource
from vcamd.live.loading import FacePipeline
from vcamd.live.measures.stats import LiveStats
from vcamd.live.measures.watchdog import Watchdog
from vcamd.live.output.publisher import Publisher
from vcamd.live.swapworker import SwapWorker
from vcamd.live.tracking.full import FullDetector
from vcamd.live.tracking.sizes import TrackerSettings
from vcamd.live.tracking.tracker import LiveTracker

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(eq=False)
class LiveParts:
    """The parts one frame passes through, and the switches the loop reads."""

    clock: Clock
    stats: LiveStats
    slot: LatestFrame
    source: FrameSource
    reader: CameraReader
    camera: CameraConfig
    """The [camera] settings the source was opened with (its stall timeout says when it is offline)."""
    watchdog: Watchdog
    worker: SwapWorker
    full_detector: FullDetector
    tracker: LiveTracker
    publisher: Publisher
    faces: FacePipeline | None
    """The face pipeline; None until the first one is installed (models loading at start-up)."""
    enabled: bool
    """Swapping on (the tray, `vcamd on/off`, [swap] enabled; off while consent is withdrawn)."""
    providers: dict[str, str] = field(default_factory=dict)
    """Which execution provider runs each model of the installed pipeline."""
    status: dict[str, Any] = field(default_factory=dict)
    """The engine's status snapshot (the preview sink draws from it with each frame)."""
    replaced_captured: int = 0
    """Frames captured by readers replaced on a camera change."""
    replaced_skipped: int = 0
    """Frames skipped (dropped) by sources replaced on a camera change."""

    def frame_size(self, cfg: Config) -> tuple[int, int]:
        """The size frames are published at: the output's, once open; else the camera's."""
        return self.publisher.size or self.source.frame_size or (cfg.camera.width, cfg.camera.height)

    def has_source_face(self) -> bool:
        """A source face is set — or the models are still loading (not known missing yet), or the
        swapper needs none (a DeepFaceLab model's own identity)."""
        return self.faces is None or self.faces.source is not None or not self.faces.needs_source

    def install_pipeline(self, faces: FacePipeline, providers: dict[str, str], cfg: Config) -> None:
        """Make `faces` (built from `cfg`) the running face pipeline, between two frames: every part
        that runs a model takes it, the tracker starts afresh with its detector sizes, and the
        watchdog learns whether its pixel-boost rung is a step."""
        self.faces = self.worker.faces = self.full_detector.faces = self.tracker.faces = faces
        self.tracker.reset()
        self.tracker.configure(TrackerSettings.of(cfg))
        self.watchdog.boost_enabled = faces.boosts
        self.providers = dict(providers)

    def replace_camera(self, source: FrameSource, camera: CameraConfig) -> None:
        """Read `source` from now on, through a new reader into the same slot (the old reader is
        stopped: the camera's light goes off, its counts kept); the tracked faces and the last good
        output belong to the old picture and are forgotten. A camera that cannot open yet is
        retried every reopen_interval_s (the offline frame is published meanwhile)."""
        skipped = self.source.skipped
        self.replaced_captured += self.reader.captured + skipped
        self.replaced_skipped += skipped
        self.reader.stop()
        self.source, self.camera = source, camera
        self.reader = CameraReader(source, self.slot, reopen_interval_s=camera.reopen_interval_s, clock=self.clock)
        self.tracker.reset()
        self.publisher.forget_good()
        try:
            self.reader.open_first()
        except VcamdError as err:
            log.warning("new camera not available yet (%s); retrying every %.1f s", err, camera.reopen_interval_s)
        self.reader.start()
