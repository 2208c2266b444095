"""`vcamd bench`: the live loop on a generated clip played like a camera, with stand-in swappers.

Each scenario runs the real live engine (reader thread, newest-frame slot, tracking, async swap
worker, re-composite, badge, watchdog) on a clip of the given face sliding across a 720p (or 1080p)
frame at 30 fps, publishing to the null sink. Scenarios:

* `light`     — a cheap stand-in swapper (a few ops), so the loop's own cost shows;
* `inswapper` — the compute-equivalent inswapper_128 stand-in (same layers, random weights; built
  at run time in a temporary folder), which costs what the real model costs;
* `groups` — a 29-face group photo as a still camera, `face_selection = "all"`, light swapper;
* `resolution` — the light scenario at 480p and at 1080p (watchdog pinned at full), in
  `--rounds` interleaved pairs: the figure is the pair with the median ratio (one pair is at the
  mercy of the machine's speed between its two runs: 1.26–1.43× in five single pairs here);
* `startup` — `vcamd run` started as a user starts it (a subprocess, the compute-equivalent
  inswapper stand-in, the clip as a file camera, null sink, `--frames N --stats-json`), twice: how
  long from the process start until the first frame is published and until the first swapped face,
  at the first start (the swapper optimised by ONNX Runtime and its graph kept: `vcamd.ortcache`)
  and at the next start (every later one: the kept graph loaded). Python writes and reads bytecode
  as an installed vcamd has it, whatever PYTHONDONTWRITEBYTECODE says here (else every start
  compiles vcamd's modules from source). `--threads` applies (default 1; a user's default config
  has `[models] threads = 0`, every core): the title says which;
* `call` — what a video call asks: `vcamd run` started as a user starts it (as `startup`), with a
  swapper of a call's cost (`CALL_SWAP_CONVS` heavy convolutions: ~0.37 s per face on one core of
  a small CPU), for `--frames` frames, in `--rounds` runs; with `--load N`, each run is followed
  by one with N busy processes (`python -c 'while 1: pass'` at normal priority, the call app)
  for its whole length, killed after it whatever happens. Quiet and loaded runs print side by
  side: frames swapped after the first swap, swap age, first frame and first swap beside fps
  and p99, with the machine's load average.

Printed for light/inswapper: published vs source fps, capture→publish p50/p95/p99, pipeline
overhead per frame (everything but model inference), CPU-ms per published frame (all threads) and
% of frames swapped, each against its target. For groups/resolution: one row per target with the
figure, the target and figure ÷ target. Everything is read from the engine's stats JSON (and its
public constructor, `run()` and `set_quality`), so the bench does not depend on how the engine is
built inside.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from vcamd.commands import add_config_option, check_output_file
from vcamd.quality import BEST, Level, worst

log = logging.getLogger(__name__)

RESOLUTIONS = {"480p": (640, 480), "720p": (1280, 720), "1080p": (1920, 1080)}
SCENARIOS = ("light", "inswapper", "groups", "resolution", "startup", "call")
DEFAULT_SCENARIOS = ("light", "inswapper")

# Targets from the live-daemon issue (720p / 30 fps on a 2-core CPU).
TARGET_FPS_RATIO = 0.95
TARGET_P99_BUDGET_MS = 40.0  # + one frame interval
TARGET_OVERHEAD_MS = 8.0
TARGET_CPU_MS = 30.0
TARGET_SWAPPED = 0.95
# Targets from the performance issue (round 2): groups and resolution growth.
TARGET_FULL_QUALITY = 0.90
TARGET_EVERY_FACE = 0.95
TARGET_RESOLUTION_RATIO = 1.3
TARGET_ONE_FACE_CPU_MS = 12.0  # 720p, SCRFD-2.5G, at full quality
TARGET_FIRST_FRAME_MS = 500.0  # cold start: from the process start, with the compute-equivalent swapper
TARGET_FIRST_SWAP_MS = 3000.0
GROUP_PHOTO = "solvay_conference_1927.png"
# Targets from the call-load issue: 720p, the call's swapper, two busy processes, 2 cores.
TARGET_SWAP_AGE_P95_MS = 1500.0
TARGET_SWAPPED_AFTER_FIRST = 0.90
TARGET_CALL_FIRST_FRAME_MS = 1000.0
TARGET_CALL_FIRST_SWAP_MS = 4000.0
CALL_SWAP_CONVS = 8
"""The call scenario's swapper: the light swap plus this many heavy convolutions (~0.37 s per face
on one core here: `vcamd.bench.standins.build_swapper(heavy_convs=)`)."""
BUSY_CODE = "while 1: pass"
"""What a busy process of `--load` runs: one core's worth of CPU at normal priority."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark the live loop (generated clip as camera, stand-in swappers)",
        description="Run the live pipeline on a generated clip played like a camera and print fps, "
        "latency, pipeline overhead and CPU time per frame for a light and a compute-equivalent swapper.",
    )
    add_config_option(p)
    p.add_argument("--face", type=Path, default=None, metavar="PHOTO",
                   help="photo with one face: the clip's content and the source face (default: [swap] source_face)")
    p.add_argument("--detector", default=None, metavar="MODEL",
                   help="SCRFD detector: manifest name or .onnx path (default: [models] detector)")
    p.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS), metavar="LIST",
                   help=f"comma-separated, from: {', '.join(SCENARIOS)} (default: {','.join(DEFAULT_SCENARIOS)}). "
                        "groups: a 29-face group photo as a still camera with face_selection = \"all\"; "
                        "resolution: CPU-ms per frame at 1080p against 480p; call: `vcamd run` with a swapper of a call's "
                        "cost (~0.37 s a face), swap age and start-up beside fps (with --load N: quiet and loaded runs side by side)")
    p.add_argument("--group-photo", type=Path, default=None, metavar="PHOTO",
                   help=f"the groups scenario's photo (default: {GROUP_PHOTO} next to --face)")
    p.add_argument("--quality", choices=[level.name for level in Level], default=None,
                   help="pin the watchdog at this level for the run (default: automatic; the resolution "
                        "scenario pins full unless given, so both sizes do the same work)")
    p.add_argument("--resolution", choices=sorted(RESOLUTIONS), default="720p")
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="resolution: how many 480p/1080p pairs to run, interleaved; the figure is the pair with "
                        "the median ratio; call: how many runs (quiet/loaded pairs with --load) (default 3)")
    p.add_argument("--load", type=int, default=0, metavar="N",
                   help="call: after each quiet run, one with N busy processes at normal priority "
                        "(python -c 'while 1: pass', the call app) for the run's length; quiet and loaded rows side by side (default 0: quiet only)")
    p.add_argument("--fps", type=float, default=30.0, help="the clip's (camera's) frame rate")
    p.add_argument("--frames", type=int, default=300, metavar="N", help="published frames measured per scenario")
    p.add_argument("--inswapper-frames", type=int, default=900, metavar="N",
                   help="published frames for the inswapper scenario (default 900: a CPU swap takes seconds, so "
                        "a short run would end before the first one lands)")
    p.add_argument("--providers", default=None, metavar="LIST",
                   help="ONNX Runtime providers, e.g. cpu or cuda (default: [models] providers)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="ONNX Runtime intra-op threads per session (default 1: the live loop runs up to three models at once)")
    p.add_argument("--fp16", action="store_true", help="build the stand-in swappers with float16 weights and float32 inputs/output, like inswapper_128_fp16 (GPU)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=handle)


@dataclass(frozen=True)
class BenchSettings:
    face: Path
    detector: str
    width: int
    height: int
    fps: float
    frames: int
    inswapper_frames: int
    providers: list[str]
    threads: int
    fp16: bool
    quality: str | None = None
    group_photo: Path | None = None
    rounds: int = 1
    load: int = 0


def handle(args: argparse.Namespace) -> int:
    from vcamd.config import load_config
    from vcamd.errors import VcamdError

    cfg, _ = load_config(args.config)
    face = args.face or cfg.swap.source_face
    if face is None:
        raise VcamdError("vcamd bench needs a photo with a face", fix="pass --face PHOTO or set [swap] source_face")
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or not scenarios:
        raise VcamdError(f"--scenarios: unknown {', '.join(unknown) or '(none given)'}", fix=f"use a comma-separated list of {', '.join(SCENARIOS)}")
    if args.frames < 30:
        raise VcamdError(f"--frames {args.frames} is too few to measure", fix="use at least 30")
    if "inswapper" in scenarios and args.inswapper_frames < 30:
        raise VcamdError(f"--inswapper-frames {args.inswapper_frames} is too few to measure", fix="use at least 30")
    if not 0 < args.fps <= 240:  # also refuses NaN; a camera's range, as [camera] fps
        raise VcamdError(f"--fps {args.fps:g}: not a camera frame rate", fix="use a number above 0 and at most 240, e.g. 30")
    if {"resolution", "call"} & set(scenarios) and args.rounds < 1:
        raise VcamdError(f"--rounds {args.rounds}: the resolution and call scenarios need at least one round", fix="use 1 or more, e.g. 3")
    if not 0 <= args.load <= 64:
        raise VcamdError(f"--load {args.load}: not a number of busy processes", fix="use 0 (quiet only) to 64, e.g. 2")
    if args.threads < 0:
        raise VcamdError(f"--threads {args.threads}: cannot be negative", fix="use 0 (all cores) or a positive number")
    if args.json is not None:
        check_output_file(args.json, "--json")  # now, not after minutes of measuring
    width, height = RESOLUTIONS[args.resolution]
    settings = BenchSettings(
        face=Path(face),
        detector=args.detector or cfg.models.detector,
        width=width,
        height=height,
        fps=args.fps,
        frames=args.frames,
        inswapper_frames=args.inswapper_frames,
        providers=[p.strip() for p in args.providers.split(",")] if args.providers else list(cfg.models.providers),
        threads=args.threads,
        fp16=args.fp16,
        quality=args.quality,
        group_photo=args.group_photo or Path(face).parent / GROUP_PHOTO,
        rounds=args.rounds,
        load=args.load,
    )
    if "groups" in scenarios and not settings.group_photo.is_file():
        raise VcamdError(f"--group-photo: {settings.group_photo} not found", fix="pass --group-photo PHOTO (a photo with many faces)")
    results = run_benchmark(settings, scenarios, base=cfg)
    print(format_table(results, settings))
    if args.json is not None:
        from vcamd.private_files import private_parent, write_private_atomic

        private_parent(args.json)  # 0600 like --stats-json, never through a symlink
        write_private_atomic(args.json, json.dumps({"settings": _settings_dict(settings), "results": results}, indent=2) + "\n")
    return 0


def run_benchmark(settings: BenchSettings, scenarios: list[str], base=None) -> dict[str, dict]:
    """Run each scenario; returns scenario → summary (and the full stats JSON under "stats")."""
    from vcamd.config import Config
    from vcamd.images import read_image

    base = base or Config()
    image = read_image(settings.face, "bench face")
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="vcamd-bench-") as tmp, _cache_dir(Path(tmp) / "optimized"):
        tmpdir = Path(tmp)
        for name in scenarios:
            log.info("bench: scenario %s", name)
            if name == "groups":
                out[name] = run_groups(settings, tmpdir, base)
            elif name == "resolution":
                out[name] = run_resolution(settings, image, tmpdir, base)
            elif name == "startup":
                out[name] = run_startup(settings, sliding_clip(image, settings, tmpdir, (settings.width, settings.height)), tmpdir, base)
            elif name == "call":
                out[name] = run_call(settings, sliding_clip(image, settings, tmpdir, (settings.width, settings.height)), tmpdir, base)
            else:
                clip = sliding_clip(image, settings, tmpdir, (settings.width, settings.height))
                out[name] = run_scenario(name, settings, clip, tmpdir, base)
    return out


@contextlib.contextmanager
def _cache_dir(folder: Path):
    """The optimised graphs of the stand-in swappers (`vcamd.ortcache`) go to the bench's temporary
    folder, not the user's cache (554 MB each, of models deleted after the run)."""
    previous = os.environ.get("VCAMD_CACHE_DIR")
    os.environ["VCAMD_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("VCAMD_CACHE_DIR", None)
        else:
            os.environ["VCAMD_CACHE_DIR"] = previous


def sliding_clip(image, settings: BenchSettings, tmpdir: Path, size: tuple[int, int]) -> Path:
    """The one-face camera clip: the face photo sliding across a `size` frame (built once per size)."""
    from vcamd.bench.clips import write_sliding_clip

    path = tmpdir / f"clip_{size[0]}x{size[1]}.avi"
    if path.exists():
        return path
    return write_sliding_clip(
        path, image, size=size, fps=settings.fps,
        frames=int(4 * settings.fps), face_scale=0.66, step_px=max(1, size[0] // 400), bob_px=6,
    )


def still_clip(image, settings: BenchSettings, tmpdir: Path, size: tuple[int, int]) -> Path:
    """A still camera: `image` fitted into a `size` frame (grey bars), the same frame for 4 s, MJPG."""
    import cv2

    from vcamd.bench.clips import fitted_frame
    from vcamd.errors import VcamdError

    width, height = size
    frame = fitted_frame(image, size)
    path = tmpdir / f"still_{width}x{height}.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), settings.fps, (width, height))
    if not writer.isOpened():
        raise VcamdError(f"cannot write the clip {path}", fix="OpenCV needs its MJPG encoder (opencv-python has it)")
    try:
        for _ in range(int(4 * settings.fps)):
            writer.write(frame)
    finally:
        writer.release()
    return path


def scenario_config(name: str, settings: BenchSettings, tmpdir: Path, base, *, face_selection: str | None = None):
    """The config a scenario runs with: the bench's detector and providers, stand-in swapper
    (light, or compute-equivalent for `inswapper`) and recognizer built in `tmpdir`, enhancer off."""
    from vcamd.bench.standins import build_recognizer, build_swapper
    from vcamd.config import config_from_dict

    suffix = "_fp16" if settings.fp16 else ""
    compute_equivalent = name in ("inswapper", "startup")
    heavy_convs = CALL_SWAP_CONVS if name == "call" else 0
    kind = "inswapper" if compute_equivalent else "call" if heavy_convs else "light"
    swapper = tmpdir / f"swapper_{kind}{suffix}.onnx"
    if not swapper.exists():
        build_swapper(swapper, fp16=settings.fp16, compute_equivalent=compute_equivalent, heavy_convs=heavy_convs)
    recognizer = tmpdir / "recognizer.onnx"
    if not recognizer.exists():
        build_recognizer(recognizer)
    data = base.model_dump(mode="json")
    data["models"].update(
        detector=settings.detector, swapper=str(swapper), recognizer=str(recognizer),
        providers=settings.providers, threads=settings.threads,
    )
    data["swap"].update(source_face=str(settings.face), source_consent=True, enabled=True)
    if face_selection is not None:
        data["swap"]["face_selection"] = face_selection
    data["enhancer"]["enabled"] = False
    data["camera"]["loop"] = True
    return config_from_dict(data, "vcamd bench")


def run_live(cfg, clip: Path, frames: int, quality: str | None = None, on_engine=None) -> tuple[dict, dict, float]:
    """Build the face pipeline, warm it up, run the live engine on `clip` for `frames` published
    frames; returns (stats JSON, stage series of the run, seconds spent building). `quality` pins
    the watchdog's level (as `vcamd quality` does); `on_engine(engine)` is called before the run."""
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
    if on_engine is not None:
        on_engine(engine)
    stats = engine.run(max_frames=frames)
    return stats, engine.parts.stats.stages_ms, build_s


def run_scenario(name: str, settings: BenchSettings, clip: Path, tmpdir: Path, base) -> dict:
    t0 = time.monotonic()
    cfg = scenario_config(name, settings, tmpdir, base)
    build_s = time.monotonic() - t0
    frames = settings.inswapper_frames if name == "inswapper" else settings.frames
    stats, stages, warm_s = run_live(cfg, clip, frames, settings.quality)
    return summarise(stats, stages, settings, build_s + warm_s)


def run_startup(settings: BenchSettings, clip: Path, tmpdir: Path, base) -> dict:
    """`vcamd run` in a subprocess, as a user starts it, with the compute-equivalent inswapper
    stand-in (built once into `tmpdir`): its stats' `startup_ms` (from the process start)."""
    cfg = scenario_config("startup", settings, tmpdir, base)
    first, following = (run_vcamd(cfg, settings, clip, tmpdir, "startup") for _ in ("first", "next"))
    return {"startup_ms": following["startup_ms"], "first_start_ms": first["startup_ms"], "threads": settings.threads,
            "swapper_mb": round(Path(cfg.models.swapper).stat().st_size / 1e6),
            "command": following["command"], "stats": following, "first_start_stats": first}


def run_vcamd(cfg, settings: BenchSettings, clip: Path, tmpdir: Path, name: str) -> dict:
    """`vcamd run` with `cfg` on `clip` (a file camera, looped), null sink, `settings.frames`
    frames, as a user starts it: its stats JSON, with the command under "command"."""
    import subprocess
    import sys

    from vcamd.errors import VcamdError

    config, stats_path = tmpdir / f"{name}.toml", tmpdir / f"{name}.json"
    config.write_text(_toml(cfg.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    command = [sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(clip), "--loop",
               "--sink", "null", "--frames", str(settings.frames), "--stats-json", str(stats_path), "--no-tray"]
    # Its own runtime folder: a daemon already running here does not stop the measurement (and the
    # stand-in's optimised graph is kept in the bench's folder: `_cache_dir`).
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(tmpdir / "runtime")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode as an installed vcamd has it (see the module's doc)
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120 + 2 * settings.frames / settings.fps)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VcamdError(f"bench {name}: vcamd run failed: {last}", fix="run the same `vcamd run` by hand to see why")
    return json.loads(stats_path.read_text(encoding="utf-8")) | {"command": " ".join(command)}


@contextlib.contextmanager
def busy_processes(n: int):
    """N processes that each keep a core busy at normal priority (the call app), for the `with`
    block; yields their pids. Each leads a process group of its own, killed at the end — also when
    the block raises or is interrupted — and waited for, so none outlives the bench. They stay in
    the bench's session: with Linux's autogroup on, a process of another session (`setsid`) would
    be weighed as a group of its own against vcamd's, and vcamd's nice values would never meet
    it (a desktop's call app may be either)."""
    import signal
    import subprocess
    import sys

    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY_CODE], process_group=0,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()


def run_call(settings: BenchSettings, clip: Path, tmpdir: Path, base) -> dict:
    """`settings.rounds` runs of `vcamd run` with the call's swapper; with `settings.load`, each
    followed by one under that many busy processes (interleaved: the machine's own drift falls on
    both). Each run: `call_row` of its stats, with /proc/loadavg before and after."""
    cfg = scenario_config("call", settings, tmpdir, base)
    runs: list[dict] = []
    pids: list[int] = []
    for i in range(settings.rounds):
        for load in (0, settings.load) if settings.load else (0,):
            before = _loadavg()
            with busy_processes(load) as busy:
                pids += busy
                stats = run_vcamd(cfg, settings, clip, tmpdir, "call")
            runs.append(call_row(stats, settings) | {"round": i + 1, "load": load, "loadavg": [before, _loadavg()]})
    return {"runs": runs, "load_pids": pids, "threads": settings.threads, "swap_convs": CALL_SWAP_CONVS,
            "command": runs[0]["command"] if runs else None}


def call_row(stats: dict, settings: BenchSettings) -> dict:
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
        "levels": {k: v for k, v in stats["degradation"]["level_share"].items() if v},
        "transitions": [f"{t['from']}→{t['to']} ({t['reason']})" for t in stats["degradation"]["transitions"]],
        "command": stats["command"],
    }


def _loadavg() -> str:
    """The 1, 5 and 15 minute load averages (Linux), to read a figure by what the machine did."""
    try:
        return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])
    except OSError:
        return "n/a"


def _toml(data: dict) -> str:
    """A config dump (sections of scalars and lists of scalars) as TOML; JSON's string escapes are TOML's."""
    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    return "\n".join(f"[{section}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in items.items()) for section, items in data.items())


def summarise(stats: dict, stages: dict, settings: BenchSettings, setup_s: float) -> dict:
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
        "detect_ms_p50": stats["stages_ms"].get("detect", {}).get("p50", 0.0),
        "levels": {k: v for k, v in stats["degradation"]["level_share"].items() if v},
        "transitions": len(stats["degradation"]["transitions"]),
        "min_level": worst(Level[k] for k, v in stats["degradation"]["level_share"].items() if v).name,
        "setup_s": round(setup_s, 1),
        "stats": stats,
    }


def run_groups(settings: BenchSettings, tmpdir: Path, base) -> dict:
    """The group photo as a still 720p (--resolution) camera, every face swapped."""
    from vcamd.images import read_image

    assert settings.group_photo is not None
    photo = read_image(settings.group_photo, "group photo")
    clip = still_clip(photo, settings, tmpdir, (settings.width, settings.height))
    cfg = scenario_config("groups", settings, tmpdir, base, face_selection="all")
    found: list[int] = []

    def count_faces(engine) -> None:
        found.append(len(engine.parts.faces.detect(_first_frame(clip), cfg.detection.size)))

    stats, stages, setup_s = run_live(cfg, clip, settings.frames, settings.quality, on_engine=count_faces)
    summary = summarise(stats, stages, settings, setup_s)
    frames = stats["frames"]
    published = max(1, frames["published"])
    summary["faces_found"] = found[0] if found else None
    summary["every_face_share"] = round((frames["swapped"] + frames["held"]) / published, 3)
    per_face = stats.get("faces")
    if isinstance(per_face, dict) and {"swapped", "held", "obscured"} <= set(per_face):
        total = sum(per_face[k] for k in ("swapped", "held", "obscured")) or 1
        summary["face_share"] = round((per_face["swapped"] + per_face["held"]) / total, 3)
    else:
        summary["face_share"] = None  # needs the per-face counts faces.{swapped,held,obscured}
    summary["full_quality_share"] = stats["degradation"]["level_share"].get(BEST.name, 0.0)
    return summary


def run_resolution(settings: BenchSettings, image, tmpdir: Path, base) -> dict:
    """The light scenario at 480p and 1080p: how CPU-ms per frame grows with the pixels, in
    `settings.rounds` interleaved pairs (see `median_pair`)."""
    quality = settings.quality or BEST.name
    clips = {label: sliding_clip(image, settings, tmpdir, RESOLUTIONS[label]) for label in ("480p", "1080p")}
    cfg = scenario_config("light", settings, tmpdir, base)
    pairs: list[dict] = []
    for _ in range(settings.rounds):
        runs: dict[str, dict] = {}
        for label, clip in clips.items():
            stats, stages, setup_s = run_live(cfg, clip, settings.frames, quality)
            runs[label] = summarise(stats, stages, settings, setup_s)
        pairs.append(resolution_pair(quality, runs))
    return median_pair(pairs)


def median_pair(pairs: list[dict]) -> dict:
    """The pair whose 1080p ÷ 480p ratio is the median (the lower middle one of an even count), with
    every pair's ratio under "round_ratios" in the order run. A pair, not a median of each figure:
    its two CPU figures, its camera share and its ratio stay one measurement."""
    ranked = sorted(pairs, key=lambda pair: pair["cpu_ratio"] if pair["cpu_ratio"] is not None else float("inf"))
    return ranked[(len(ranked) - 1) // 2] | {"round_ratios": [pair["cpu_ratio"] for pair in pairs]}


def resolution_pair(quality: str, runs: dict[str, dict]) -> dict:
    """One 480p run and one 1080p run (their summaries by label) as the scenario reports them."""
    low, high = runs["480p"]["cpu_ms_per_frame"], runs["1080p"]["cpu_ms_per_frame"]
    # The camera's share — reading and decoding its frames, per pixel whoever reads the camera —
    # apart from the rest, which is vcamd's own work: what grows with the pixels, counted.
    camera_low, camera_high = runs["480p"]["camera_cpu_ms_per_frame"], runs["1080p"]["camera_cpu_ms_per_frame"]
    own_low, own_high = low - camera_low, high - camera_high
    return {
        "quality": quality,
        "cpu_ms_480p": low,
        "cpu_ms_1080p": high,
        "cpu_ratio": round(high / low, 3) if low > 0 else None,
        "camera_cpu_ms_480p": camera_low,
        "camera_cpu_ms_1080p": camera_high,
        "own_cpu_ratio": round(own_high / own_low, 3) if own_low > 0 else None,
        "runs": runs,
    }


def _first_frame(clip: Path):
    import cv2

    from vcamd.errors import VcamdError

    cap = cv2.VideoCapture(str(clip))
    ok, frame = cap.read()
    cap.release()
    if not ok:
        raise VcamdError(f"cannot read the bench clip {clip}")
    return frame


def _warm_up(faces, cfg, clip: Path) -> None:
    """Create every session and run each model once, so the measured run starts warm."""
    from vcamd.errors import VcamdError

    frame = _first_frame(clip)
    found = faces.detect(frame, cfg.detection.size)
    if not found:
        raise VcamdError("the detector finds no face in the bench clip", fix="use --face with a clear, frontal face photo")
    faces.detect(frame[: cfg.detection.track_size * 2, : cfg.detection.track_size * 2], cfg.detection.track_size)
    targets = faces.select(found, frame)
    for swapped, face in zip(faces.swap_faces(frame, targets), targets):
        faces.composite(frame, swapped, face)  # builds the blend masks once
    from vcamd.badge import draw_badge

    draw_badge(frame, cfg.disclosure.text, cfg.disclosure.corner)


def format_table(results: dict[str, dict], settings: BenchSettings) -> str:
    """The live scenarios (light, inswapper) as one table, a column each; then a row per target of
    the groups and resolution scenarios: figure, target, ratio."""
    parts: list[str] = []
    live = {k: v for k, v in results.items() if k in ("light", "inswapper")}
    if live:
        parts.append(format_live_table(live, settings))
    targets = target_rows(results, settings)
    if targets:
        parts.append(format_target_rows(targets, settings))
    if (call := results.get("call")) is not None:
        parts.append(format_call_table(call, settings))
    if (st := results.get("startup")) is not None:
        threads = st.get("threads", settings.threads)
        parts.append(
            f"startup: ONNX Runtime threads {threads}{' (all cores)' if threads == 0 else ''} (--threads; a user's default "
            f"config has [models] threads = 0, all cores); `vcamd run` started twice: the first start optimises the "
            f"swapper and keeps its graph, the next start loads it; bytecode written and read as an installed vcamd has it"
        )
    return "\n\n".join(parts)


@dataclass(frozen=True)
class TargetRow:
    """One target of a scenario: what was measured, the limit, figure / limit, and whether it is met."""

    scenario: str
    measure: str
    figure: str
    target: str
    ratio: float | None  # figure / target (≤ 1 is met for an upper limit, ≥ 1 for a lower one)
    met: bool | None  # None: not measurable with this engine (see figure)


def _upper(scenario: str, measure: str, value: float, limit: float, unit: str = "") -> TargetRow:
    return TargetRow(scenario, measure, f"{value:.1f}{unit}", f"≤ {limit:.1f}{unit}", round(value / limit, 2), value <= limit)


def _lower_share(scenario: str, measure: str, value: float | None, limit: float, missing: str = "") -> TargetRow:
    if value is None:
        return TargetRow(scenario, measure, f"n/a ({missing})", f"≥ {100 * limit:.0f} %", None, None)
    return TargetRow(scenario, measure, f"{100 * value:.1f} %", f"≥ {100 * limit:.0f} %", round(value / limit, 2), value >= limit)


def target_rows(results: dict[str, dict], settings: BenchSettings) -> list[TargetRow]:
    rows: list[TargetRow] = []
    if (light := results.get("light")) is not None:
        full = light["levels"].get(BEST.name, 0.0)
        cpu = light["cpu_ms_per_frame"]
        # Below full quality the loop does less work per frame: the figure is only comparable at full.
        note = "" if full >= 0.999 else f" (watchdog at full {100 * full:.0f} %: use --quality full)"
        rows.append(TargetRow("light", f"CPU-ms/frame, one face, {settings.height}p", f"{cpu:.1f}{note}",
                              f"≤ {TARGET_ONE_FACE_CPU_MS:.0f}", round(cpu / TARGET_ONE_FACE_CPU_MS, 2),
                              cpu <= TARGET_ONE_FACE_CPU_MS if not note else None))
    if (g := results.get("groups")) is not None:
        limit = TARGET_P99_BUDGET_MS + 1000.0 / settings.fps
        rows.append(_upper("groups", "capture→publish p99", g["latency_ms"]["p99"], limit, " ms"))
        ratio = g["fps_ratio"]
        rows.append(TargetRow("groups", "published / camera fps", f"{ratio:.2f}×", f"≥ {TARGET_FPS_RATIO:.2f}×",
                              round(ratio / TARGET_FPS_RATIO, 2), ratio >= TARGET_FPS_RATIO))
        rows.append(_lower_share("groups", "time at full quality", g["full_quality_share"], TARGET_FULL_QUALITY))
        rows.append(_lower_share("groups", "frames with every face swapped or held", g["every_face_share"], TARGET_EVERY_FACE))
        rows.append(_lower_share("groups", "faces swapped or held (per face)", g["face_share"], TARGET_EVERY_FACE,
                                 "needs faces.{swapped,held,obscured} in the stats JSON"))
    if (st := results.get("startup")) is not None:
        starts = [("", st["startup_ms"])]
        if st.get("first_start_ms") is not None:
            starts = [(" (next start)", st["startup_ms"]), (" (first start)", st["first_start_ms"])]
        for which, startup_ms in starts:
            for measure, key, limit in (("first frame", "first_frame", TARGET_FIRST_FRAME_MS), ("first swap", "first_swap", TARGET_FIRST_SWAP_MS)):
                value, label = startup_ms[key], f"{measure}{which}, ms from process start"
                if value is None:
                    rows.append(TargetRow("startup", label, "n/a (never)", f"≤ {limit:.0f} ms", None, False))
                else:
                    rows.append(_upper("startup", label, value, limit, " ms"))
    if (r := results.get("resolution")) is not None:
        ratio = r["cpu_ratio"]
        rounds = r.get("round_ratios") or []
        of_rounds = f", median of {len(rounds)} pairs: " + ", ".join("n/a" if x is None else f"{x:.2f}" for x in rounds) if len(rounds) > 1 else ""
        rows.append(TargetRow(
            "resolution", f"CPU-ms/frame 1080p ÷ 480p ({r['quality']}{of_rounds})",
            f"{r['cpu_ms_1080p']:.1f} ÷ {r['cpu_ms_480p']:.1f} = {ratio:.2f}×" if ratio else "n/a",
            f"≤ {TARGET_RESOLUTION_RATIO:.1f}×",
            round(ratio / TARGET_RESOLUTION_RATIO, 2) if ratio else None,
            ratio <= TARGET_RESOLUTION_RATIO if ratio else None,
        ))
        if (own := r.get("own_cpu_ratio")) is not None:
            # Not the target (that is the whole process): where the growth is, counted.
            rows.append(TargetRow(
                "resolution", f"  of which the camera's read + decode: {r['camera_cpu_ms_480p']:.1f} → {r['camera_cpu_ms_1080p']:.1f};"
                " the rest 1080p ÷ 480p",
                f"{r['cpu_ms_1080p'] - r['camera_cpu_ms_1080p']:.1f} ÷ {r['cpu_ms_480p'] - r['camera_cpu_ms_480p']:.1f} = {own:.2f}×",
                "(count)", None, None,
            ))
    return rows


def format_target_rows(rows: list[TargetRow], settings: BenchSettings) -> str:
    head = ["scenario", "measure", "figure", "target", "ratio", ""]
    body = [
        [r.scenario, r.measure, r.figure, r.target, "-" if r.ratio is None else f"{r.ratio:.2f}",
         "n/a" if r.met is None else ("met" if r.met else "NOT met")]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt_line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    title = (
        f"vcamd bench targets — @ {settings.fps:g} fps, {settings.frames} frames per run, "
        f"detector {Path(settings.detector).name}, providers {','.join(settings.providers)}"
    )
    return "\n".join([title, fmt_line(head), fmt_line(["-" * w for w in widths]), *(fmt_line(b) for b in body)])


def format_live_table(results: dict[str, dict], settings: BenchSettings) -> str:
    """One table: a row per measure, a column per scenario, and the target."""
    names = list(results)
    interval = 1000.0 / settings.fps
    rows: list[tuple[str, list[str], str]] = []

    def row(label: str, fmt, target: str = "") -> None:
        rows.append((label, [fmt(results[n]) for n in names], target))

    row("source fps", lambda r: f"{r['source_fps']:.1f}")
    row("published fps", lambda r: f"{r['published_fps']:.1f} ({r['fps_ratio']:.2f}×)", f"≥ {TARGET_FPS_RATIO:.2f}× source")
    row("capture→publish p50 ms", lambda r: f"{r['latency_ms']['p50']:.1f}")
    row("capture→publish p95 ms", lambda r: f"{r['latency_ms']['p95']:.1f}")
    row("capture→publish p99 ms", lambda r: f"{r['latency_ms']['p99']:.1f}", f"≤ {TARGET_P99_BUDGET_MS + interval:.1f}")
    row("overhead ms/frame", lambda r: f"{r['overhead_ms_per_frame']:.2f}", f"≤ {TARGET_OVERHEAD_MS:.0f}")
    row("CPU-ms/frame", lambda r: f"{r['cpu_ms_per_frame']:.1f}", f"≤ {TARGET_CPU_MS:.0f} (light)")
    row("frames swapped", lambda r: f"{100 * r['swapped_share']:.1f} %", f"≥ {100 * TARGET_SWAPPED:.0f} % (light)")
    row("swap model p50 ms", lambda r: f"{r['swap_model_ms_p50']:.1f}")
    row("detect/track p50 ms", lambda r: f"{r['detect_ms_p50']:.1f}")
    row("watchdog levels", lambda r: ", ".join(f"{k} {v:.0%}" for k, v in r["levels"].items()) or "-")
    row("providers", lambda r: ", ".join(sorted(set(r["stats"]["providers"].values()))) or "-")

    head = ["measure", *names, "target"]
    body = [[label, *cells, target] for label, cells, target in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt_line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    title = (
        f"vcamd bench — {settings.width}×{settings.height} @ {settings.fps:g} fps, {settings.frames} frames "
        f"({settings.inswapper_frames} for inswapper), "
        f"detector {Path(settings.detector).name}, providers {','.join(settings.providers)}"
        f"{', fp16 swapper' if settings.fp16 else ''}"
        f"{f', watchdog pinned at {settings.quality}' if settings.quality else ''}"
    )
    lines = [title, fmt_line(head), fmt_line(["-" * w for w in widths]), *(fmt_line(b) for b in body)]
    return "\n".join(lines)


def format_call_table(call: dict, settings: BenchSettings) -> str:
    """The call runs side by side, in the order run (quiet, loaded, quiet, …): a row per measure,
    the target of the loaded runs beside it."""
    runs = call["runs"]
    interval = 1000.0 / settings.fps

    def ms_s(value: float | None) -> str:
        return "never" if value is None else f"{value / 1000.0:.2f} s"

    def share(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.0f} %"

    rows = [
        ("frames swapped, after the first swap", lambda r: f"{share(r['swapped_after_first_swap'])} ({r['swapped_frames']}/{r['published']})",
         f"≥ {100 * TARGET_SWAPPED_AFTER_FIRST:.0f} %"),
        ("swap age p50 / p95", lambda r: f"{r['swap_age_ms']['p50'] / 1000:.2f} / {r['swap_age_ms']['p95'] / 1000:.2f} s",
         f"p95 ≤ {TARGET_SWAP_AGE_P95_MS / 1000:.1f} s"),
        ("first frame / first swap", lambda r: f"{ms_s(r['first_frame_ms'])} / {ms_s(r['first_swap_ms'])}",
         f"≤ {TARGET_CALL_FIRST_FRAME_MS / 1000:.0f} / {TARGET_CALL_FIRST_SWAP_MS / 1000:.0f} s"),
        ("published fps / p99", lambda r: f"{r['published_fps']:.1f} ({r['fps_ratio']:.2f}×) / {r['latency_p99_ms']:.0f} ms",
         f"≥ {TARGET_FPS_RATIO:.2f}× / ≤ {TARGET_P99_BUDGET_MS + interval:.0f} ms"),
        ("swap model p50", lambda r: f"{r['swap_model_ms_p50']:.0f} ms", ""),
        ("watchdog levels", lambda r: ", ".join(f"{k} {v:.0%}" for k, v in r["levels"].items()) or "-", ""),
        ("load average before → after", lambda r: f"{r['loadavg'][0].split()[0]} → {r['loadavg'][1].split()[0]}", ""),
    ]
    head = ["measure", *(f"{_call_label(r['load'])} #{r['round']}" for r in runs), "target (loaded)"]
    body = [[label, *(fmt(r) for r in runs), target] for label, fmt, target in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    fmt_line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    threads = call.get("threads", settings.threads)
    title = (
        f"vcamd bench call — `vcamd run` at {settings.width}×{settings.height} @ {settings.fps:g} fps, {settings.frames} frames a run, "
        f"swapper: light + {call.get('swap_convs', CALL_SWAP_CONVS)} heavy convolutions, ONNX Runtime threads {threads}"
        f"{' (all cores)' if threads == 0 else ''}, busy processes at normal priority: {settings.load}"
    )
    return "\n".join([title, fmt_line(head), fmt_line(["-" * w for w in widths]), *(fmt_line(b) for b in body)])


def _call_label(load: int) -> str:
    return "quiet" if load == 0 else f"{load} busy"


def _settings_dict(s: BenchSettings) -> dict:
    return {
        "face": str(s.face), "detector": s.detector, "width": s.width, "height": s.height, "fps": s.fps,
        "frames": s.frames, "inswapper_frames": s.inswapper_frames, "providers": s.providers, "threads": s.threads, "fp16": s.fp16,
        "quality": s.quality, "group_photo": str(s.group_photo) if s.group_photo else None, "rounds": s.rounds,
        "load": s.load,
    }
