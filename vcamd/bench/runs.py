"""One bench row's run: the config a scenario runs with, the live engine in process (`run_live`) or
`vcamd run` as a user starts it (`run_vcamd`), the busy processes of a loaded row, and the figures
each run's stats JSON gives (`summarise`, `call_row`). The scenarios (`vcamd.bench.scenarios`), the
model timings and the remote rows all run this way."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from vcamd.bench.settings import BUSY_CODE, BenchSettings
from vcamd.bench.targets import TARGET_P99_BUDGET_MS
from vcamd.common.errors import VcamdError
from vcamd.common.quality import Level, worst

if TYPE_CHECKING:
    from vcamd.common.types import Frame
    from vcamd.config.schema import Config
    from vcamd.live.engine import LiveEngine
    from vcamd.live.loading import FacePipeline


class RunFailed(VcamdError):
    """A scenario's `vcamd run` failed: the error says the exact command to run by hand, and the
    bench's folder (its config, clip and stand-in models) is kept for it."""


def scenario_config(name: str, settings: BenchSettings, tmpdir: Path, base: Config, *, face_selection: str | None = None,
                    swapper: Path | None = None, precision: str = "float") -> Config:
    """The config a scenario runs with: the bench's detector and providers, stand-in swapper
    (light, compute-equivalent for `inswapper` and `startup`, or the one given) and recognizer
    built in `tmpdir`, enhancer off, the models at `precision` ("int8", "auto": their int8 copies, once
    `prepare_int8` and `prepare_detector_int8` built them)."""
    from vcamd.bench.standins import build_recognizer, build_swapper
    from vcamd.config.reading import config_from_dict

    if swapper is None:
        compute_equivalent = name in ("inswapper", "startup")
        swapper = tmpdir / f"swapper_{'inswapper' if compute_equivalent else 'light'}{'_fp16' if settings.fp16 else ''}.onnx"
        if not swapper.exists():
            build_swapper(swapper, fp16=settings.fp16, compute_equivalent=compute_equivalent)
    recognizer = tmpdir / "recognizer.onnx"
    if not recognizer.exists():
        build_recognizer(recognizer)
    data = base.model_dump(mode="json")
    data["models"].update(
        detector=settings.detector, swapper=str(swapper), recognizer=str(recognizer),
        providers=settings.providers, threads=settings.threads, precision=precision,
    )
    data["swap"].update(source_face=str(settings.face), source_consent=True, enabled=True)
    if face_selection is not None:
        data["swap"]["face_selection"] = face_selection
    data["enhancer"]["enabled"] = False
    data["camera"]["loop"] = True
    return config_from_dict(data, "vcamd bench")


CPU_FROM_FRAME = 60
"""The bench's CPU figures count from this published frame on (`LiveStats.count_cpu_from`): a steady
frame's cost, the start left out — the covered frames while the first swap runs, the first full looks,
keys and covers made anew — as the loop-cost rows measure it (benchmarks/loop_cost.py: frames 60→240)."""

