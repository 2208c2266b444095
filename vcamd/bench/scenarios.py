"""The `vcamd bench` scenarios: each runs the real live engine (or `vcamd run` as a user starts it)
on a generated clip played like a camera and returns the figures `report` prints. What each
scenario measures: `vcamd.commands.bench`."""


from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from vcamd.bench.report import TARGET_P99_BUDGET_MS
from vcamd.bench.settings import BUSY_CODE, CROWD_RESOLUTION, RESOLUTIONS, BenchSettings
from vcamd.common.errors import VcamdError
from vcamd.common.quality import BEST, Level, worst

log = logging.getLogger(__name__)


class RunFailed(VcamdError):
    """A scenario's `vcamd run` failed: the error says the exact command to run by hand, and the
    bench's folder (its config, clip and stand-in models) is kept for it."""


def run_benchmark(settings: BenchSettings, scenarios: list[str], base=None) -> dict[str, dict]:
    """Run each scenario; returns scenario → summary (and the full stats JSON under "stats")."""
    from vcamd.config.schema import Config
    from vcamd.files.images import read_image

    base = base or Config()
    image = read_image(settings.face, "bench face")
    out: dict[str, dict] = {}
    with _work_folder(settings.workdir) as tmpdir, _cache_dir(tmpdir / "optimized"):
        if settings.swappers or settings.enhancers:
            from vcamd.bench.modeltimes import as_dict, time_models

            log.info("bench: timing the models' compute-equivalent stand-ins")
            out["models"] = {"rows": [as_dict(row) for row in time_models(settings, tmpdir, list(settings.swappers), list(settings.enhancers))]}
        for name in scenarios:
            log.info("bench: scenario %s", name)
            if name == "groups":
                out[name] = run_groups(settings, tmpdir, base)
            elif name == "crowd":
                out[name] = run_crowd(settings, tmpdir, base)
            elif name == "resolution":
                out[name] = run_resolution(settings, image, tmpdir, base)
            elif name == "startup":
                out.update(run_startup(settings, sliding_clip(image, settings, tmpdir, (settings.width, settings.height)), tmpdir, base))
            elif name == "call":
                out[name] = run_call(settings, sliding_clip(image, settings, tmpdir, (settings.width, settings.height)), tmpdir, base)
            elif name == "inswapper":
                clip = sliding_clip(image, settings, tmpdir, (settings.width, settings.height))
                out.update(run_per_precision(name, settings, clip, tmpdir, base))
            elif name == "remote":
                from vcamd.bench.remote import run_remote

                out[name] = run_remote(settings, image, sliding_clip(image, settings, tmpdir, (settings.width, settings.height)), tmpdir, base)
            else:
                clip = sliding_clip(image, settings, tmpdir, (settings.width, settings.height))
                out[name] = run_scenario(name, settings, clip, tmpdir, base)
    return out


@contextlib.contextmanager
def _work_folder(kept: Path | None):
    """Where a run builds its stand-ins, clips, int8 copies and optimised graphs: `kept` (`--workdir`:
    built once, reused by later runs — the 554 MB stand-in and its int8 copy take a minute or two),
    else the bench's temporary folder (`_bench_folder`)."""
    if kept is not None:
        from vcamd.files.private_files import private_dir

        yield private_dir(kept)
        return
    with _bench_folder() as folder:
        yield folder


