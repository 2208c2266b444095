"""Loading off the loop: the face pipeline (at start-up and on a `[models]`-like edit) and source photos.

Both take seconds or a good part of one (a 554 MB swapper, a photo to detect and embed), so neither
runs on the loop's thread or a control thread:

* `PipelineBuild` builds a face pipeline on a `pipeline-rebuild` thread — models loaded and the
  detector warmed up for the input shapes the best rung uses (beside the swapper's load, which
  has a thread of its own: `FaceEngine.from_config`) — then hands the result (or the error) to the
  loop through `tell`. The lower rungs' shapes are built once the first swap has landed
  (`warm_rest_after_first_swap`): before it they would hold up the install and then share the
  two cores with the first swap, which is what a start waits for. Each build has a generation
  number; only the newest one asked for may be installed, so an edit reverted while its models
  load is simply dropped. The same path
  serves the first load at start-up and every later rebuild: one mechanism.
* `FaceLoader` reads and embeds source photos one at a time on the `face-loader` thread.

`Int8Upgrade` (each int8 copy built in the background, then switched to) lives in `vcamd.live.int8upgrade`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from vcamd.common.errors import VcamdError
from vcamd.common.newest import NewestSlot
from vcamd.common.quality import BEST, Level
from vcamd.common.types import Face, Frame
from vcamd.config.schema import Config
from vcamd.faces.following import Selecting
from vcamd.faces.footprint import PasteRegion
from vcamd.faces.identity import SourceIdentity
from vcamd.faces.results import StageTimer, SwappedFace
from vcamd.live.tracking.sizes import TrackerSettings, all_detect_sizes, detect_sizes
from vcamd.models.pipeline import build_face_engine

log = logging.getLogger(__name__)


class FacePipeline(Selecting, Protocol):
    """What the live engine needs from the face engine (`vcamd.faces.engine.FaceEngine`); `select`,
    its selection rule and its recogniser are `FollowedFace`'s (`Selecting`)."""

    def detect(self, frame: Frame, input_size: int | None = None, threshold: float | None = None) -> list[Face]: ...

    def swap_faces(self, frame: Frame, faces: list[Face], level: Level = ..., timer: StageTimer | None = ...) -> list[SwappedFace]: ...

    def composite(self, frame: Frame, swapped: SwappedFace, face: Face) -> PasteRegion | None: ...

    @property
    def source(self) -> SourceIdentity | None:
        """The face swapped in, or None while none is set."""
        ...

    def set_source_face(self, path: Path | str) -> SourceIdentity:
        """Read and embed the face in this photo and swap it in from now on (FaceError on a bad photo)."""
        ...

    def set_enhancer(self, enabled: bool, strength: float, weight: float | None = None) -> None:
        """Switch the enhancer on/off or change its strength and fidelity weight (VcamdError when it cannot load)."""
        ...

    @property
    def needs_source(self) -> bool:
        """False for a swapper with its own trained identity (a DeepFaceLab model): no photo needed."""
        ...

    @property
    def boosts(self) -> bool:
        """Faces are swapped above the swapper's own size on the rungs with pixel boost."""
        ...

    def precision_status(self) -> tuple[dict[str, str], dict[str, str]]:
        """What each model runs at ("float" or "int8"), and why where it is not what was asked."""
        ...

    @property
    def remote(self) -> ServerSessions | None:
        """The Triton server's sessions when the models run there (`[models] server`); None: here."""
        ...


class ServerSessions(Protocol):
    """What the status shows of the server the models run on (`vcamd.remote.sessions.RemoteSessions`)."""

    def server_status(self) -> dict[str, Any]: ...


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
    from vcamd.inference.runtime import Sessions

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


WarmPart = Literal["first", "rest", "all"]
"""Which of the detector's warm-up shapes (`warm_up_pairs`)."""

REST_WARM_UP_CAP_S = 5.0
"""The longest the lower rungs' detector shapes wait for the first swap (`warm_rest_after_first_swap`):
with no face in view nothing is swapped, and they are built anyway."""


