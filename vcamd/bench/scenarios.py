"""The `vcamd bench` scenarios: each runs the real live engine (or `vcamd run` as a user starts it)
on a generated clip played like a camera and returns the figures `report` prints. What each
scenario measures: `vcamd.commands.bench`."""


from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from vcamd.bench.clips import sliding_clip, still_clip
from vcamd.bench.runs import (
    RunFailed,
    busy_processes,
    call_row,
    first_frame,
    loadavg,
    model_ran,
    run_live,
    run_vcamd,
    scenario_config,
    summarise,
)
from vcamd.bench.settings import CROWD_RESOLUTION, RESOLUTIONS, BenchSettings
from vcamd.common.quality import BEST

if TYPE_CHECKING:
    from vcamd.common.types import Frame
    from vcamd.config.schema import Config
    from vcamd.live.engine import LiveEngine

log = logging.getLogger(__name__)


def run_benchmark(settings: BenchSettings, scenarios: list[str], base: Config | None = None) -> dict[str, dict[str, Any]]:
    """Run each scenario; returns scenario → summary (and the full stats JSON under "stats")."""
    from vcamd.config.schema import Config
    from vcamd.files.images import read_image

    base = base or Config()
    image = read_image(settings.face, "bench face")
    out: dict[str, dict[str, Any]] = {}
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
                out[name] = run_scenario(name, settings, clip, tmpdir, base, LIVE_PRECISION)
    return out


@contextlib.contextmanager
def _work_folder(kept: Path | None) -> Iterator[Path]:
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
def _bench_folder() -> Iterator[Path]:
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
def _cache_dir(folder: Path) -> Iterator[None]:
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


def run_scenario(name: str, settings: BenchSettings, clip: Path, tmpdir: Path, base: Config, precision: str = "float") -> dict[str, Any]:
    t0 = time.monotonic()
    cfg = scenario_config(name, settings, tmpdir, base, precision=precision)
    copies = prepare_auto_copies(cfg, settings, clip, tmpdir, base) if precision == LIVE_PRECISION else {}
    build_s = time.monotonic() - t0
    frames = settings.inswapper_frames if name == "inswapper" else settings.frames
    stats, stages, warm_s = run_live(cfg, clip, frames, settings.quality)
    return summarise(stats, stages, settings, build_s + warm_s) | ({"int8_copies": copies} if copies else {})


def precision_key(scenario: str, precision: str) -> str:
    """Where a scenario's results for one precision go: float under the scenario's own name (as
    before precisions), int8 beside it ("inswapper_int8")."""
    return scenario if precision == "float" else f"{scenario}_{precision}"


def prepare_int8(settings: BenchSettings, swapper: Path, clip: Path, tmpdir: Path, base: Config) -> dict[str, Any]:
    """Build and check the int8 copy of a bench swapper before its int8 runs, as `vcamd models
    quantize` does: calibrated on the bench's face photo and frames of its clip (the frames a
    camera shows), checked against float by the bench's recogniser; kept in the bench's cache
    folder, where the int8 runs find it. Returns what the printout says of it."""

    from vcamd.faces.calibration import CALIBRATION_FACES, faces_from_images
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.identity import Recognizer
    from vcamd.inference.precision import int8_units, needs_reduced_range
    from vcamd.inference.runtime import Sessions
    from vcamd.models.quantize import build_checked

    cfg = scenario_config("int8", settings, tmpdir, base, swapper=swapper)
    sessions = Sessions(["cpu"], settings.threads)
    detector = FaceDetector(cfg.models.detector, sessions, cfg.detection.size, cfg.detection.threshold)
    recognizer = Recognizer(cfg.models.recognizer, sessions)
    frames = clip_frames(clip, settings.fps, CALIBRATION_FACES - 1)
    from vcamd.files.images import read_image
    from vcamd.models.int8roles import swapper_spec

    spec = swapper_spec(swapper)
    faces = faces_from_images([read_image(settings.face, "bench face"), *frames], detector, recognizer, spec.crop, limit=CALIBRATION_FACES)
    units = int8_units()
    built = build_checked(swapper, recognizer.path, faces, providers=["cpu"], threads=settings.threads, reduce_range=needs_reduced_range(units))
    log.info("bench: the int8 copy of %s: %s", swapper.name, built.kept.verdict.summary)
    best = next((a for a in built.attempts if a.report.passed), built.attempts[-1] if built.attempts else None)
    return {"model": swapper.name, "passed": built.passed, "summary": built.kept.verdict.summary, "build_s": round(built.seconds, 1),
            "faces": len(faces.crops), "units": units.describe(), "recipe": best.recipe.name if best else None,
            "float_ms": round(best.float_ms, 1) if best else None, "int8_ms": round(best.int8_ms, 1) if best else None}


