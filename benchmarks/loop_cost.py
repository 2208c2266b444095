"""The live loop's own cost, row by row, with builds interleaved in one run — and Deep-Live-Cam's own
live loop beside it on the same clip, detector and swapper.

    .venv/bin/python benchmarks/loop_cost.py --dlc /path/to/Deep-Live-Cam                   # this tree: every row, DLC beside
    .venv/bin/python benchmarks/loop_cost.py --tree before=/path/to/old/checkout --tree after=. --rounds 3 --dlc ../dlc
    .venv/bin/python benchmarks/loop_cost.py --rows groups,crowd --load 2                    # two busy processes beside

Every run is a process of its own (`--child`), which imports vcamd from the tree it is given
(`--tree NAME=PATH`: PYTHONPATH=PATH; default: this checkout), so two builds run the same rows
on the same machine one after the other: round by round, each row for each build in turn, the
machine's drift falling on both — in the order given in odd rounds and the reverse in even ones: the
build that runs second in a pair ran slower by 0.5–2 CPU-ms a frame on the light and groups rows
(2026-12-06: after-then-main and main-then-after each favoured the first), so an even number of
rounds gives each build each place equally. The models are the bench's (`vcamd bench`): SCRFD-2.5G from
../shared/assets, the light stand-in swapper and the recognizer stand-in built per run.

Rows:

* `light` — the bench's one-face clip (newton.png sliding across 1280×720, MJPG, 30 fps, looped, as
  `vcamd bench`'s light scenario), watchdog automatic: the whole process's CPU time from the 60th
  to the 240th published frame, per frame (what 180 more frames cost: models, warm-up and the
  covered start aside). The quality ladder's share at full is printed beside it.
* `dlc` — Deep-Live-Cam's own live loop from the checkout `--dlc` names: its webcam preview's two
  threads (`modules.ui._CaptureWorker` reading the camera into its queue, `_ProcessingWorker`
  detecting, swapping and post-processing into the other queue), its `modules.core.parse_args`
  defaults with `--execution-provider cpu`, its face analyser and swapper as it builds them —
  from a model folder holding the same detector (as buffalo_l's det_10g.onnx), the recognizer
  stand-in (as w600k_r50.onnx) and the light stand-in swapper (as inswapper_128.onnx). The
  camera is the same clip read by vcamd's own file camera (paced at 30 fps, MJPG decoded the
  same way); frames are taken from its output queue as its preview window's timer takes them
  (without drawing them). Qt and the packages its live loop never calls (PySide6, psutil, …) are
  stubs when not installed. The same measure: process CPU from the 60th to the 240th frame out.
  Nothing of Deep-Live-Cam is copied here: it is imported from the checkout and run as it is.
* `groups` — solvay_conference_1927.png (29 faces) as a still 720p camera, face_selection "all",
  watchdog automatic, 300 frames: capture→publish p99, published ÷ camera fps, the share of
  frames at full quality; then every 5th published frame after the 60th is checked (after the
  run, not timed) for raw faces: a face the checkers (both SCRFD models, ≥ 0.5) find in the
  camera's frame, at least MIN_FACE_PX wide, shown with at least half its box's pixels as the
  camera showed them; of those, how many MobileFaceNet still recognises (cosine > 0.3).
* `crowd` — crowd_selfie.jpg (100+ faces) as a still 1080p camera, the same.
* `crowd_noise` — the same crowd before a real camera: sensor noise of 2 grey levels a pixel, new in
  every frame (`still_clip(noise=…)`); every face's blocks then differ from its key by a level or
  more, each frame. The raw check places the faces on the clip's first picture (the photo does not
  move; the noise alone differs) and compares each checked frame with the picture it was made from.
* `resolution` — the light clip at 480p and at 1080p, watchdog pinned at full: CPU per frame
  (60→240) at each, and 1080p ÷ 480p.

`--pin LEVEL` (a quality level: full, low_res, frame_skip, …) runs the still rows with the watchdog
pinned there: what each rung costs a group or a crowd (a rung that costs more than the one above
is a step the watchdog takes back, `Watchdog` "no_gain").

`--precision NAME=auto` runs the tree NAME (`--tree`) at `[models] precision = "auto"` (the product's
default; "int8" too), the detector's and the swapper's int8 copies built and checked before the run
(`vcamd.bench.scenarios.prepare_detector_int8`, `prepare_int8`: calibrated on the source photo and the
clip's frames), as an earlier start of the daemon leaves them; the rows run at float otherwise. The
same checkout may be named twice, once per precision: `--tree float=. --tree auto=. --precision auto=auto`.

`--detector MODEL` runs every row with another SCRFD model as the product's detector (default
SCRFD-2.5G; the raw check's checkers stay both): `--detector ../shared/assets/models/scrfd_500m_kps.onnx`.

`--at-10g` adds SCRFD-10G's compute to that detector (`standins.build_detector_at_10g`: its faces, SCRFD-10G's
layers with random weights beside them), for vcamd and Deep-Live-Cam alike: the rows at the cost of buffalo_l's
det_10g.onnx, the detector the issue's own rows and `vcamd run` use (its weights are not here), plus the given one's.

`--load N` starts N busy processes (one core each, normal priority: the call app) around every
run. Printed: one table, a row per measure, a column per build (median of the rounds, and every
round's figure); `--json` keeps every run.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ASSETS = REPO.parent / "shared" / "assets"
DETECTOR = ASSETS / "models" / "scrfd_2.5g_kps.onnx"
FACE = ASSETS / "images" / "newton.png"
PHOTOS = {"groups": ("solvay_conference_1927.png", "720p"), "crowd": ("crowd_selfie.jpg", "1080p"),
          "crowd_noise": ("crowd_selfie.jpg", "1080p")}
NOISE = {"crowd_noise": 2.0}
"""Sensor noise of a still row's camera, grey levels a pixel (the other rows: none)."""
ROWS = ("light", "dlc", "groups", "crowd", "crowd_noise", "resolution")
SKIP, UNTIL = 60, 240
"""CPU is counted from the SKIP-th to the UNTIL-th frame out."""
STILL_FRAMES = 300
CHECK_EVERY = 5
MIN_FACE_PX = 20
BUSY_CODE = "import os; os.write(1, b'.'); os.close(1)\nwhile 1: pass"


