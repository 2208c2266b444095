"""The swap model on its own thread: the loop hands in the newest face region and never waits.

The model may take 1.5 s (inswapper on a CPU) or 3 ms (a GPU); the output cadence does not depend
on it. A failing model (exception, NaN output, wrong result count) leaves no result behind and
marks the worker failed until the next success; the loop's compose step covers the faces meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from vcamd.common.newest import NewestWorker
from vcamd.common.quality import Level
from vcamd.common.types import Face, Frame
from vcamd.faces.results import StageTimer, SwappedFace
from vcamd.inference.cores import CoreSplit, SwapperCores
from vcamd.live.measures.stats import LiveStats

log = logging.getLogger(__name__)

Clock = Callable[[], float]

FLAT_CROP_STD = 2.0
"""A swapped crop whose pixel spread is below this is not a face (a NaN output, an empty tensor)."""

FIRST_SHOWN_WAIT_S = 0.1
"""After the first swap of a start, the longest the next one waits for it to be shown (`SwapWorker.first_shown`)."""


class Swapping(Protocol):
    """The part of the face engine the worker uses (and, where it has them, its `core_split`:
    the cores its models run on, `vcamd.inference.cores`, and its `precision`: what the swapper runs at)."""

    def swap_faces(self, frame: Frame, faces: list[Face], level: Level = ..., timer: StageTimer | None = ...) -> list[SwappedFace]: ...


@dataclass(frozen=True, slots=True)
class SwapJob:
    region: Frame  # a private copy of the faces' region of the frame
    faces: list[Face]  # in region coordinates
    frame_faces: list[Face]  # the same faces in frame coordinates, for matching later
    level: Level  # the enhancer runs only on the rungs that have it (quality.LADDER)
    t_capture: float
    frame_index: int = 0  # the loop's index of the frame the region was cut from
    maker: tuple[Any, Any] = (None, None)  # (the face pipeline, its source face) as the loop handed the job in
    sources: list[str] | None = None  # with a face map: each face's source key (`vcamd.faces.mapping`)


@dataclass(frozen=True, slots=True)
class SwapResult:
    faces: list[Face]  # frame coordinates at capture time
    swapped: list[SwappedFace | None]  # one per face, what FacePipeline.composite pastes; None: nothing to paste
    t_capture: float  # when the camera frame the swap was computed on was captured
    t_done: float
    frame_index: int = 0  # as the job's
    level: Level = Level.full  # the rung it was made at
    maker: tuple[Any, Any] = (None, None)  # as the job's


class SwapWorker(NewestWorker[SwapJob, SwapResult]):
    """Runs the swap model on the newest job in its own thread; never blocks the caller."""

    def __init__(self, faces: Swapping, stats: LiveStats, clock: Clock) -> None:
        super().__init__("swap-worker")
        self.faces = faces  # replaced between frames when the pipeline is rebuilt
        self._stats = stats
        self._clock = clock
        self._lock = threading.Lock()  # guards the three fields below
        self._failed_since: float | None = None  # set after a model error, cleared by a success
        self._job_started: float | None = None  # when the swap now running began
        self._usual_s: float | None = None  # moving average of a swap's duration
        self.swaps = 0
        self.errors = 0
        self.cores = SwapperCores(clock)
        """The worker's own cores: off the loop's while the machine is quiet (`vcamd.inference.cores`)."""
        self.first_shown: threading.Event | None = None
        """Set by the loop once the first swapped face went out (`startframes.Startup.shown`). The job
        after the first result waits for it (at most FIRST_SHOWN_WAIT_S, once): the frame that shows
        the first swap is located and composed while the cores are not the next swap's."""
        self._waited_for_first = False

    def latest(self) -> tuple[SwapResult | None, bool]:
        """The newest successful result, and whether the model failed after it."""
        result, _ = self.results.latest()
        with self._lock:
            return result, self._failed_since is not None

    @property
    def usual_s(self) -> float | None:
        """A swap's usual duration (moving average); None before the first."""
        with self._lock:
            return self._usual_s

    def stale(self, now: float, max_age_s: float) -> bool:
        """True when the newest result is older than `max_age_s` *and* the swap now running has
        taken over 4× the usual swap time: the model hangs (driver, deadlock). A model that is
        merely slow (inswapper on a CPU: seconds per swap) keeps its results usable."""
        result, _ = self.results.latest()
        with self._lock:
            if result is None or now - result.t_done <= max_age_s:
                return False
            if self._job_started is None:
                return False  # idle (no face to swap for a while): the next result is on its way
            return now - self._job_started > 4.0 * (self._usual_s or 0.0)

    def _work(self, job: SwapJob) -> SwapResult | None:
        first = self.first_shown
        if first is not None and not self._waited_for_first and self.results.latest()[0] is not None:
            self._waited_for_first = True
            first.wait(FIRST_SHOWN_WAIT_S)
        split: CoreSplit | None = getattr(self.faces, "core_split", None)  # None: a pipeline that runs anywhere
        precision = getattr(getattr(self.faces, "precision", None), "runs", "float")  # `FaceEngine.precision`
        self.cores.follow(split, first=self.results.latest()[0] is None, precision=precision)
        with self._lock:
            t0 = self._job_started = self._clock()
        timer = StageTimer()
        try:
            # With a face map, each face is swapped to its own source (a pipeline without one takes no keys).
            mapped = {"sources": job.sources} if job.sources is not None else {}
            swapped = self.faces.swap_faces(job.region, job.faces, job.level, timer, **mapped)
            if len(swapped) != len(job.faces):
                raise RuntimeError(f"swap_faces returned {len(swapped)} results for {len(job.faces)} faces")
            if any(_is_flat(sw.crop) for sw in swapped):
                # NaN/Inf model output turns into a flat crop in the uint8 conversion: a model
                # error, never a face to publish.
                raise RuntimeError("swap model returned a flat (NaN or empty) face crop")
            # A face the parser saw too little of (a hand over it, a turned head) has no swap to
            # paste: compose holds or obscures it like any face that could not be swapped.
            shown = [sw if sw.shown else None for sw in swapped]
        except Exception as exc:  # a model error must never stop the output; compose covers the faces
            self.errors += 1
            if self.errors <= 3 or self.errors % 100 == 0:
                log.error("swap model failed (%d so far): %s", self.errors, exc)
            with self._lock:
                self._job_started = None
                if self._failed_since is None:
                    self._failed_since = self._clock()
            return None
        t1 = self._clock()
        self._stats.record_stage("swap_job", (t1 - t0) * 1000.0)
        for stage, ms in timer.ms.items():  # align / swap (the model) / enhance
            self._stats.record_stage(stage, ms)
        previous, _ = self.results.latest()
        with self._lock:
            self._job_started = None
            took = t1 - t0
            self._usual_s = took if self._usual_s is None else 0.8 * self._usual_s + 0.2 * took
            self.swaps += 1
            self._failed_since = None
        if previous is not None and job.t_capture < previous.t_capture:
            return None
        return SwapResult(job.frame_faces, shown, job.t_capture, t1, job.frame_index, job.level, job.maker)


def _is_flat(crop: Frame) -> bool:
    return float(np.std(crop[::4, ::4])) < FLAT_CROP_STD