def clip_frames(clip: Path, fps: float, count: int) -> list[Frame]:
    """Up to `count` frames of `clip`, two a second (different moments, as the daemon keeps them)."""
    import cv2

    frames: list[Frame] = []
    capture = cv2.VideoCapture(str(clip))
    while len(frames) < count:
        ok, frame = capture.read()
        if not ok:
            break
        if int(capture.get(cv2.CAP_PROP_POS_FRAMES)) % int(fps // 2 or 1) == 0:
            frames.append(cast("Frame", frame))
    capture.release()
    return frames


def prepare_detector_int8(cfg: Config, clip: Path, fps: float) -> dict[str, Any]:
    """Build and check the int8 copy of `cfg`'s detector before a run at precision "auto" or "int8",
    as the daemon would have on an earlier start: calibrated and checked on the source photo and
    frames of the clip (letterboxed into the clip's frame shape), at `cfg`'s detection sizes and
    thresholds; kept in the current cache folder, where the run finds it. What the printout says of it."""
    from vcamd.faces.calibration import CALIBRATION_FACES, CalibrationFaces, letterboxed
    from vcamd.files.images import read_image
    from vcamd.inference.precision import int8_units, needs_reduced_range
    from vcamd.models.int8detector import looks_for
    from vcamd.models.quantize import build_checked

    assert cfg.swap.source_face is not None
    frames = clip_frames(clip, fps, CALIBRATION_FACES - 1)
    photo = read_image(cfg.swap.source_face, "bench face")
    images = CalibrationFaces(letterboxed([photo, *frames], frames[0].shape[:2] if frames else photo.shape[:2]), np.zeros(0, np.float32))
    built = build_checked(Path(cfg.models.detector), Path(cfg.models.recognizer), images, role="detector", providers=["cpu"],
                          threads=cfg.models.threads, reduce_range=needs_reduced_range(int8_units()), looks=looks_for(cfg))
    log.info("bench: the int8 copy of %s: %s", Path(cfg.models.detector).name, built.kept.verdict.summary)
    best = next((a for a in built.attempts if a.report.passed), built.attempts[-1] if built.attempts else None)
    return {"model": Path(cfg.models.detector).name, "passed": built.passed, "summary": built.kept.verdict.summary,
            "build_s": round(built.seconds, 1), "images": len(images.crops),
            "float_ms": round(best.float_ms, 1) if best else None, "int8_ms": round(best.int8_ms, 1) if best else None}


LIVE_PRECISION = "auto"
"""What the live rows (light, resolution, groups, crowd) run at: the product's default — each model's
checked int8 copy where the CPU provider runs it on a CPU with int8 units, float elsewhere — with the
copies a first start of the daemon would build made first (`prepare_auto_copies`): what `vcamd run`
costs here from its second start on. (`--precision` sets what inswapper, startup and call run at.)"""


def prepare_auto_copies(cfg: Config, settings: BenchSettings, clip: Path, tmpdir: Path, base: Config) -> dict[str, Any]:
    """The int8 copies a `vcamd run` with `cfg` would build and check at its first start (its
    `role_choice` says `build`: precision "auto" or "int8", a CPU provider, int8 units, no copy kept
    for the model and its looks yet), built now on the run's own camera frames, as that start leaves
    them: the detector's (`prepare_detector_int8`) and the swapper's (`prepare_int8`). What the
    printout says of each copy built, by role."""
    from vcamd.inference.precision import role_choice
    from vcamd.inference.runtime import resolve_providers
    from vcamd.models.int8detector import looks_for

    providers = resolve_providers(list(cfg.models.providers))
    built: dict[str, Any] = {}
    if role_choice("detector", cfg.models.precision, Path(cfg.models.detector), providers, looks=looks_for(cfg)).build:
        built["detector"] = prepare_detector_int8(cfg, clip, settings.fps)
    if role_choice("swapper", cfg.models.precision, Path(cfg.models.swapper), providers).build:
        built["swapper"] = prepare_int8(settings, Path(cfg.models.swapper), clip, tmpdir, base)
    return built


def run_per_precision(name: str, settings: BenchSettings, clip: Path, tmpdir: Path, base: Config) -> dict[str, dict[str, Any]]:
    """The live scenario `name` once per `settings.precisions`, float then int8 (the int8 copy built
    and checked first: `prepare_int8`): results by `precision_key`, with the copy's check under
    "int8_copy" of the int8 one."""
    out: dict[str, dict[str, Any]] = {}
    for precision in settings.precisions:
        check = prepare_int8(settings, Path(scenario_config(name, settings, tmpdir, base).models.swapper), clip, tmpdir, base) \
            if precision == "int8" else None
        out[precision_key(name, precision)] = run_scenario(name, settings, clip, tmpdir, base, precision) | ({"int8_copy": check} if check else {})
    return out


def run_startup(settings: BenchSettings, clip: Path, tmpdir: Path, base: Config) -> dict[str, dict[str, Any]]:
    """`vcamd run` in a subprocess, as a user starts it, with the compute-equivalent inswapper
    stand-in (built once into `tmpdir`): its stats' `startup_ms` (from the process start). Per
    precision, interleaved (float first start, int8 first start, float next start, int8 next
    start); the int8 copy is built before (`prepare_int8`), so its first start is a first start
    with the copy kept. Results by `precision_key`."""
    cfgs = {p: scenario_config("startup", settings, tmpdir, base, precision=p) for p in settings.precisions}
    checks = {p: prepare_int8(settings, Path(cfg.models.swapper), clip, tmpdir, base) for p, cfg in cfgs.items() if p == "int8"}
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in cfgs}
    for _ in ("first", "next"):
        for precision, cfg in cfgs.items():
            runs[precision].append(run_vcamd(cfg, settings, clip, tmpdir, f"startup_{precision}"))
    out = {}
    for precision, (first, following) in runs.items():
        out[precision_key("startup", precision)] = {
            "startup_ms": following["startup_ms"], "first_start_ms": first["startup_ms"], "threads": settings.threads,
            "swapper_mb": round(Path(cfgs[precision].models.swapper).stat().st_size / 1e6), "precision": precision,
            "ran": model_ran(following, "swapper"),
            "command": following["command"], "stats": following, "first_start_stats": first,
        } | ({"int8_copy": checks[precision]} if precision in checks else {})
    return out