# -- the parent: rows × builds, interleaved ----------------------------------------------------------

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", default=[], metavar="NAME=PATH", help="a vcamd checkout to run (repeat; default: this one)")
    p.add_argument("--rows", default="light,dlc,groups,crowd,resolution", help=f"comma-separated, from {', '.join(ROWS)}")
    p.add_argument("--dlc", type=Path, default=None, help="a Deep-Live-Cam checkout (the dlc row needs it)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--load", type=int, default=0, help="busy processes beside every run")
    p.add_argument("--precision", action="append", default=[], metavar="NAME=PRECISION",
                   help="run the tree NAME at [models] precision PRECISION (auto, int8; default float), its int8 copies built before")
    p.add_argument("--pin", default=None, metavar="LEVEL",
                   help="the still rows (groups, crowd, crowd_noise) at this quality level, the watchdog pinned: what each rung costs them")
    p.add_argument("--detector", type=Path, default=DETECTOR, help="the product's SCRFD detector for every row (default: SCRFD-2.5G)")
    p.add_argument("--at-10g", action="store_true", help="the detector with SCRFD-10G's compute added (buffalo_l's det_10g cost)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--resolution", default="720p", help=argparse.SUPPRESS)
    p.add_argument("--quality", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        result = CHILDREN[args.child](args)
        args.out.write_text(json.dumps(result))
        return
    if args.pin is not None:
        from vcamd.common.quality import Level

        if args.pin not in Level.__members__:
            sys.exit(f"--pin: no quality level {args.pin!r}; one of {', '.join(Level.__members__)}")
    if not args.detector.is_file():
        sys.exit(f"--detector: no such file {args.detector} (an SCRFD .onnx, e.g. {DETECTOR})")
    args.detector = args.detector.resolve()
    if args.at_10g:
        from vcamd.bench.standins import build_detector_at_10g

        folder = tempfile.mkdtemp(prefix="loopcost-10g-")
        atexit.register(shutil.rmtree, folder, True)  # ~20 MB a run
        built = Path(folder) / f"{args.detector.stem}_at_10g.onnx"
        args.detector = build_detector_at_10g(args.detector, built)
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": str(REPO)}
    args.precisions = dict(t.split("=", 1) for t in args.precision)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        sys.exit(f"--rows: unknown {', '.join(unknown)}")
    if "dlc" in rows and (args.dlc is None or not (args.dlc / "modules" / "ui.py").is_file()):
        sys.exit("--dlc: the dlc row needs a Deep-Live-Cam checkout (a folder with modules/ui.py)")
    runs: list[dict] = []
    for rnd in range(1, args.rounds + 1):
        order = list(trees.items()) if rnd % 2 else list(trees.items())[::-1]  # each build first in turn
        for row in rows:
            for name, path in ([("Deep-Live-Cam", str(REPO))] if row == "dlc" else order):
                for child, extra in _children(row, args.pin):
                    precision = args.precisions.get(name, "float") if row != "dlc" else "float"
                    result = _run_child(child, extra + (["--precision", precision] if precision != "float" else []), path, args)
                    result |= {"row": row, "build": name, "round": rnd, "load": args.load}
                    runs.append(result)
                    print(f"round {rnd} {row:10s} {name:14s} {child:10s} {_brief(result)}", file=sys.stderr, flush=True)
    print(format_table(runs, rows, list(trees) + (["Deep-Live-Cam"] if "dlc" in rows else []), args))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "trees": trees, "load": args.load}, indent=1))