def warm_up_pairs(cfg: Config, frame_size: tuple[int, int], part: WarmPart = "all") -> list[tuple[Frame, int]]:
    """The (blank frame, input size) pairs whose detector sessions a warm-up builds. "first": what
    the best rung runs — the camera frame at its full-detection size, a square crop at its tracking
    size; "rest": every other pair of every level's sizes on both blanks (the lower rungs'); "all": both."""
    settings = TrackerSettings.of(cfg)
    square, camera = warm_up_frames(frame_size)
    best = detect_sizes(settings, BEST)
    first = [(camera, best["full_size"]), (square, best["track_size"])]
    if part == "first":
        return first
    rest = [(blank, size) for blank in (square, camera) for size in all_detect_sizes(settings)
            if not any(blank is b and size == s for b, s in first)]
    return rest if part == "rest" else first + rest


def warm_up_detector(faces: Detects, cfg: Config, frame_size: tuple[int, int], part: WarmPart = "all") -> None:
    """Build the detector's sessions for the input shapes of `part` (`warm_up_pairs`), now: building one
    mid-stream costs a few hundred ms, a visible stall."""
    for blank, size in warm_up_pairs(cfg, frame_size, part):
        faces.detect(blank, size)


def prime_colour_tables() -> None:
    """Have OpenCV build its BGR→LAB tables, which it does at a process's first such conversion
    (55–110 ms here). The face engine's colour-matching blender converts once when it is built —
    after the swapper's load, on the way to the first swap; done in the warm-up beside that load,
    the start does not wait for it."""
    import cv2

    cv2.cvtColor(np.zeros((1, 1, 3), np.uint8), cv2.COLOR_BGR2LAB)


def warm_rest_after_first_swap(results: NewestSlot[Any], warm_rest: Callable[[], None], *, current: Callable[[], bool],
                               cap_s: float | None = REST_WARM_UP_CAP_S, shown: threading.Event | None = None) -> threading.Thread:
    """`warm_rest` (the lower rungs' detector shapes) on a `detector-warm-up` thread once `results` has a newer result and `shown`
    (`startframes.Startup.shown`) is set, each wait ≤ `cap_s`; not when no longer `current` (a failure: left to the detections)."""
    seen = results.latest()[1]

    def run() -> None:
        results.wait_newer(seen, cap_s)
        if shown is not None:
            shown.wait(cap_s)
        if not current():
            return
        try:
            warm_rest()
        except Exception as exc:
            log.debug("the detector's lower-rung shapes were not built ahead (%s); they are built when first used", exc)

    thread = threading.Thread(target=run, name="detector-warm-up", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class Loaded:
    """A face pipeline built and warmed up, waiting to be installed by the loop."""

    generation: int
    faces: FacePipeline
    providers: dict[str, str]
    built_from: Config
    warm_rest: Callable[[], None] = lambda: None
    """Builds the detector's shapes the warm-up left for later (`warm_up_pairs`' "rest")."""

    def warm_rest_after_first_swap(self, results: NewestSlot[Any], *, current: Callable[[], bool],
                                   shown: threading.Event | None = None) -> threading.Thread:
        """`warm_rest` once the first swap landed and was shown (`warm_rest_after_first_swap`), for the loop that installed it."""
        return warm_rest_after_first_swap(results, self.warm_rest, current=current, shown=shown)


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
                warm_up_detector(detector, cfg, frame_size, "first")
                warmed.append(detector)
                prime_colour_tables()  # beside the swapper's load, not after it

            try:
                faces, providers = factory(cfg, warm_up)
                if not warmed:
                    warm_up(faces)
                detector = warmed[0]
            except Exception as exc:  # handed to the loop: reported, never takes the daemon down by itself
                if not isinstance(exc, VcamdError):
                    log.exception("face pipeline build failed")
                error = exc
                tell(lambda: failed(generation, error), "models")
                return
            rest = lambda: warm_up_detector(detector, cfg, frame_size, "rest")  # noqa: E731
            tell(lambda: loaded(Loaded(generation, faces, dict(providers), cfg, rest)), "models")

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
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="face-loader", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
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