def run_call(settings: BenchSettings, clip: Path, tmpdir: Path, base: Config) -> dict[str, Any]:
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
    runs: list[dict[str, Any]] = []
    pids: list[int] = []
    for i in range(settings.rounds):
        for load in (0, settings.load) if settings.load else (0,):
            for precision, cfg in cfgs.items():
                before = loadavg()
                with busy_processes(load) as busy:
                    pids += busy
                    stats = run_vcamd(cfg, settings, clip, tmpdir, f"call_{precision}")
                runs.append(call_row(stats, settings) | {"round": i + 1, "load": load, "loadavg": [before, loadavg()], "precision": precision})
    return {"runs": runs, "load_pids": pids, "threads": settings.threads, "swap_convs": swapper.convs,
            "swap_ms": {"asked": swapper.target_ms, "measured": round(swapper.measured_ms, 1)},
            "command": runs[0]["command"] if runs else None} | ({"int8_copy": check} if check else {})


def run_groups(settings: BenchSettings, tmpdir: Path, base: Config) -> dict[str, Any]:
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


def run_crowd(settings: BenchSettings, tmpdir: Path, base: Config) -> dict[str, Any]:
    """The crowd photo (100+ faces) as a still 1080p camera, every face swapped."""
    from vcamd.files.images import read_image

    assert settings.crowd_photo is not None
    photo = read_image(settings.crowd_photo, "crowd photo")
    return run_still_faces(settings, tmpdir, base, photo, str(settings.crowd_photo), RESOLUTIONS[CROWD_RESOLUTION], "crowd")


