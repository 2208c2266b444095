"""Loading off the loop: the face pipeline (at start-up and on a `[models]`-like edit) and source photos.

Both take seconds or a good part of one (a 554 MB swapper, a photo to detect and embed), so neither
runs on the loop's thread or a control thread:

* `PipelineBuild` builds a face pipeline on a `pipeline-rebuild` thread — models loaded and the
  detector warmed up for every input shape the stream will use (beside the swapper's load, which
  has a thread of its own: `FaceEngine.from_config`) — then hands the result (or the error) to the
  loop through `tell`. Each build has a generation number; only the newest one asked
  for may be installed, so an edit reverted while its models load is simply dropped. The same path
  serves the first load at start-up and every later rebuild: one mechanism.
* `FaceLoader` reads and embeds source photos one at a time on the `face-loader` thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from vcamd.config import Config
from vcamd.errors import VcamdError
from vcamd.faces.engine import StageTimer
from vcamd.faces.identity import SourceIdentity
from vcamd.live.tracking.sizes import all_detect_sizes
from vcamd.pipeline import build_face_engine
from vcamd.quality import Level
from vcamd.types import Face, Frame

log = logging.getLogger(__name__)


class FacePipeline(Protocol):
    """What the live engine needs from the face engine (`vcamd.faces.engine.FaceEngine`)."""

    def detect(self, frame: Frame, input_size: int | None = None, threshold: float | None = None) -> list[Face]: ...

    def select(self, faces: list[Face], frame: Frame) -> list[Face]: ...

    def swap_faces(self, frame: Frame, faces: list[Face], level: Level = ..., timer: StageTimer | None = ...) -> list[Any]: ...

    def composite(self, frame: Frame, swapped: Any, face: Face) -> None: ...

    @property
    def source(self) -> SourceIdentity | None:
        """The face swapped in, or None while none is set."""
        ...

    def set_source_face(self, path: Path | str) -> SourceIdentity:
        """Read and embed the face in this photo and swap it in from now on (FaceError on a bad photo)."""
        ...

    def set_enhancer(self, enabled: bool, strength: float) -> None:
        """Switch the enhancer on/off or change its strength (VcamdError when it cannot load)."""
        ...

    @property
    def boosts(self) -> bool:
        """Faces are swapped above the swapper's own size on the rungs with pixel boost."""
        ...


class Detects(Protocol):
    """What a warm-up needs: the face pipeline, or its detector alone (`FaceDetector`)."""

    def detect(self, frame: Frame, input_size: int | None = None) -> list[Face]: ...


WarmUp = Callable[[Detects], None]
"""Builds a detector's sessions for every input shape the stream will use (`warm_up_detector`
for one config and frame size)."""

PipelineFactory = Callable[[Config, WarmUp], tuple[FacePipeline, dict[str, str]]]
"""Builds the face pipeline for a config, and says which provider runs each of its models. It may
call `warm_up` with its detector while the other models load (the real one does: beside the
swapper); when it does not, the pipeline is warmed up once built."""

Tell = Callable[[Callable[[], None], str], None]
"""Queues a change for the loop without waiting (`LiveEngine._tell`)."""


def build_face_pipeline(cfg: Config, warm_up: WarmUp | None = None) -> tuple[FacePipeline, Callable[[], dict[str, str]]]:
    """The real face engine for `cfg` (`warm_up` runs beside the swapper's load), and a function
    telling which provider runs each model."""
    from vcamd.runtime import Sessions

    sessions = Sessions(list(cfg.models.providers), cfg.models.threads)
    faces = build_face_engine(cfg, sessions, warm_up=warm_up)
    return faces, (faces.remote or sessions).active_providers  # with a server, its models too


def load_face_pipeline(cfg: Config, warm_up: WarmUp | None = None) -> tuple[FacePipeline, dict[str, str]]:
    """`build_face_pipeline` as a `PipelineFactory` (the providers read once it is built)."""
    faces, providers = build_face_pipeline(cfg, warm_up)
    return faces, providers()


def warm_up_frames(frame_size: tuple[int, int]) -> list[Frame]:
    """Blank frames with the shapes the detector will see: square tracking crops, and the camera's
    aspect for full detections (the detector keeps a frame's aspect, one session per input shape)."""
    width, height = frame_size
    return [np.zeros((64, 64, 3), np.uint8), np.zeros((max(1, height), max(1, width), 3), np.uint8)]


def warm_up_detector(faces: Detects, cfg: Config, frame_size: tuple[int, int]) -> None:
    """Build the detector's session for every input size a level may ask for, now: building one
    mid-stream costs a few hundred ms, a visible stall."""
    for blank in warm_up_frames(frame_size):
        for size in all_detect_sizes(cfg):
            faces.detect(blank, size)


@dataclass(frozen=True)
class Loaded:
    """A face pipeline built and warmed up, waiting to be installed by the loop."""

    generation: int
    faces: FacePipeline
    providers: dict[str, str]
    built_from: Config


class PipelineBuild:
    """Builds face pipelines on a `pipeline-rebuild` thread; the newest one asked for wins."""

    def __init__(self, factory: PipelineFactory, tell: Tell) -> None:
        self._factory = factory
        self._tell = tell
        self.generation = 0  # the newest build asked for; older ones are discarded when they land

    def start(
        self,
        cfg: Config,
        frame_size: tuple[int, int],
        *,
        loaded: Callable[[Loaded], None],
        failed: Callable[[int, Exception], None],
    ) -> None:
        """Build for `cfg` in the background; `loaded` or `failed` then runs on the loop's thread."""
        self.generation += 1
        generation, factory, tell = self.generation, self._factory, self._tell

        def build() -> None:
            warmed: list[Detects] = []

            def warm_up(detector: Detects) -> None:
                warm_up_detector(detector, cfg, frame_size)
                warmed.append(detector)

            try:
                faces, providers = factory(cfg, warm_up)
                if not warmed:
                    warm_up(faces)
            except Exception as exc:  # handed to the loop: reported, never takes the daemon down by itself
                if not isinstance(exc, VcamdError):
                    log.exception("face pipeline build failed")
                error = exc
                tell(lambda: failed(generation, error), "models")
                return
            tell(lambda: loaded(Loaded(generation, faces, dict(providers), cfg)), "models")

        threading.Thread(target=build, name="pipeline-rebuild", daemon=True).start()

    def cancel(self) -> None:
        """Whatever is loading now is out of date (e.g. the edit that asked for it was reverted)."""
        self.generation += 1

    def is_current(self, generation: int) -> bool:
        return generation == self.generation


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
