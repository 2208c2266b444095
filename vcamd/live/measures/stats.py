"""Counters and latency percentiles of a live run, and the `--stats-json` document.

The numbers status and stats share are described once, in `vcamd.live.measures.numbers` (`LiveNumbers`:
frames, faces, latency_ms, swap_age_ms, misses, fps). Shape of `to_json()`: those (with
fps.{source,published} for the whole run instead of the recent fps), plus
stages_ms.<stage>.{p50,p95,p99}, degradation.{transitions,level_share} (time per rung of the quality
ladder), queue_depth.max, providers, cpu_ms_per_frame (of which camera_cpu_ms_per_frame: the camera reader thread's
reading and decoding), cpu_ms_per_frame_by.{threads,stages} (`CpuLedger`: where that CPU went), cpu_from_frame (the
published frame those three count from: 0, or `LiveStats.count_cpu_from`'s), duration_s, and gpu when an NVIDIA GPU
is present.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np

from vcamd.common.quality import Level
from vcamd.common.types import Outcome
from vcamd.live.measures.numbers import AgePercentiles, FaceCounts, FrameCounts, LiveNumbers, Misses, Percentiles, no_misses

log = logging.getLogger(__name__)

RECENT_FRAMES = 60
"""Frames the live fps in `status` is measured over (2 s at 30 fps)."""

SAMPLE_CAP = 20_000  # samples kept per series: a long run keeps its most recent ~11 min at 30 fps


class SampleRing:
    """The most recent `cap` samples of one series in a preallocated float64 array — memory stays
    flat however long the daemon runs (a deque of Python floats grows for the first ~11 minutes) —
    plus the exact count and sum over every sample ever recorded (for per-frame averages)."""

    __slots__ = ("_values", "_next", "count", "sum")

    def __init__(self, cap: int = SAMPLE_CAP) -> None:
        self._values = np.zeros(cap, dtype=np.float64)
        self._next = 0
        self.count = 0
        self.sum = 0.0

    def append(self, value: float) -> None:
        self._values[self._next] = value
        self._next = (self._next + 1) % self._values.size
        self.count += 1
        self.sum += value

    def __len__(self) -> int:
        return min(self.count, self._values.size)

    def recent(self, n: int | None = None) -> np.ndarray:
        """The last `n` samples (all kept ones by default), oldest first, as a new array."""
        kept = len(self)
        n = kept if n is None else max(0, min(n, kept))
        idx = (self._next - n + np.arange(n)) % self._values.size
        return self._values[idx]


def percentiles(samples: Iterable[float] | SampleRing) -> Percentiles:
    if isinstance(samples, SampleRing):
        values = samples.recent()
    else:
        values = np.fromiter(samples, dtype=np.float64)
    if values.size == 0:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50": round(float(p50), 2), "p95": round(float(p95), 2), "p99": round(float(p99), 2)}


FACE_OUTCOMES = ("swapped", "held", "obscured")
"""The per-face counts in stats and status (`vcamd.privacy.rule.FaceOutcome`)."""
UNSURE = "unsure"
"""The count of unsure places covered, beside the face outcomes (`Composed.unsure_covered`)."""
SIDE_ON = "side_on"
"""The count of faces covered because seen from the side, of the held and obscured (`Composed.side_on_covered`)."""


OTHER_THREADS = "other threads"
"""The process's CPU that no watched thread reported: ONNX Runtime's and OpenCV's own pools, a sink's
threads (the file sink's writer, the preview's encoder), the control socket, the page."""

LOOP_REST = "loop: between frames"
"""The loop's CPU outside a frame's stages: taking the next frame, queued commands, the status snapshot."""


CAMERA_THREAD = "camera-reader"
"""The camera reader's thread as the ledger watches it (camera_cpu_ms_per_frame is its share)."""


class LoopCpu:
    """The loop thread's CPU time by stage, from `time.thread_time` readings on the loop itself:
    `begin()` when a frame is taken, `mark(stage)` when a stage ends (the time since the last
    reading goes to it). Loop thread only; ~0.3 µs a reading."""

    def __init__(self) -> None:
        self.stages_s: dict[str, float] = {}
        self._last: float | None = None

    def start(self) -> None:
        """Count from now (on the loop thread)."""
        self.stages_s = {}
        self._last = time.thread_time()

    def begin(self) -> None:
        """A frame is taken: what the loop did since the last frame's end goes to LOOP_REST."""
        self.mark(LOOP_REST)

    def mark(self, stage: str) -> None:
        now = time.thread_time()
        if self._last is not None:
            self.stages_s[stage] = self.stages_s.get(stage, 0.0) + (now - self._last)
        self._last = now

    @property
    def total_s(self) -> float:
        return sum(self.stages_s.values())