@contextlib.contextmanager
def _bench_folder():
    """The bench's temporary folder (clips, configs, stand-in models), removed at the end — unless a
    scenario's `vcamd run` failed: its error names the command to run by hand, which needs them."""
    folder = Path(tempfile.mkdtemp(prefix="vcamd-bench-"))
    try:
        yield folder
    except RunFailed:
        raise
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _cache_dir(folder: Path):
    """The optimised graphs of the stand-in swappers (`vcamd.inference.ortcache`) go to the bench's temporary
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


def still_clip(image, settings: BenchSettings, tmpdir: Path, size: tuple[int, int], name: str = "still") -> Path:
    """A still camera: `image` fitted into a `size` frame (grey bars), the same frame for 4 s, MJPG.
    (MJPG's frames of one picture decode to the same pixels: a still camera without sensor noise.)"""
    import cv2

    from vcamd.bench.clips import fitted_frame
    from vcamd.common.errors import VcamdError

    width, height = size
    frame = fitted_frame(image, size)
    path = tmpdir / f"{name}_{width}x{height}.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), settings.fps, (width, height))
    if not writer.isOpened():
        raise VcamdError(f"cannot write the clip {path}", fix="OpenCV needs its MJPG encoder (opencv-python has it)")
    try:
        for _ in range(int(4 * settings.fps)):
            writer.write(frame)
    finally:
        writer.release()
    return path


def scenario_config(name: str, settings: BenchSettings, tmpdir: Path, base, *, face_selection: str | None = None,
                    swapper: Path | None = None, precision: str = "float"):
    """The config a scenario runs with: the bench's detector and providers, stand-in swapper
    (light, compute-equivalent for `inswapper` and `startup`, or the one given) and recognizer
    built in `tmpdir`, enhancer off, the swapper at `precision` ("int8": its int8 copy, once
    `prepare_int8` built it)."""
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


def run_scenario(name: str, settings: BenchSettings, clip: Path, tmpdir: Path, base, precision: str = "float") -> dict:
    t0 = time.monotonic()
    cfg = scenario_config(name, settings, tmpdir, base, precision=precision)
    build_s = time.monotonic() - t0
    frames = settings.inswapper_frames if name == "inswapper" else settings.frames
    stats, stages, warm_s = run_live(cfg, clip, frames, settings.quality)
    return summarise(stats, stages, settings, build_s + warm_s)


def precision_key(scenario: str, precision: str) -> str:
    """Where a scenario's results for one precision go: float under the scenario's own name (as
    before precisions), int8 beside it ("inswapper_int8")."""
    return scenario if precision == "float" else f"{scenario}_{precision}"


def prepare_int8(settings: BenchSettings, swapper: Path, clip: Path, tmpdir: Path, base) -> dict:
    """Build and check the int8 copy of a bench swapper before its int8 runs, as `vcamd models
    quantize` does: calibrated on the bench's face photo and frames of its clip (the frames a
    camera shows), checked against float by the bench's recogniser; kept in the bench's cache
    folder, where the int8 runs find it. Returns what the printout says of it."""
    import cv2

    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.inference.precision import int8_units, needs_reduced_range
    from vcamd.inference.runtime import Sessions
    from vcamd.models.quantize import CALIBRATION_FACES, build_checked, faces_from_images

    cfg = scenario_config("int8", settings, tmpdir, base, swapper=swapper)
    sessions = Sessions(["cpu"], settings.threads)
    detector = FaceDetector(cfg.models.detector, sessions, cfg.detection.size, cfg.detection.threshold)
    recognizer = Recognizer(cfg.models.recognizer, sessions)
    frames = []
    capture = cv2.VideoCapture(str(clip))
    while len(frames) < CALIBRATION_FACES - 1:
        ok, frame = capture.read()
        if not ok:
            break
        if int(capture.get(cv2.CAP_PROP_POS_FRAMES)) % int(settings.fps // 2 or 1) == 0:  # two a second: different moments
            frames.append(frame)
    capture.release()
    from vcamd.files.images import read_image
    from vcamd.models.quantize import swapper_spec

    spec = swapper_spec(swapper)
    faces = faces_from_images([read_image(settings.face, "bench face"), *frames], detector, recognizer, spec.crop, limit=CALIBRATION_FACES)
    units = int8_units()
    built = build_checked(swapper, recognizer.path, faces, providers=["cpu"], threads=settings.threads, reduce_range=needs_reduced_range(units))
    log.info("bench: the int8 copy of %s: %s", swapper.name, built.kept.verdict.summary)
    best = next((a for a in built.attempts if a.report.passed), built.attempts[-1] if built.attempts else None)
    return {"model": swapper.name, "passed": built.passed, "summary": built.kept.verdict.summary, "build_s": round(built.seconds, 1),
            "faces": len(faces.crops), "units": units.describe(), "recipe": best.recipe.name if best else None,
            "float_ms": round(best.float_ms, 1) if best else None, "int8_ms": round(best.int8_ms, 1) if best else None}


def run_per_precision(name: str, settings: BenchSettings, clip: Path, tmpdir: Path, base) -> dict[str, dict]:
    """The live scenario `name` once per `settings.precisions`, float then int8 (the int8 copy built
    and checked first: `prepare_int8`): results by `precision_key`, with the copy's check under
    "int8_copy" of the int8 one."""
    out: dict[str, dict] = {}
    for precision in settings.precisions:
        check = prepare_int8(settings, Path(scenario_config(name, settings, tmpdir, base).models.swapper), clip, tmpdir, base) \
            if precision == "int8" else None
        out[precision_key(name, precision)] = run_scenario(name, settings, clip, tmpdir, base, precision) | ({"int8_copy": check} if check else {})
    return out


def run_startup(settings: BenchSettings, clip: Path, tmpdir: Path, base) -> dict[str, dict]:
    """`vcamd run` in a subprocess, as a user starts it, with the compute-equivalent inswapper
    stand-in (built once into `tmpdir`): its stats' `startup_ms` (from the process start). Per
    precision, interleaved (float first start, int8 first start, float next start, int8 next
    start); the int8 copy is built before (`prepare_int8`), so its first start is a first start
    with the copy kept. Results by `precision_key`."""
    cfgs = {p: scenario_config("startup", settings, tmpdir, base, precision=p) for p in settings.precisions}
    checks = {p: prepare_int8(settings, Path(cfg.models.swapper), clip, tmpdir, base) for p, cfg in cfgs.items() if p == "int8"}
    runs: dict[str, list[dict]] = {p: [] for p in cfgs}
    for _ in ("first", "next"):
        for precision, cfg in cfgs.items():
            runs[precision].append(run_vcamd(cfg, settings, clip, tmpdir, f"startup_{precision}"))
    out = {}
    for precision, (first, following) in runs.items():
        out[precision_key("startup", precision)] = {
            "startup_ms": following["startup_ms"], "first_start_ms": first["startup_ms"], "threads": settings.threads,
            "swapper_mb": round(Path(cfgs[precision].models.swapper).stat().st_size / 1e6), "precision": precision,
            "ran": swapper_ran(following),
            "command": following["command"], "stats": following, "first_start_stats": first,
        } | ({"int8_copy": checks[precision]} if precision in checks else {})
    return out


def run_vcamd(cfg, settings: BenchSettings, clip: Path, tmpdir: Path, name: str, prefix: tuple[str, ...] = ()) -> dict:
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
    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    not_loaded = [line for line in proc.stderr.splitlines() if "did not load" in line]
    if stats["startup_ms"].get("first_swap") is None and not_loaded:
        # `vcamd run` keeps running (covered) when its models fail to load: no swap to time.
        raise RunFailed(f"bench {name}: vcamd run swapped nothing: {not_loaded[-1]}", fix=fix)
    return stats | {"command": " ".join(command)}


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
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        for p in procs:  # each is in its loop once it wrote its byte; EOF instead: it never got there
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


def run_call(settings: BenchSettings, clip: Path, tmpdir: Path, base) -> dict:
    """`settings.rounds` runs of `vcamd run` with the call's swapper; with `settings.load`, each
    followed by one under that many busy processes (interleaved: the machine's own drift falls on
    both). Each run: `call_row` of its stats, with /proc/loadavg before and after. The swapper
    costs `settings.swap_ms` a face here, measured before the first run (`callswapper`)."""
    from vcamd.bench.callswapper import build_call_swapper

    swapper = build_call_swapper(tmpdir, settings.swap_ms, settings.providers, settings.threads, fp16=settings.fp16)
    log.info("bench: the call's swapper: light + %d heavy convolutions, %.0f ms a swap here (asked: %.0f)",
             swapper.convs, swapper.measured_ms, swapper.target_ms)
    cfgs = {p: scenario_config("call", settings, tmpdir, base, swapper=swapper.path, precision=p) for p in settings.precisions}
    check = prepare_int8(settings, swapper.path, clip, tmpdir, base) if "int8" in cfgs else None
    runs: list[dict] = []
    pids: list[int] = []
    for i in range(settings.rounds):
        for load in (0, settings.load) if settings.load else (0,):
            for precision, cfg in cfgs.items():
                before = _loadavg()
                with busy_processes(load) as busy:
                    pids += busy
                    stats = run_vcamd(cfg, settings, clip, tmpdir, f"call_{precision}")
                runs.append(call_row(stats, settings) | {"round": i + 1, "load": load, "loadavg": [before, _loadavg()], "precision": precision})
    return {"runs": runs, "load_pids": pids, "threads": settings.threads, "swap_convs": swapper.convs,
            "swap_ms": {"asked": swapper.target_ms, "measured": round(swapper.measured_ms, 1)},
            "command": runs[0]["command"] if runs else None} | ({"int8_copy": check} if check else {})


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
        "ran": swapper_ran(stats),
        "levels": {k: v for k, v in stats["degradation"]["level_share"].items() if v},
        "transitions": [_transition_text(t) for t in stats["degradation"]["transitions"]],
        "command": stats["command"],
    }


def swapper_ran(stats: dict) -> str:
    """What the swapper ran at by the end of a run (its stats JSON): "float", "int8", or "not
    loaded" (the run ended before the models were in)."""
    return (stats.get("precision") or {}).get("swapper") or "not loaded"


def _transition_text(t: dict) -> str:
    """One watchdog transition of the stats JSON: a rung change, or the faces swapped per round."""
    faces = t.get("faces_per_round")
    change = f"faces per round {faces['from']}→{faces['to']}" if faces else f"{t['from']}→{t['to']}"
    return f"{change} ({t['reason']})"


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
        "swap_age_ms": stats.get("swap_age_ms", {}),
        "ran": swapper_ran(stats),
        "detect_ms_p50": stats["stages_ms"].get("detect", {}).get("p50", 0.0),
        "levels": {k: v for k, v in stats["degradation"]["level_share"].items() if v},
        "transitions": len(stats["degradation"]["transitions"]),
        "min_level": worst(Level[k] for k, v in stats["degradation"]["level_share"].items() if v).name,
        "setup_s": round(setup_s, 1),
        "stats": stats,
    }