def run_live(cfg: Config, clip: Path, frames: int, quality: str | None = None,
             on_engine: Callable[[LiveEngine], None] | None = None) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Build the face pipeline, warm it up, run the live engine on `clip` for `frames` published
    frames; returns (stats JSON — its CPU figures from CPU_FROM_FRAME on —, stage series of the run,
    seconds spent building). `quality` pins the watchdog's level (as `vcamd quality` does);
    `on_engine(engine)` is called before the run."""
    from vcamd.live.capture.sources import VideoFileCamera
    from vcamd.live.engine import LiveEngine
    from vcamd.live.loading import build_face_pipeline
    from vcamd.sinks.null import NullSink

    t_build = time.monotonic()
    faces, providers = build_face_pipeline(cfg)
    _warm_up(faces, cfg, clip)
    build_s = time.monotonic() - t_build
    engine = LiveEngine(
        cfg,
        source=VideoFileCamera(clip, loop=True),
        sink_factory=lambda w, h, fps: NullSink(w, h),
        faces=faces,
        providers=providers(),
    )
    if quality is not None:
        engine.set_quality(Level[quality])  # applied by the loop before its first frame
    engine.parts.stats.count_cpu_from(CPU_FROM_FRAME)
    if on_engine is not None:
        on_engine(engine)
    stats = engine.run(max_frames=frames)
    return stats, engine.parts.stats.stages_ms, build_s


def run_vcamd(cfg: Config, settings: BenchSettings, clip: Path, tmpdir: Path, name: str, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """`vcamd run` with `cfg` on `clip` (a file camera, looped), null sink, `settings.frames`
    frames, as a user starts it: its stats JSON, with the command under "command". `prefix`: what
    runs it (`ip netns exec NS`: inside a network namespace)."""
    import subprocess
    import sys

    config, stats_path = tmpdir / f"{name}.toml", tmpdir / f"{name}.json"
    config.write_text(_toml(cfg.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    command = [*prefix, sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(clip), "--loop",
               "--sink", "null", "--frames", str(settings.frames), "--stats-json", str(stats_path), "--no-tray"]
    # Its own runtime folder: a daemon already running here does not stop the measurement (and the
    # stand-in's optimised graph is kept in the bench's folder: `_cache_dir`).
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(tmpdir / f"runtime-{name}")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode as an installed vcamd has it (see the module's doc)
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120 + 2 * settings.frames / settings.fps)
    by_hand = shlex.join(["env", f"VCAMD_RUNTIME_DIR={env['VCAMD_RUNTIME_DIR']}", f"VCAMD_CACHE_DIR={env.get('VCAMD_CACHE_DIR', '')}", *command])
    fix = f"run it by hand to see all it says: {by_hand} — its config, clip and models stay in {tmpdir} until you delete that folder"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RunFailed(f"bench {name}: vcamd run failed (exit {proc.returncode}): {last}", fix=fix)
    stats: dict[str, Any] = json.loads(stats_path.read_text(encoding="utf-8"))
    not_loaded = [line for line in proc.stderr.splitlines() if "did not load" in line]
    if stats["startup_ms"].get("first_swap") is None and not_loaded:
        # `vcamd run` keeps running (covered) when its models fail to load: no swap to time.
        raise RunFailed(f"bench {name}: vcamd run swapped nothing: {not_loaded[-1]}", fix=fix)
    return stats | {"command": " ".join(command)}


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[int]]:
    """N processes that each keep a core busy at normal priority (the call app), for the `with`
    block; yields their pids. Each leads a process group of its own, killed at the end — also when
    the block raises or is interrupted — and waited for, so none outlives the bench. They stay in
    the bench's session: with Linux's autogroup on, a process of another session (`setsid`) would
    be weighed as a group of its own against vcamd's, and vcamd's nice values would never meet
    it (a desktop's call app may be either)."""
    import signal
    import subprocess
    import sys

    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY_CODE], process_group=0,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        for p in procs:  # each is in its loop once it wrote its byte; EOF instead: it never got there
            assert p.stdout is not None  # stdout=PIPE
            started = p.stdout.read(1)
            p.stdout.close()
            if not started:
                raise RuntimeError(f"a busy process ({sys.executable} -c ...) exited before its loop (exit code {p.wait()})")
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()


def call_row(stats: dict[str, Any], settings: BenchSettings) -> dict[str, Any]:
    """One call run's figures from its stats JSON."""
    frames = stats["frames"]
    after_first = frames["published"] - stats.get("published_before_first_swap", 0)
    return {
        "swapped_after_first_swap": round(frames["swapped"] / after_first, 3) if after_first > 0 else None,
        "swapped_frames": frames["swapped"],
        "published": frames["published"],
        "swap_age_ms": stats["swap_age_ms"],
        "first_frame_ms": stats["startup_ms"]["first_frame"],
        "first_swap_ms": stats["startup_ms"]["first_swap"],
        "fps_ratio": round(stats["fps"]["published"] / settings.fps, 3),
        "published_fps": stats["fps"]["published"],
        "latency_p99_ms": stats["latency_ms"]["p99"],
        "swap_model_ms_p50": stats["stages_ms"].get("swap", {}).get("p50", 0.0),
        "ran": model_ran(stats, "swapper"),
        "levels": {k: v for k, v in stats["degradation"]["level_share"].items() if v},
        "transitions": [_transition_text(t) for t in stats["degradation"]["transitions"]],
        "command": stats["command"],
    }