def run_still_faces(settings: BenchSettings, tmpdir: Path, base: Config, photo: Frame, group: str, size: tuple[int, int], name: str) -> dict[str, Any]:
    """`photo` (`group` names it) as a still camera of `size`, `face_selection = "all"`, light
    swapper: the summary, the faces the detector finds in the clip's frame, and the shares of
    frames at full quality and with every face swapped or held."""
    clip = still_clip(photo, settings, tmpdir, size, name=name)
    cfg = scenario_config("groups", settings, tmpdir, base, face_selection="all", precision=LIVE_PRECISION)
    copies = prepare_auto_copies(cfg, settings, clip, tmpdir, base)
    found: list[int] = []

    def count_faces(engine: LiveEngine) -> None:
        faces = engine.parts.faces
        assert faces is not None  # run_live built the pipeline before the engine
        found.append(len(faces.detect(first_frame(clip), cfg.detection.size)))

    stats, stages, setup_s = run_live(cfg, clip, settings.frames, settings.quality, on_engine=count_faces)
    summary = summarise(stats, stages, settings, setup_s)
    frames = stats["frames"]
    published = max(1, frames["published"])
    summary["size"] = list(size)
    if copies:
        summary["int8_copies"] = copies
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


def run_resolution(settings: BenchSettings, image: Frame, tmpdir: Path, base: Config) -> dict[str, Any]:
    """The light scenario at 480p and 1080p: how CPU-ms per frame grows with the pixels, in
    `settings.rounds` interleaved pairs (see `median_pair`)."""
    quality = settings.quality or BEST.name
    clips = {label: sliding_clip(image, settings, tmpdir, RESOLUTIONS[label]) for label in ("480p", "1080p")}
    cfg = scenario_config("light", settings, tmpdir, base, precision=LIVE_PRECISION)
    # The copies once, on the first size's frames: a copy is kept for its model and looks, not the camera's size.
    prepare_auto_copies(cfg, settings, clips["480p"], tmpdir, base)
    pairs: list[dict[str, Any]] = []
    for _ in range(settings.rounds):
        runs: dict[str, dict[str, Any]] = {}
        for label, clip in clips.items():
            stats, stages, setup_s = run_live(cfg, clip, settings.frames, quality)
            runs[label] = summarise(stats, stages, settings, setup_s)
        pairs.append(resolution_pair(quality, runs))
    return median_pair(pairs)


def median_pair(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The pair whose 1080p ÷ 480p ratio is the median (the lower middle one of an even count), with
    every pair's ratio under "round_ratios" in the order run. A pair, not a median of each figure:
    its two CPU figures, its camera share and its ratio stay one measurement."""
    ranked = sorted(pairs, key=lambda pair: pair["cpu_ratio"] if pair["cpu_ratio"] is not None else float("inf"))
    return ranked[(len(ranked) - 1) // 2] | {"round_ratios": [pair["cpu_ratio"] for pair in pairs]}


def resolution_pair(quality: str, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
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