def run_groups(settings: BenchSettings, tmpdir: Path, base) -> dict:
    """The group photo as a still 720p (--resolution) camera, every face swapped; without one,
    GROUP_FACES copies of the --face photo tiled."""
    from vcamd.bench.clips import tiled_group
    from vcamd.bench.settings import GROUP_FACES
    from vcamd.files.images import read_image

    size = (settings.width, settings.height)
    if settings.group_photo is not None:
        photo = read_image(settings.group_photo, "group photo")
        return run_still_faces(settings, tmpdir, base, photo, str(settings.group_photo), size, "still")
    photo = tiled_group(read_image(settings.face, "bench face"), GROUP_FACES, size)
    return run_still_faces(settings, tmpdir, base, photo, f"{GROUP_FACES} copies of {settings.face.name}", size, "still")


def run_crowd(settings: BenchSettings, tmpdir: Path, base) -> dict:
    """The crowd photo (100+ faces) as a still 1080p camera, every face swapped."""
    from vcamd.files.images import read_image

    assert settings.crowd_photo is not None
    photo = read_image(settings.crowd_photo, "crowd photo")
    return run_still_faces(settings, tmpdir, base, photo, str(settings.crowd_photo), RESOLUTIONS[CROWD_RESOLUTION], "crowd")


def run_still_faces(settings: BenchSettings, tmpdir: Path, base, photo, group: str, size: tuple[int, int], name: str) -> dict:
    """`photo` (`group` names it) as a still camera of `size`, `face_selection = "all"`, light
    swapper: the summary, the faces the detector finds in the clip's frame, and the shares of
    frames at full quality and with every face swapped or held."""
    clip = still_clip(photo, settings, tmpdir, size, name=name)
    cfg = scenario_config("groups", settings, tmpdir, base, face_selection="all")
    found: list[int] = []

    def count_faces(engine) -> None:
        found.append(len(engine.parts.faces.detect(_first_frame(clip), cfg.detection.size)))

    stats, stages, setup_s = run_live(cfg, clip, settings.frames, settings.quality, on_engine=count_faces)
    summary = summarise(stats, stages, settings, setup_s)
    frames = stats["frames"]
    published = max(1, frames["published"])
    summary["size"] = list(size)
    summary["faces_found"] = found[0] if found else None
    summary["group"] = group
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

    from vcamd.common.errors import VcamdError

    cap = cv2.VideoCapture(str(clip))
    ok, frame = cap.read()
    cap.release()
    if not ok:
        raise VcamdError(f"cannot read the bench clip {clip}")
    return frame


def _warm_up(faces, cfg, clip: Path) -> None:
    """Create every session and run each model once, so the measured run starts warm."""
    from vcamd.common.errors import VcamdError

    frame = _first_frame(clip)
    found = faces.detect(frame, cfg.detection.size)
    if not found:
        raise VcamdError("the detector finds no face in the bench clip", fix="use --face with a clear, frontal face photo")
    faces.detect(frame[: cfg.detection.track_size * 2, : cfg.detection.track_size * 2], cfg.detection.track_size)
    targets = faces.select(found, frame)
    for swapped, face in zip(faces.swap_faces(frame, targets), targets):
        faces.composite(frame, swapped, face)  # builds the blend masks once
    from vcamd.privacy.badge import draw_badge

    draw_badge(frame, cfg.disclosure.text, cfg.disclosure.corner)