def model_ran(stats: dict[str, Any], role: str) -> str:
    """What the `role` model ("swapper", "detector") ran at by the end of a run (its stats JSON):
    "float", "int8", or "not loaded" (the run ended before the models were in)."""
    return (stats.get("precision") or {}).get(role) or "not loaded"


def _transition_text(t: dict[str, Any]) -> str:
    """One watchdog transition of the stats JSON: a rung change, or the faces swapped per round."""
    faces = t.get("faces_per_round")
    change = f"faces per round {faces['from']}→{faces['to']}" if faces else f"{t['from']}→{t['to']}"
    return f"{change} ({t['reason']})"


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (Linux), to read a figure by what the machine did."""
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])
    except OSError:
        return "n/a"


def _toml(data: dict[str, Any]) -> str:
    """A config dump (sections of scalars and lists of scalars) as TOML; JSON's string escapes are TOML's."""
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    return "\n".join(f"[{section}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in items.items()) for section, items in data.items())


def summarise(stats: dict[str, Any], stages: dict[str, Any], settings: BenchSettings, setup_s: float) -> dict[str, Any]:
    """The bench's figures from one run's stats JSON (and its stage series, for the overhead)."""

    published = max(1, stats["frames"]["published"])

    def total(stage: str) -> float:
        series = stages.get(stage)
        return series.sum if series is not None else 0.0

    # Everything but model inference: the loop's time per frame minus the detector stage, plus
    # the swap worker's own work around the model (align, result hand-off).
    overhead_ms = (total("loop") - total("detect") + total("swap_job") - total("swap") - total("enhance")) / published
    interval_ms = 1000.0 / settings.fps
    return {
        "source_fps": stats["fps"]["source"],
        "published_fps": stats["fps"]["published"],
        "fps_ratio": round(stats["fps"]["published"] / settings.fps, 3),
        "latency_ms": stats["latency_ms"],
        "p99_limit_ms": round(TARGET_P99_BUDGET_MS + interval_ms, 1),
        "overhead_ms_per_frame": round(overhead_ms, 2),
        "cpu_ms_per_frame": stats["cpu_ms_per_frame"],
        "camera_cpu_ms_per_frame": stats.get("camera_cpu_ms_per_frame", 0.0),
        "swapped_share": round(stats["frames"]["swapped"] / published, 3),
        "swap_model_ms_p50": stats["stages_ms"].get("swap", {}).get("p50", 0.0),
        "swap_age_ms": stats.get("swap_age_ms", {}),
        "ran": model_ran(stats, "swapper"),
        "detector_ran": model_ran(stats, "detector"),
        "detect_ms_p50": stats["stages_ms"].get("detect", {}).get("p50", 0.0),
        "levels": {k: v for k, v in stats["degradation"]["level_share"].items() if v},
        "transitions": len(stats["degradation"]["transitions"]),
        "min_level": worst(Level[k] for k, v in stats["degradation"]["level_share"].items() if v).name,
        "setup_s": round(setup_s, 1),
        "stats": stats,
    }


def first_frame(clip: Path) -> Frame:
    import cv2

    from vcamd.common.errors import VcamdError

    cap = cv2.VideoCapture(str(clip))
    ok, frame = cap.read()
    cap.release()
    if not ok:
        raise VcamdError(f"cannot read the bench clip {clip}")
    return cast("Frame", frame)


def _warm_up(faces: FacePipeline, cfg: Config, clip: Path) -> None:
    """Create every session and run each model once, so the measured run starts warm."""
    from vcamd.common.errors import VcamdError

    frame = first_frame(clip)
    found = faces.detect(frame, cfg.detection.size)
    if not found:
        raise VcamdError("the detector finds no face in the bench clip", fix="use --face with a clear, frontal face photo")
    faces.detect(frame[: cfg.detection.track_size * 2, : cfg.detection.track_size * 2], cfg.detection.track_size)
    targets = faces.select(found, frame)
    for swapped, face in zip(faces.swap_faces(frame, targets), targets):
        faces.composite(frame, swapped, face)  # builds the blend masks once
    from vcamd.privacy.badge import draw_badge

    draw_badge(frame, cfg.disclosure.text, cfg.disclosure.corner)