def _children(row: str, pin: str | None = None) -> list[tuple[str, list[str]]]:
    if row == "resolution":
        return [("light", ["--resolution", "480p", "--quality", "full"]), ("light", ["--resolution", "1080p", "--quality", "full"])]
    if row in PHOTOS:
        return [("still", ["--rows", row, "--resolution", PHOTOS[row][1], *(["--quality", pin] if pin else [])])]
    return [(row, [])]


def _run_child(child: str, extra: list[str], tree: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="vcamd-loopcost-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--child", child, "--out", str(out), "--detector", str(args.detector), *extra]
        if child == "dlc":
            cmd += ["--dlc", str(args.dlc)]
        env = {**os.environ, "PYTHONPATH": tree, "LOOPCOST_TMP": tmp}
        before = os.getloadavg()[0]
        with busy(args.load):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0 and not out.is_file():
            raise SystemExit(f"{child} run failed ({tree}):\n{proc.stderr[-3000:]}")
        if proc.returncode != 0:
            # The child wrote its figures and then died on the way out (Deep-Live-Cam's worker
            # threads still in native code at interpreter exit: "terminate called without an active
            # exception"): the run was measured whole, so the table keeps it and says how it ended.
            print(f"note: {child} run ({tree}) exited {proc.returncode} after writing its result: "
                  f"{proc.stderr.strip().splitlines()[-1:] or ['']}", file=sys.stderr, flush=True)
        return json.loads(out.read_text()) | {"child": child, "extra": extra, "loadavg": [before, os.getloadavg()[0]],
                                              "exit_code": proc.returncode}


@contextlib.contextmanager
def busy(n: int):
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_CODE], process_group=0, stdout=subprocess.PIPE) for _ in range(n)]
    try:
        for proc in procs:
            proc.stdout.read(1)
            proc.stdout.close()
        yield
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _brief(r: dict) -> str:
    keys = ("cpu_ms_per_frame", "p99_ms", "fps_ratio", "full_share", "raw_frames", "recognised_frames", "resolution")
    return " ".join(f"{k}={r[k]}" for k in keys if k in r)


