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
* `Int8Upgrade` builds the int8 copies an installed pipeline wants (the swapper's, the enhancer's, the
  parser's: `vcamd.inference.precision`), on an `int8-build` thread: it waits for calibration faces (the source
  photo, faces the camera shows), builds and checks each copy in turn in a child process at a lower
  priority (`python -m vcamd.models.quantize`), loads the copy's session, and hands it to the loop, which
  switches that model over between two frames. The float model serves all along; nothing is reset, so
  the faces on screen stay swapped (or held) across the switch. A copy that fails the check leaves the
  float model, and the reason in status.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import sys
import tempfile
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
from vcamd.inference.fidelity import Verdict
from vcamd.inference.precision import Choice
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


@dataclass(frozen=True)
class Int8Request:
    """What `Int8Upgrade` builds: the model file and its role, the recogniser that checks it, the
    calibration faces, and the settings the copy is built for."""

    model: Path
    recognizer: Path
    faces: Any  # vcamd.faces.calibration.CalibrationFaces
    providers: list[str]
    threads: int
    reduce_range: bool
    role: str = "swapper"


@dataclass(frozen=True)
class Int8Built:
    """A build's verdict, and the checked copy when it passed."""

    verdict: Verdict
    copy: Path | None


Int8Builder = Callable[[Int8Request, threading.Event], Int8Built]
"""Builds and checks a copy (the real one: `build_in_child`); returns early, with whatever it has,
once the event is set (the daemon stops)."""


def build_in_child(request: Int8Request, stop: threading.Event) -> Int8Built:
    """`python -m vcamd.models.quantize` in a child process at a lower priority: the quantiser's gigabytes
    are returned when it exits, and the live loop and swap outrank its minute of CPU. Killed when
    `stop` is set. Raises VcamdError when it fails."""
    from vcamd.models.quantize import Job

    with tempfile.TemporaryDirectory(prefix="vcamd-int8-job-") as tmp:
        Job(request.model, request.recognizer, request.providers, request.threads, request.reduce_range, request.role).write(Path(tmp), request.faces)
        child = subprocess.Popen([sys.executable, "-m", "vcamd.models.quantize", tmp], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        threading.Thread(target=_kill_on_stop, args=(child, stop), name="int8-build-stop", daemon=True).start()
        out, err = child.communicate()
    if stop.is_set():
        raise VcamdError("the int8 build was stopped")
    lines = out.strip().splitlines()
    if child.returncode != 0 or not lines:
        last = (err.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
        raise VcamdError(f"the int8 copy of {request.model.name} could not be built: {last}",
                         fix="`vcamd models quantize` builds it by hand and shows why; the float model serves")
    result = json.loads(lines[-1])
    return Int8Built(Verdict(bool(result["passed"]), str(result["summary"])), Path(result["copy"]) if result["copy"] else None)


def _kill_on_stop(child: subprocess.Popen[str], stop: threading.Event) -> None:
    while child.poll() is None:
        if stop.wait(0.5):
            child.kill()
            return


class Int8Upgrade:
    """Builds the running pipeline's int8 copies in the background and switches each model to its copy on
    the loop (`module doc`). One build at a time: a newer pipeline's request makes an older
    build's result stale (it is still kept in the cache for the next start)."""

    def __init__(self, tell: Tell, *, builder: Int8Builder | None = None, seen_wait_s: float | None = None,
                 since_start: Callable[[], float] = lambda: 0.0) -> None:
        """`builder`: builds and checks a copy (default: `build_in_child`, looked up when a build starts)."""
        from vcamd.faces.calibration import SEEN_WAIT_S

        self._tell = tell
        self._builder = builder
        self._seen_wait_s = SEEN_WAIT_S if seen_wait_s is None else seen_wait_s
        self._since_start = since_start
        self._generation = 0
        self._stop = threading.Event()
        self.changes: list[dict[str, Any]] = []
        """Each precision change, as the stats JSON shows it (the loop's thread)."""

    def start(self, faces: Any, cfg: Config) -> None:
        """For a pipeline just installed (the loop's thread): build each copy its `precisions` want (`Choice.build`). Never waits."""
        self._generation += 1
        choices: dict[str, Choice] = getattr(faces, "precisions", None) or {}
        models = {role: getattr(faces, role).path for role, choice in choices.items() if choice.build and getattr(faces, role, None)}
        if not models:
            return
        from vcamd.faces.calibration import CALIBRATION_FACES, SeenFaces
        from vcamd.inference.precision import int8_units, needs_reduced_range

        seen = faces.seen = SeenFaces()
        generation, stop = self._generation, self._stop
        settings = {"recognizer": faces.recognizer.path, "providers": list(cfg.models.providers), "threads": cfg.models.threads,
                    "reduce_range": needs_reduced_range(int8_units())}
        log.info("%s: building int8 copies in the background (the float models serve meanwhile)", ", ".join(p.name for p in models.values()))

        def build() -> None:
            crops = seen.wait(CALIBRATION_FACES - 1, self._seen_wait_s, stop)
            while faces.source is None and not stop.wait(1.0):  # calibrated on the source face: wait for one
                pass
            for role, model in models.items():  # the swapper first (`precisions`' order)
                if not stop.is_set():
                    self._build(generation, faces, role, model, settings, crops, stop)

        threading.Thread(target=build, name="int8-build", daemon=True).start()

    def _build(self, generation: int, faces: Any, role: str, model: Path, settings: dict[str, Any], crops: list[Frame], stop: Any) -> None:
        """One model's copy: built, checked, its session loaded and handed to the loop (or why it stays float)."""
        try:
            from vcamd.models.int8roles import calibration_crop
            request = Int8Request(model, faces=faces.calibration_faces(crops, calibration_crop(role, model)), role=role, **settings)
            built = (self._builder or build_in_child)(request, stop)
            session = faces.sessions.copy_session(model, built.copy, background=True) if built.copy else None
        except Exception as exc:  # the float model serves on; said in status
            if not stop.is_set():
                if not isinstance(exc, VcamdError):
                    log.exception("int8 build failed")
                why = f"its int8 copy could not be built ({exc}): the float model serves"
                self._tell(lambda: self._stays_float(generation, faces, role, why), "int8")
            return
        if session is None:
            why = f"its int8 copy failed the fidelity check ({built.verdict.summary}): float stays"
            self._tell(lambda: self._stays_float(generation, faces, role, why, built.verdict), "int8")
        else:
            assert built.copy is not None
            upgraded = faces.precisions[role].now_int8(built.copy, built.verdict)
            self._tell(lambda: self._install(generation, faces, session, upgraded, role), "int8")

    def _install(self, generation: int, faces: Any, session: Any, precision: Choice, role: str) -> None:
        if generation != self._generation:
            return  # another pipeline runs now (its own start decided its precision)
        faces.use_int8(session, precision, role)
        self.changes.append({"model": role, "to": "int8", "after_ms": round(self._since_start() * 1000.0)})
        log.info("%s: now on its int8 copy (%s)", role, precision.why)

    def _stays_float(self, generation: int, faces: Any, role: str, why: str, verdict: Verdict | None = None) -> None:
        faces.seen = None
        if generation != self._generation:
            return
        faces.precisions[role] = faces.precisions[role].stays_float(why, verdict)
        log.warning("%s: %s", role, why)

    def stop(self) -> None:
        """The daemon stops: a build in progress is ended (its child killed)."""
        self._stop.set()