class CpuLedger:
    """Where a live run's CPU goes, by thread and by stage (`--stats-json` cpu_ms_per_frame_by).

    Each watched thread reports its own CPU time (`time.thread_time` on that thread: exact, and
    the same on every OS): the workers after each job (`newest.NewestWorker.cpu_s`), the camera
    reader while it reads (`CameraReader.cpu_s`), the loop at each stage's end (`LoopCpu`). A
    worker thread does one thing, so it is one stage too (`stage` names it); the loop's stages are
    its marks. What no watched thread reported is OTHER_THREADS: the process's CPU time minus the
    watched threads' — so the threads, and the stages, add up to `cpu_ms_per_frame`."""

    def __init__(self) -> None:
        self.loop = LoopCpu()
        self._threads: dict[str, tuple[str, Callable[[], float]]] = {}
        self._base: dict[str, float] = {}
        self._process_base = time.process_time()

    def watch(self, thread: str, stage: str, cpu_s: Callable[[], float]) -> None:
        """`cpu_s()`: the CPU seconds `thread` has used since it started (as it last reported them);
        `stage`: what it does, as the stage table names it."""
        self._threads[thread] = (stage, cpu_s)

    def start(self) -> None:
        """Count from now: the loop's stages (call on the loop thread) and every watched thread."""
        self.loop.start()
        self._base = {name: reading() for name, (_, reading) in self._threads.items()}
        self._process_base = time.process_time()

    def process_s(self) -> float:
        """The whole process's CPU seconds since `start()` (every thread: reader, loop, workers, ONNX pools)."""
        return time.process_time() - self._process_base

    def thread_s(self, thread: str) -> float:
        """A watched thread's CPU seconds since `start()` (0 for a thread not watched)."""
        watched = self._threads.get(thread)
        return 0.0 if watched is None else max(0.0, watched[1]() - self._base.get(thread, 0.0))

    def per_frame(self, frames: int) -> dict[str, dict[str, float]]:
        """{"threads": {thread: ms}, "stages": {stage: ms}}: CPU-ms per frame since `start()`."""
        def ms(seconds: float) -> float:
            return round(1000.0 * max(0.0, seconds) / frames, 2) if frames else 0.0

        used = {name: reading() - self._base.get(name, 0.0) for name, (_, reading) in self._threads.items()}
        loop = self.loop.total_s
        other = self.process_s() - loop - sum(max(0.0, s) for s in used.values())
        threads = {"loop": ms(loop), **{name: ms(s) for name, s in used.items()}, OTHER_THREADS: ms(other)}
        stages = {f"loop: {stage}" if stage != LOOP_REST else stage: ms(s) for stage, s in self.loop.stages_s.items()}
        stages |= {self._threads[name][0]: ms(s) for name, s in used.items()}
        stages[OTHER_THREADS] = ms(other)
        return {"threads": threads, "stages": stages}


def _p50_p95(samples: SampleRing) -> AgePercentiles:
    p = percentiles(samples)
    return {"p50": p["p50"], "p95": p["p95"]}