def format_table(runs: list[dict], rows: list[str], builds: list[str], args: argparse.Namespace) -> str:
    measures: list[tuple[str, str, callable]] = []
    age = ("age of the swapped face shown, p95 ms", lambda r: r.get("swap_age_p95_ms") or "–")
    for row in rows:
        if row in ("light", "dlc"):
            measures.append((row, "CPU-ms/frame, 720p, frames 60→240", lambda r: r["cpu_ms_per_frame"]))
            measures.append((row, "  frames out per second", lambda r: r["out_fps"]))
            if row == "light":
                measures.append((row, "  share at full quality", lambda r: r["full_share"]))
                measures.append((row, "  " + age[0], age[1]))
        elif row in PHOTOS:
            measures += [(row, "capture→publish p99 ms", lambda r: r["p99_ms"]), (row, "  p95 ms", lambda r: r.get("p95_ms", "–")),
                         (row, "published ÷ camera fps", lambda r: r["fps_ratio"]),
                         (row, "share at full quality", lambda r: r["full_share"]),
                         (row, *age),
                         (row, "CPU-ms/frame, frames 60→240", lambda r: r["cpu_ms_per_frame"]),
                         (row, "frames with a face shown raw (checked)", lambda r: f"{r['raw_frames']}/{r['checked']}"),
                         (row, "  of which recognised", lambda r: f"{r['recognised_frames']}/{r['checked']}")]
        elif row == "resolution":
            measures += [(row, "CPU-ms/frame 480p (full)", lambda r: r["480p"]), (row, "CPU-ms/frame 1080p (full)", lambda r: r["1080p"]),
                         (row, "1080p ÷ 480p", lambda r: round(r["1080p"] / r["480p"], 3))]
    by: dict[tuple[str, str, int], dict] = {}
    for r in runs:
        key = (r["row"], r["build"], r["round"])
        if r["row"] == "resolution":
            by.setdefault(key, {})[r["resolution"]] = r["cpu_ms_per_frame"]
        else:
            by[key] = r
    lines = [f"loop cost — {args.rounds} round(s), busy processes beside: {args.load}, detector {args.detector.name}; median [every round]",
             "| row | measure | " + " | ".join(builds) + " |", "|---" * (2 + len(builds)) + "|"]
    for row, label, get in measures:
        cells = []
        for build in builds:
            values = [get(by[(row, build, rnd)]) for rnd in range(1, args.rounds + 1) if (row, build, rnd) in by]
            if not values:
                cells.append("")
                continue
            numeric = all(isinstance(v, (int, float)) for v in values)
            median = f"{statistics.median(values):.3g}" if numeric else values[len(values) // 2]
            cells.append(median + (f" [{', '.join(f'{v:.3g}' if numeric else str(v) for v in values)}]" if len(values) > 1 else ""))
        lines.append(f"| {row} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- children: one run each, in a process of its own --------------------------------------------------

class Marks:
    """Process CPU time at the SKIP-th and the UNTIL-th frame out; then `done` is set."""

    def __init__(self, until: int = UNTIL) -> None:
        self.count = 0
        self.until = until
        self.cpu: dict[int, float] = {}
        self.wall: dict[int, float] = {}
        self.done = threading.Event()

    def frame_out(self) -> None:
        self.count += 1
        if self.count in (SKIP, self.until):
            self.cpu[self.count] = time.process_time()
            self.wall[self.count] = time.monotonic()
            if self.count == self.until:
                self.done.set()

    def per_frame(self) -> dict:
        frames = self.until - SKIP
        return {"cpu_ms_per_frame": round(1000.0 * (self.cpu[self.until] - self.cpu[SKIP]) / frames, 2),
                "out_fps": round(frames / (self.wall[self.until] - self.wall[SKIP]), 2)}


def _vcamd_run(clip: Path, cfg, frames: int, quality: str | None, keep_every: int = 0,
               on_frame=None) -> tuple[dict, Marks, list]:
    """vcamd's live engine (as `vcamd bench` runs it) on `clip` into a sink that marks the CPU and
    keeps every `keep_every`-th frame after SKIP (references: a published frame is not drawn on again);
    `on_frame()` is called for each frame published (`after_load.py`: when the first is out)."""
    from vcamd.bench.runs import _warm_up
    from vcamd.common.quality import Level
    from vcamd.live.capture.sources import VideoFileCamera
    from vcamd.live.engine import LiveEngine
    from vcamd.live.loading import build_face_pipeline
    from vcamd.sinks.null import NullSink

    marks, kept = Marks(min(UNTIL, frames)), []

    class MarkingSink(NullSink):
        def send(self, frame, stats=None) -> None:
            super().send(frame, stats)
            marks.frame_out()
            if on_frame is not None:
                on_frame()
            if keep_every and marks.count > SKIP and marks.count % keep_every == 0:
                kept.append(frame)

    faces, providers = build_face_pipeline(cfg)
    _warm_up(faces, cfg, clip)
    engine = LiveEngine(cfg, source=VideoFileCamera(clip, loop=True), sink_factory=lambda w, h, fps: MarkingSink(w, h),
                        faces=faces, providers=providers())
    if quality:
        engine.set_quality(Level[quality])
    stats = engine.run(max_frames=frames)
    return stats, marks, kept


def _precision(cfg, args: argparse.Namespace, clip: Path, settings, tmp: Path):
    """`cfg` at the child's `--precision` (float: as it is); at "auto" or "int8" the detector's and the
    swapper's int8 copies are built and checked first (in the run's cache), as an earlier start of the
    daemon would have left them: what the printout says of them."""
    if not args.precision:
        return cfg, None
    import multiprocessing

    cfg = cfg.model_copy(update={"models": cfg.models.model_copy(update={"precision": args.precision[0]})})
    # In a process of its own, as the daemon builds them: the quantiser's sessions and memory are gone before the run.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return cfg, pool.apply(_prepare_copies, (cfg, clip, settings, tmp))


def _prepare_copies(cfg, clip: Path, settings, tmp: Path) -> dict:
    from vcamd.bench.scenarios import prepare_detector_int8, prepare_int8
    from vcamd.config.schema import Config

    return {"detector": prepare_detector_int8(cfg, clip, settings.fps),
            "swapper": prepare_int8(settings, Path(cfg.models.swapper), clip, tmp, Config())}


def _settings(resolution: str, quality: str | None, detector: Path):
    from vcamd.bench.settings import RESOLUTIONS, BenchSettings

    width, height = RESOLUTIONS[resolution]
    return BenchSettings(face=FACE, detector=str(detector), width=width, height=height, fps=30.0, frames=UNTIL,
                         inswapper_frames=UNTIL, providers=["cpu"], threads=1, fp16=False, quality=quality)


def child_light(args: argparse.Namespace) -> dict:
    from vcamd.bench.clips import sliding_clip
    from vcamd.bench.runs import scenario_config
    from vcamd.bench.scenarios import _cache_dir
    from vcamd.config.schema import Config
    from vcamd.files.images import read_image

    tmp = Path(os.environ["LOOPCOST_TMP"])
    settings = _settings(args.resolution, args.quality or None, args.detector)
    with _cache_dir(tmp / "optimized"):
        clip = sliding_clip(read_image(FACE, "face"), settings, tmp, (settings.width, settings.height))
        cfg, copies = _precision(scenario_config("light", settings, tmp, Config()), args, clip, settings, tmp)
        stats, marks, _ = _vcamd_run(clip, cfg, UNTIL, settings.quality)
    levels = stats["degradation"]["level_share"]
    return marks.per_frame() | {"full_share": levels.get("full", 0.0), "resolution": args.resolution, "int8_copies": copies,
                                "precision": stats.get("precision"),
                                "stats_cpu_ms_per_frame": stats["cpu_ms_per_frame"], "by": stats.get("cpu_ms_per_frame_by"),
                                "swap_age_p95_ms": _age_p95(stats)}


def child_still(args: argparse.Namespace) -> dict:
    import cv2
    import numpy as np

    from vcamd.bench.clips import still_clip
    from vcamd.bench.leaks import load_checkers, placements_in, recognised_as
    from vcamd.bench.runs import scenario_config
    from vcamd.bench.scenarios import _cache_dir
    from vcamd.config.schema import Config
    from vcamd.files.images import read_image
    from vcamd.live.capture.sources import VideoFileCamera

    row = args.rows
    tmp = Path(os.environ["LOOPCOST_TMP"])
    settings = _settings(args.resolution, None, args.detector)
    with _cache_dir(tmp / "optimized"):
        noise = {"noise": NOISE[row]} if row in NOISE else {}  # a tree before still_clip had it runs the other rows
        clip = still_clip(read_image(ASSETS / "images" / PHOTOS[row][0], "photo"), settings, tmp, (settings.width, settings.height), **noise)
        cfg, copies = _precision(scenario_config("groups", settings, tmp, Config(), face_selection="all"), args, clip, settings, tmp)
        stats, marks, kept = _vcamd_run(clip, cfg, STILL_FRAMES, args.quality, keep_every=CHECK_EVERY)
    # The raw check, after the run: every picture the camera gave as the engine read it; each checked
    # frame is compared with the picture it was made from (the one it equals most: what no cover or
    # swap was drawn on is that picture's pixels exactly). The faces are placed on each picture — on
    # the first alone when the pictures differ by sensor noise only (a still photo: its faces do not move).
    played = [0.0]  # the camera's clock, moved by its own waits alone: no frame is late, none skipped
    camera = VideoFileCamera(clip, loop=False, clock=lambda: played[0], sleep=lambda s: played.__setitem__(0, played[0] + s))
    camera.open()
    pictures: list = []
    while (picture := camera.read()) is not None:
        if not any(np.array_equal(picture, seen) for seen in pictures):
            pictures.append(picture)
    camera.close()
    detectors, recognizer = load_checkers(ASSETS / "models", threads=2)
    first = [p for p in placements_in(pictures[0], detectors, recognizer) if p.face.width >= MIN_FACE_PX]
    placed = [(raw, first if row in NOISE or k == 0 else
               [p for p in placements_in(raw, detectors, recognizer) if p.face.width >= MIN_FACE_PX]) for k, raw in enumerate(pictures)]
    raw_frames = recognised_frames = 0
    for frame in kept:
        raw, places = max(placed, key=lambda pair: int(np.count_nonzero(frame[::4, ::4] == pair[0][::4, ::4])))
        unchanged = (cv2.absdiff(frame, raw).max(axis=2) <= 2)
        shown = [p for p in places if _unchanged_share(unchanged, p.face.box) >= 0.5]
        raw_frames += bool(shown)
        recognised_frames += any(recognised_as(recognizer.embed(frame, p.face), p.embedding) is not None for p in shown)
    places = placed[-1][1]
    fps = stats["fps"]
    return marks.per_frame() | {
        "p99_ms": stats["latency_ms"]["p99"], "p95_ms": stats["latency_ms"]["p95"], "fps_ratio": round(fps["published"] / fps["source"], 3),
        "full_share": stats["degradation"]["level_share"].get("full", 0.0), "checked": len(kept), "faces_checked": len(places), "pictures": len(pictures),
        "raw_frames": raw_frames, "recognised_frames": recognised_frames, "stats_faces": stats["faces"],
        "levels": {k: v for k, v in stats["degradation"]["level_share"].items() if v}, "by": stats.get("cpu_ms_per_frame_by"),
        "transitions": [f"{t.get('from')}→{t.get('to')} ({t.get('reason')})" for t in stats["degradation"]["transitions"]],
        "unchanged_box_faces": int(np.sum([p.face.width for p in places]) > 0), "int8_copies": copies, "precision": stats.get("precision"),
        "swap_age_p95_ms": _age_p95(stats),
    }


def _age_p95(stats: dict) -> float | None:
    """How old the swapped face shown was (capture of the frame its swap was made from → publish), p95
    over the run; None when no frame showed one."""
    age = stats.get("swap_age_ms") or {}
    return None if age.get("p95") is None else round(age["p95"], 1)


def _unchanged_share(unchanged, box) -> float:
    x0, y0, x1, y1 = (max(0, int(v)) for v in box)
    region = unchanged[y0:y1, x0:x1]
    return float(region.mean()) if region.size else 0.0


def child_dlc(args: argparse.Namespace) -> dict:
    """Deep-Live-Cam's live loop, imported from its checkout and run as it is (see the module doc)."""
    import shutil

    from vcamd.bench.clips import sliding_clip
    from vcamd.bench.standins import build_recognizer, build_swapper
    from vcamd.files.images import read_image
    from vcamd.live.capture.sources import VideoFileCamera

    tmp = Path(os.environ["LOOPCOST_TMP"])
    settings = _settings("720p", None, args.detector)
    clip = sliding_clip(read_image(FACE, "face"), settings, tmp, (settings.width, settings.height))
    # Its model folders: insightface's buffalo_l under a home of its own, and the swapper's folder.
    home = tmp / "home"
    pack = home / ".insightface" / "models" / "buffalo_l"
    pack.mkdir(parents=True)
    shutil.copy(args.detector, pack / "det_10g.onnx")
    build_recognizer(pack / "w600k_r50.onnx")
    swapper_dir = tmp / "dlc-models"
    build_swapper(swapper_dir / "inswapper_128.onnx", fp16=False, compute_equivalent=False)
    os.environ["HOME"] = str(home)

    _stub_missing(["PySide6", "PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets", "psutil", "cv2_enumerate_cameras",
                   "opennsfw2", "sklearn", "sklearn.cluster", "pygrabber", "pygrabber.dshow_graph"])
    sys.path.insert(0, str(args.dlc))
    sys.argv = ["run.py", "--execution-provider", "cpu"]
    import queue

    import modules.core as dlc_core
    import modules.globals as dlc_globals

    dlc_core.parse_args()
    dlc_globals.source_path = str(FACE)  # chosen in its window
    import modules.processors.frame.face_swapper as dlc_swapper
    import modules.ui as dlc_ui

    dlc_swapper.models_dir = str(swapper_dir)
    calls = {"swap_face": 0, "detect": 0}
    swap_face, detect = dlc_swapper.swap_face, dlc_ui.detect_one_face_fast

    def counted_swap(*a, **k):  # how often its loop really swapped and detected (reported, not changed)
        calls["swap_face"] += 1
        return swap_face(*a, **k)

    def counted_detect(*a, **k):
        calls["detect"] += 1
        return detect(*a, **k)

    dlc_swapper.swap_face, dlc_ui.detect_one_face_fast = counted_swap, counted_detect

    class Camera:
        """The clip as a camera, as vcamd's bench reads it; `read()` as OpenCV's capture answers."""

        def __init__(self) -> None:
            self.source = VideoFileCamera(clip, loop=True)
            self.source.open()

        def read(self):
            frame = self.source.read()
            return frame is not None, frame

    marks = Marks()
    stop = threading.Event()
    captured, processed = queue.Queue(maxsize=2), queue.Queue(maxsize=2)  # as its preview window makes them
    capture = dlc_ui._CaptureWorker(Camera(), captured, stop)
    processing = dlc_ui._ProcessingWorker(captured, processed, stop, settings.fps)
    # Models load and the source face is read on the first frames; warm up before counting.
    capture.start()
    processing.start()

    def take() -> None:  # the preview window's timer: take the newest frame out (not drawn here)
        while not stop.is_set():
            try:
                processed.get(timeout=0.05)
            except queue.Empty:
                continue
            marks.frame_out()
            if marks.done.is_set():
                stop.set()

    taker = threading.Thread(target=take, name="preview-timer", daemon=True)
    taker.start()
    if not marks.done.wait(600):
        raise SystemExit(f"Deep-Live-Cam's loop put out only {marks.count} frames in 600 s")
    stop.set()
    return marks.per_frame() | {"resolution": "720p", "calls_per_frame_out": {k: round(v / marks.count, 2) for k, v in calls.items()}}


def _stub_missing(names: list[str]) -> None:
    """Stand-ins for the modules Deep-Live-Cam imports and its live loop never calls, where they
    are not installed: any attribute is a class that accepts anything (Qt's widgets and signals
    at import), and QThread.start runs `run` on a thread."""
    import importlib

    class Anything:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __call__(self, *args, **kwargs):
            return Anything()

        def __getattr__(self, name):
            return Anything()

    class QThread:
        def __init__(self, *args, **kwargs) -> None:
            self._thread: threading.Thread | None = None

        def start(self) -> None:
            self._thread = threading.Thread(target=self.run, daemon=True, name=type(self).__name__)
            self._thread.start()

        def wait(self, ms: int = 0) -> None:
            if self._thread is not None:
                self._thread.join(ms / 1000.0 if ms else None)

    def module_getattr(name: str):
        if name == "QThread":
            return QThread
        return type(name, (Anything,), {})

    for name in names:
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        stub = types.ModuleType(name)
        stub.__getattr__ = module_getattr  # type: ignore[method-assign]
        stub.__path__ = []  # a package: its submodules are stubs too
        sys.modules[name] = stub


CHILDREN = {"light": child_light, "still": child_still, "dlc": child_dlc}


if __name__ == "__main__":
    main()
