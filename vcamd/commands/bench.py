"""`vcamd bench`: the live loop on a generated clip played like a camera, with stand-in swappers.

Each scenario runs the real live engine (reader thread, newest-frame slot, tracking, async swap
worker, re-composite, badge, watchdog) on a clip of the given face sliding across a 720p (or 1080p)
frame at 30 fps, publishing to the null sink. Scenarios:

* `light`     — a cheap stand-in swapper (a few ops), so the loop's own cost shows;
* `inswapper` — the compute-equivalent inswapper_128 stand-in (same layers, random weights; built
  at run time in a temporary folder), which costs what the real model costs;
* `groups` — a 29-face group photo as a still camera, `face_selection = "all"`, light swapper
  (`--group-photo`; without one, 29 copies of `--face` tiled: `bench.clips.tiled_group`);
* `crowd` — a crowd photo (100+ small faces) as a still 1080p camera, the same way (`--crowd-photo`);
* `resolution` — the light scenario at 480p and at 1080p (watchdog pinned at full), in
  `--rounds` interleaved pairs: the figure is the pair with the median ratio (one pair is at the
  mercy of the machine's speed between its two runs: 1.26–1.43× in five single pairs here);
* `startup` — `vcamd run` started as a user starts it (a subprocess, the compute-equivalent
  inswapper stand-in, the clip as a file camera, null sink, `--frames N --stats-json`), twice: how
  long from the process start until the first frame is published and until the first swapped face,
  at the first start (the swapper optimised by ONNX Runtime and its graph kept: `vcamd.inference.ortcache`)
  — a `vcamd run` that fails names the command to run by hand, its temporary folder kept for it —
  and at the next start (every later one: the kept graph loaded). Python writes and reads bytecode
  as an installed vcamd has it, whatever PYTHONDONTWRITEBYTECODE says here (else every start
  compiles vcamd's modules from source). `--threads` applies (default 1; a user's default config
  has `[models] threads = 0`, every core): the title says which;
* `--precision float,int8` (the default): `inswapper`, `startup` and `call` run once per precision,
  side by side, interleaved (float then int8 in each round): the swapper's int8 copy is built and
  checked against float before the first int8 run, as `vcamd models quantize` builds it
  (calibrated on the bench's face and frames of its clip; `vcamd.models.quantize`), and kept in the
  bench's temporary folder, so an int8 run starts on it as a user's daily start does. Printed: the
  swap per face, the swap age and the first swap of each, and the int8 targets;
* `call` — what a video call asks: `vcamd run` started as a user starts it (as `startup`), with a
  swapper of a call's cost (`--swap-ms`, default 370 ms a face: the light swap plus as many heavy
  convolutions as take that long on this machine, measured quiet before the runs:
  `vcamd.bench.callswapper`), for `--frames` frames, in `--rounds` runs; with `--load N`, each run is followed
  by one with N busy processes (`python -c 'while 1: pass'` at normal priority, the call app)
  for its whole length, killed after it whatever happens. Quiet and loaded runs print side by
  side: frames swapped after the first swap, swap age, first frame and first swap beside fps
  and p99, with the machine's load average.

`--swapper NAMES` / `--enhancer NAMES` (alone, or beside `--scenarios`): each named model's
compute-equivalent stand-in — its family's layer list with random weights, `vcamd.bench.families` —
timed a face through `Swapper` / `Enhancer` on the photo's face: parameters, GMAC, file size, median
ms quiet (and with `--load N` busy processes), and where its layer list comes from
(`vcamd.bench.modeltimes`).

`light`, `groups`, `crowd` and `resolution` run at the default `[models] precision = "auto"`, the int8
copies a first start of `vcamd run` would build made first (`scenarios.prepare_auto_copies`): what a
daily `vcamd run` costs here. The in-process runs (those and `inswapper`) count CPU from the 60th published
frame (`runs.CPU_FROM_FRAME`: the start left out).

Printed for light/inswapper: published vs source fps, capture→publish p50/p95/p99, pipeline
overhead per frame (everything but model inference), CPU-ms per published frame (all threads) and
% of frames swapped, each against its target. For groups/crowd/resolution: one row per target with
the figure, the target and figure ÷ target. Then, per scenario, where the CPU went: CPU-ms per
frame by thread (the loop, the crop detection's and the full detection's threads, the swap worker,
the camera reader, the rest) and by stage (the loop's stages; each worker thread is one). Everything is read from the engine's stats JSON (and its
public constructor, `run()` and `set_quality`), so the bench does not depend on how the engine is
built inside. The scenarios live in `vcamd.bench.scenarios`, the printout in `vcamd.bench.report`.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from vcamd.bench.settings import (
    CALL_SWAP_MS,
    CROWD_PHOTO,
    DEFAULT_SCENARIOS,
    GROUP_FACES,
    GROUP_PHOTO,
    PRECISION_SCENARIOS,
    PRECISIONS,
    RESOLUTIONS,
    SCENARIOS,
    BenchSettings,
    settings_dict,
)
from vcamd.commands import Subcommands, add_config_option, check_output_file
from vcamd.common.quality import Level

if TYPE_CHECKING:
    from vcamd.config.schema import Config

log = logging.getLogger(__name__)


def register(subparsers: Subcommands) -> None:
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
                   help="SCRFD detector: manifest name or .onnx path (default: [models] detector, buffalo_l's det_10g.onnx "
                        "unless the config says otherwise: the one `vcamd run` uses)")
    p.add_argument("--swapper", default="", metavar="LIST",
                   help="time these swapper models' compute-equivalent stand-ins a face (manifest names or families, "
                        "deepfacelab for a .dfm model, or all); alone, no live scenario runs")
    p.add_argument("--enhancer", default="", metavar="LIST",
                   help="the same for enhancer models (gfpgan_1.4, codeformer, restoreformer_plus_plus, gpen_bfr_256 … 2048, or all)")
    p.add_argument("--scenarios", default=None, metavar="LIST",
                   help=f"comma-separated, from: {', '.join(SCENARIOS)} (default: {','.join(DEFAULT_SCENARIOS)}). "
                        "groups: a 29-face group photo as a still camera with face_selection = \"all\"; "
                        "crowd: the same with a 100+ face crowd photo at 1080p; "
                        "resolution: CPU-ms per frame at 1080p against 480p; call: `vcamd run` with a swapper of a call's "
                        "cost (--swap-ms), swap age and start-up beside fps (with --load N: quiet and loaded runs side by side)")
    p.add_argument("--group-photo", type=Path, default=None, metavar="PHOTO",
                   help=f"the groups scenario's photo (default: {GROUP_PHOTO} next to --face if it is there, "
                        f"else {GROUP_FACES} copies of --face tiled)")
    p.add_argument("--crowd-photo", type=Path, default=None, metavar="PHOTO",
                   help=f"the crowd scenario's photo (default: {CROWD_PHOTO} next to --face)")
    p.add_argument("--quality", choices=[level.name for level in Level], default=None,
                   help="pin the watchdog at this level for the run (default: automatic; the resolution "
                        "scenario pins full unless given, so both sizes do the same work)")
    p.add_argument("--resolution", choices=sorted(RESOLUTIONS), default="720p")
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="resolution: how many 480p/1080p pairs to run, interleaved; the figure is the pair with "
                        "the median ratio; call: how many runs (quiet/loaded pairs with --load); --swapper/--enhancer: "
                        "timed runs a model (median) (default 3)")
    p.add_argument("--load", type=int, default=0, metavar="N",
                   help="call: after each quiet run, one with N busy processes at normal priority "
                        "(python -c 'while 1: pass', the call app) for the run's length; quiet and loaded rows side by side (default 0: quiet only)")
    p.add_argument("--swap-ms", type=float, default=CALL_SWAP_MS, metavar="MS",
                   help=f"call: what the stand-in swapper costs a face on this machine, quiet (default {CALL_SWAP_MS:g}: the swapper the "
                        "call's targets are for; built to measure before the runs, as CPUs differ 2× and more)")
    p.add_argument("--fps", type=float, default=30.0, help="the clip's (camera's) frame rate")
    p.add_argument("--frames", type=int, default=300, metavar="N", help="published frames measured per scenario")
    p.add_argument("--inswapper-frames", type=int, default=900, metavar="N",
                   help="published frames for the inswapper scenario (default 900: a CPU swap takes seconds, so "
                        "a short run would end before the first one lands)")
    p.add_argument("--providers", default=None, metavar="LIST",
                   help="ONNX Runtime providers, e.g. cpu or cuda (default: [models] providers)")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="ONNX Runtime intra-op threads per session (default 1: the live loop runs up to three models at once)")
    p.add_argument("--precision", default=",".join(PRECISIONS), metavar="LIST",
                   help=f"{', '.join(PRECISION_SCENARIOS)}: run once per precision, interleaved, side by side: float, and int8 (the "
                        "swapper's int8 copy, built and checked against float before the runs, as `vcamd models quantize` does) "
                        f"(default: {','.join(PRECISIONS)}; int8 needs the CPU provider)")
    p.add_argument("--workdir", type=Path, default=None, metavar="DIR",
                   help="build the stand-in models, clips and int8 copies in DIR and keep them for the next runs "
                        "(default: a temporary folder, removed afterwards; the inswapper-sized stand-in is 554 MB)")
    p.add_argument("--fp16", action="store_true", help="build the stand-in swappers with float16 weights and float32 inputs/output, like inswapper_128_fp16 (GPU)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from vcamd.bench.report import format_table
    from vcamd.bench.scenarios import run_benchmark
    from vcamd.common.errors import VcamdError
    from vcamd.config.reading import load_config

    cfg, _ = load_config(args.config)
    face = args.face or cfg.swap.source_face
    if face is None:
        raise VcamdError("vcamd bench needs a photo with a face", fix="pass --face PHOTO or set [swap] source_face")
    from vcamd.bench.modeltimes import enhancer_models, swapper_models

    swappers = swapper_models([s.strip() for s in args.swapper.split(",") if s.strip()]) if args.swapper.strip() else []
    enhancers = enhancer_models([s.strip() for s in args.enhancer.split(",") if s.strip()]) if args.enhancer.strip() else []
    if args.scenarios is None:  # the default scenarios, unless only models were asked for
        args.scenarios = "" if swappers or enhancers else ",".join(DEFAULT_SCENARIOS)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or not (scenarios or swappers or enhancers):
        raise VcamdError(f"--scenarios: unknown {', '.join(unknown) or '(none given)'}", fix=f"use a comma-separated list of {', '.join(SCENARIOS)}")
    if args.frames < 30:
        raise VcamdError(f"--frames {args.frames} is too few to measure", fix="use at least 30")
    if "inswapper" in scenarios and args.inswapper_frames < 30:
        raise VcamdError(f"--inswapper-frames {args.inswapper_frames} is too few to measure", fix="use at least 30")
    if not 0 < args.fps <= 240:  # also refuses NaN; a camera's range, as [camera] fps
        raise VcamdError(f"--fps {args.fps:g}: not a camera frame rate", fix="use a number above 0 and at most 240, e.g. 30")
    if ({"resolution", "call"} & set(scenarios) or swappers or enhancers) and args.rounds < 1:
        raise VcamdError(f"--rounds {args.rounds}: the resolution and call scenarios need at least one round", fix="use 1 or more, e.g. 3")
    if not 0 <= args.load <= 64:
        raise VcamdError(f"--load {args.load}: not a number of busy processes", fix="use 0 (quiet only) to 64, e.g. 2")
    if not 10 <= args.swap_ms <= 10_000:  # also refuses NaN
        raise VcamdError(f"--swap-ms {args.swap_ms:g}: not a swap's cost in milliseconds", fix="use 10 to 10000, e.g. 370")
    if args.threads < 0:
        raise VcamdError(f"--threads {args.threads}: cannot be negative", fix="use 0 (all cores) or a positive number")
    precisions = tuple(dict.fromkeys(p.strip() for p in args.precision.split(",") if p.strip()))
    if not precisions or set(precisions) - set(PRECISIONS):
        raise VcamdError(f"--precision {args.precision}: not a list of {' and '.join(PRECISIONS)}", fix="use float, int8 or float,int8")
    if args.json is not None:
        check_output_file(args.json, "--json")  # now, not after minutes of measuring
    width, height = RESOLUTIONS[args.resolution]
    detector = args.detector or cfg.models.detector
    if Path(detector).is_file():  # a path as typed: the runs' configs live in a temporary folder
        detector = str(Path(detector).resolve())
    neighbour = Path(face).parent / GROUP_PHOTO
    settings = BenchSettings(
        face=Path(face).resolve(),
        detector=detector,
        width=width,
        height=height,
        fps=args.fps,
        frames=args.frames,
        inswapper_frames=args.inswapper_frames,
        providers=[p.strip() for p in args.providers.split(",")] if args.providers else list(cfg.models.providers),
        threads=args.threads,
        fp16=args.fp16,
        quality=args.quality,
        group_photo=args.group_photo or (neighbour if neighbour.is_file() else None),
        crowd_photo=args.crowd_photo or Path(face).parent / CROWD_PHOTO,
        rounds=args.rounds,
        load=args.load,
        swap_ms=args.swap_ms,
        swappers=tuple(swappers),
        enhancers=tuple(enhancers),
        precisions=precisions,
        workdir=args.workdir.resolve() if args.workdir else None,
    )
    if "groups" in scenarios and settings.group_photo is not None and not settings.group_photo.is_file():
        raise VcamdError(f"--group-photo: {settings.group_photo} not found", fix="pass --group-photo PHOTO (a photo with many faces)")
    if "crowd" in scenarios and (settings.crowd_photo is None or not settings.crowd_photo.is_file()):
        raise VcamdError(f"--crowd-photo: {settings.crowd_photo} not found", fix="pass --crowd-photo PHOTO (a photo with a hundred faces)")
    check_detector(detector, cfg, from_flag=args.detector is not None)  # now, not after the stand-ins are built
    results = run_benchmark(settings, scenarios, base=cfg)
    print(format_table(results, settings))
    if args.json is not None:
        from vcamd.files.private_files import private_parent, write_private_atomic

        private_parent(args.json)  # 0600 like --stats-json, never through a symlink
        write_private_atomic(args.json, json.dumps({"settings": settings_dict(settings), "results": results}, indent=2) + "\n")
    return 0


def check_detector(value: str, cfg: Config, *, from_flag: bool) -> None:
    """The detector the runs will use is there and is a detector; a bad one is blamed on where it
    came from: `--detector` as typed, or `[models] detector` in the config."""
    from vcamd.common.errors import VcamdError
    from vcamd.modelstore.signature import check_signature
    from vcamd.modelstore.store import ModelStore

    store = ModelStore.from_config(cfg.models)
    known = ", ".join(n for n, e in store.manifest.entries.items() if "detector" in e.roles)
    try:
        check_signature(store.path_for(value, "detector"), "detector")
    except VcamdError as err:
        if not from_flag:
            raise VcamdError(err.message, fix=f"{err.fix}; or pass --detector PATH.onnx") from None
        entry = store.manifest.entries.get(value)
        if entry is not None and "detector" in entry.roles:
            raise  # a manifest detector whose file is missing or damaged: its error names the file and both ways to get it
        why = err.message.removeprefix(f"[models] detector = {value!r}").lstrip(": ")
        raise VcamdError(f"--detector {value}{' ' if why.startswith('is ') else ': '}{why}",
                         fix=f"give --detector a detector from the manifest ({known}; `vcamd models list`) "
                             "or the path of an SCRFD .onnx detector with keypoints") from None