class LiveStats:
    """Everything a live run counts. `record_stage` may be called from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.started_at = clock()
        self._cpu_from_frame = 0  # `count_cpu_from`: the published frame the CPU figures count from (0: the run's start)
        self._cpu_counted_from = 0  # the published frame they do count from (0 until that frame is out)
        self.outcomes: Counter[Outcome] = Counter()
        self.processed = 0
        self.again = 0  # kept frames of the start processed again (`live.startframes`); not in `processed`
        self.published = 0
        self.latency_ms = SampleRing()
        self.swap_age_ms = SampleRing()
        self.face_outcomes: Counter[str] = Counter()
        self.stages_ms: dict[str, SampleRing] = {}
        self.level_frames: Counter[Level] = Counter()
        self.first_publish_at: float | None = None
        self.last_publish_at: float | None = None
        self._recent: deque[float] = deque(maxlen=RECENT_FRAMES)  # publish times, for the live fps
        self.cpu = CpuLedger()
        """Where the CPU goes, by thread and by stage (the loop marks its stages on `cpu.loop`)."""

    def reset_clock(self) -> None:
        """Start the rates and CPU count from now (after models are loaded and threads started);
        on the loop's thread, which the CPU ledger's loop stages count from."""
        self.started_at = self._clock()
        self._cpu_counted_from = 0
        self.cpu.start()

    def count_cpu_from(self, frame: int) -> None:
        """Count the CPU figures (cpu_ms_per_frame, its camera share, cpu_ms_per_frame_by) from the
        `frame`-th published frame on, leaving out the start — the covered frames while the first
        swap runs, the first full looks, keys and covers made anew — as the loop-cost rows and
        `vcamd bench` measure a frame's steady cost. A run that ends before it counts from its start.
        Call before the run."""
        self._cpu_from_frame = frame

    def record_stage(self, name: str, ms: float) -> None:
        with self._lock:
            series = self.stages_ms.get(name)
            if series is None:
                series = self.stages_ms[name] = SampleRing()
            series.append(ms)

    def record_publish(self, outcome: Outcome, level: Level, latency_ms: float | None) -> None:
        now = self._clock()
        with self._lock:
            self.published += 1
            self.outcomes[outcome] += 1
            self.level_frames[level] += 1
            if latency_ms is not None:
                self.latency_ms.append(latency_ms)
            if self.published == self._cpu_from_frame:  # on the loop's thread, which the ledger's loop stages need
                self.cpu.start()
                self._cpu_counted_from = self.published
            if self.first_publish_at is None:
                self.first_publish_at = now
            self.last_publish_at = now
            self._recent.append(now)

    def record_faces(self, outcomes: Iterable[str], swap_age_ms: float | None, unsure_covered: int = 0, side_on_covered: int = 0) -> None:
        """What each face of a published frame got (swapped/held/obscured/passthrough), how many
        unsure places were covered, how many of its faces were covered for being seen from the side,
        and the age of the swapped faces on screen when any was swapped."""
        with self._lock:
            self.face_outcomes.update(str(o) for o in outcomes)
            self.face_outcomes[UNSURE] += unsure_covered
            self.face_outcomes[SIDE_ON] += side_on_covered
            if swap_age_ms is not None:
                self.swap_age_ms.append(swap_age_ms)

    def _face_counts(self) -> FaceCounts:
        counts = self.face_outcomes  # by FACE_OUTCOMES, UNSURE and SIDE_ON
        return FaceCounts(swapped=counts["swapped"], held=counts["held"], obscured=counts["obscured"], unsure=counts[UNSURE],
                          side_on=counts[SIDE_ON])

    def _frame_counts(self, captured: int, dropped: int) -> FrameCounts:
        o = self.outcomes
        return FrameCounts(captured=captured, processed=self.processed, published=self.published, dropped=dropped,
                           swapped=o[Outcome.swapped], held=o[Outcome.held], blurred=o[Outcome.blurred],
                           passthrough=o[Outcome.passthrough], off=o[Outcome.off], offline=o[Outcome.offline],
                           starting=o[Outcome.starting], again=self.again)

    def live_numbers(self, *, captured: int, dropped: int, misses: Misses) -> LiveNumbers:
        """The numbers `status()` shows (and the control page charts)."""
        fps = round(self.recent_fps(), 2)
        with self._lock:
            return LiveNumbers(fps=fps, latency_ms=percentiles(self.latency_ms), swap_age_ms=_p50_p95(self.swap_age_ms),
                               frames=self._frame_counts(captured, dropped), faces=self._face_counts(), misses=misses)

    def published_fps(self) -> float:
        if self.first_publish_at is None or self.last_publish_at is None or self.published < 2:
            return 0.0
        span = self.last_publish_at - self.first_publish_at
        return (self.published - 1) / span if span > 0 else 0.0

    def recent_fps(self) -> float:
        """Published frames per second over the last RECENT_FRAMES frames (what `status` shows)."""
        with self._lock:
            if len(self._recent) < 2:
                return 0.0
            span = self._recent[-1] - self._recent[0]
            return (len(self._recent) - 1) / span if span > 0 else 0.0

    def _cpu_frames(self) -> int:
        """The published frames the CPU figures count (those since `_cpu_counted_from`)."""
        return self.published - self._cpu_counted_from

    def cpu_ms_per_frame(self) -> float:
        """Process CPU time (all threads: reader, pipeline, swap worker, ONNX pools) per published frame."""
        frames = self._cpu_frames()
        return 1000.0 * self.cpu.process_s() / frames if frames else 0.0

    def latency_percentiles(self) -> Percentiles:
        with self._lock:
            return percentiles(self.latency_ms)

    def to_json(
        self,
        *,
        captured: int,
        dropped: int,
        source_fps: float,
        transitions: list[dict[str, Any]],
        queue_depth_max: int,
        providers: dict[str, str],
        gpu: dict[str, Any] | None = None,
        misses: Misses | None = None,
    ) -> dict[str, Any]:
        with self._lock:
            total_levels = sum(self.level_frames.values()) or 1
            frames = self._cpu_frames()
            doc = {
                "frames": self._frame_counts(captured, dropped),
                "faces": self._face_counts(),
                "misses": misses if misses is not None else no_misses(),
                "fps": {"source": round(source_fps, 2), "published": round(self.published_fps(), 2)},
                "latency_ms": percentiles(self.latency_ms),
                "swap_age_ms": _p50_p95(self.swap_age_ms),
                "stages_ms": {name: percentiles(v) for name, v in sorted(self.stages_ms.items())},
                "degradation": {
                    "transitions": transitions,
                    "level_share": {lvl.name: round(self.level_frames[lvl] / total_levels, 3) for lvl in Level},
                },
                "queue_depth": {"max": queue_depth_max},
                "providers": providers,
                "cpu_ms_per_frame": round(self.cpu_ms_per_frame(), 2),
                # Of which the camera's own reading and decoding (its reader thread).
                "camera_cpu_ms_per_frame": round(1000.0 * self.cpu.thread_s(CAMERA_THREAD) / frames, 2) if frames else 0.0,
                "cpu_ms_per_frame_by": self.cpu.per_frame(frames),
                "cpu_from_frame": self._cpu_counted_from,
                "duration_s": round(self._clock() - self.started_at, 2),
            }
        if gpu:
            doc["gpu"] = gpu
        return doc


GpuQuery = Callable[[], tuple[float, float, float]]
"""One GPU sample: (utilisation %, memory used MiB, memory total MiB)."""


def find_gpu_query() -> GpuQuery | None:
    """How to sample the first NVIDIA GPU: pynvml when installed, else `nvidia-smi`; None on
    machines with neither, or without an NVIDIA GPU (each is tried once here)."""
    try:
        import pynvml  # optional

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)

        def query_nvml() -> tuple[float, float, float]:
            util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            return float(util), mem.used / 2**20, mem.total / 2**20

        query_nvml()
        return query_nvml
    except Exception:
        pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None

    def query_smi() -> tuple[float, float, float]:
        out = subprocess.run(
            [exe, "--query-gpu=utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout
        util, used, total = (float(x) for x in out.strip().splitlines()[0].split(","))
        return util, used, total

    try:
        query_smi()
    except Exception:
        return None
    return query_smi


class GpuSampler:
    """Polls NVIDIA GPU utilisation and memory once a second while a run lasts, on its own thread;
    does nothing on machines without a GPU to sample (`find_gpu_query`).

    The GPU is looked for on that thread too, not when the engine is built: on a GPU machine,
    pynvml's import and NVML's init, or without pynvml a first `nvidia-smi` (a process start),
    would otherwise come before the first frame.
    """

    def __init__(self, interval_s: float = 1.0, find_query: Callable[[], GpuQuery | None] = find_gpu_query) -> None:
        self.interval_s = interval_s
        self._find_query = find_query
        # (util %, used MiB, total MiB); bounded so a daemon running for days does not grow: the
        # figures cover the last hour.
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=3600)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        query = self._find_query()
        if query is None:
            return
        while not self._stop.is_set():
            try:
                self._samples.append(query())
            except Exception as exc:  # a failing probe must not disturb the run; report it once
                log.info("GPU sampling stopped: %s", exc)
                return
            self._stop.wait(self.interval_s)

    def latest(self) -> dict[str, Any] | None:
        """The newest sample, for the live status (None without an NVIDIA GPU, or before its first)."""
        if not self._samples:
            return None
        util, used, total = self._samples[-1]
        return {"util_pct": util, "memory_used_mib": round(used, 1), "memory_total_mib": round(total, 1)}

    def stop(self) -> dict[str, Any] | None:
        """Ends the sampling; the run's figures (None when there was no sample)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)  # a sample in progress (nvidia-smi) may take up to its timeout: not waited for
        samples = list(self._samples)  # one copy: a sampler not yet ended may still append
        if not samples:
            return None
        util = [s[0] for s in samples]
        used = [s[1] for s in samples]
        return {
            "util_pct": {"mean": round(float(np.mean(util)), 1), "max": round(float(np.max(util)), 1)},
            "memory_used_mib": {"max": round(float(np.max(used)), 1)},
            "memory_total_mib": round(samples[-1][2], 1),
            "samples": len(samples),
        }


class _ReaderCounts(Protocol):
    @property
    def times_lost(self) -> int: ...

    @property
    def bad_frames(self) -> int: ...


class _ErrorCount(Protocol):
    @property
    def errors(self) -> int: ...


class _TrackerCounts(_ErrorCount, Protocol):
    @property
    def late(self) -> int: ...


class _SwapCounts(_ErrorCount, Protocol):
    @property
    def jobs_replaced(self) -> int: ...


def count_misses(*, reader: _ReaderCounts, tracker: _TrackerCounts, full_detector: _ErrorCount, swap_worker: _SwapCounts) -> Misses:
    """The live engine's parts' own counters, as `Misses` (see there for what each means)."""
    return Misses(
        tracker_late=tracker.late,
        tracker_errors=tracker.errors,
        detector_errors=full_detector.errors,
        swap_errors=swap_worker.errors,
        swap_jobs_replaced=swap_worker.jobs_replaced,
        camera_lost=reader.times_lost,
        camera_bad_frames=reader.bad_frames,
    )
