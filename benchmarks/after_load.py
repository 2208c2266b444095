"""After a load: does the quality ladder come back? A still photo as the camera (face_selection
"all", watchdog automatic), two busy processes (one core each, normal priority: the call app)
from `--load-from` to `--load-until` seconds after the first frame out, quiet after that. Prints
the watchdog's transitions (seconds from the first frame, what triggered each) and the share of
each quality level in every 5 s; asserts nothing (docs/performance.md, "The live loop").

    .venv/bin/python benchmarks/after_load.py                                  # crowd_selfie, 1080p, load 3→45 s, 90 s
    .venv/bin/python benchmarks/after_load.py --photo solvay_conference_1927.png --resolution 720p
    .venv/bin/python benchmarks/after_load.py --load-until 999 --seconds 70     # a load that stays

The engine, models and int8 copies are `loop_cost.py`'s (SCRFD-2.5G, the light stand-in swapper,
`--precision auto` by default). A crowd at full quality runs p95 ~50 ms on these 2 cores: over the
40 ms budget, but with too few frames over it for a step down, so neither the headroom nor a window
that fits ever shows: without `Watchdog._probe`, a load that took it down would leave it there.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import loop_cost as lc

BUCKET_S = 5.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--photo", default="crowd_selfie.jpg", help="a photo in ../shared/assets/images")
    p.add_argument("--resolution", default="1080p")
    p.add_argument("--seconds", type=float, default=90.0, help="frames out: this many seconds at 30 fps")
    p.add_argument("--load-from", type=float, default=3.0)
    p.add_argument("--load-until", type=float, default=45.0)
    p.add_argument("--load", type=int, default=2, help="busy processes")
    p.add_argument("--precision", default="auto", choices=("auto", "int8", "float"))
    p.add_argument("--json", type=Path)
    args = p.parse_args()

    from vcamd.bench.clips import still_clip
    from vcamd.bench.runs import scenario_config
    from vcamd.bench.scenarios import _cache_dir
    from vcamd.config.schema import Config
    from vcamd.files.images import read_image

    settings = lc._settings(args.resolution, None, lc.DETECTOR)
    first_out, finished = threading.Event(), threading.Event()
    marks: dict[str, float] = {}

    def on_frame() -> None:
        if not first_out.is_set():
            marks["first"] = time.monotonic()
            first_out.set()

    def load() -> None:
        first_out.wait()
        if finished.wait(max(0.0, marks["first"] + args.load_from - time.monotonic())):
            return
        with lc.busy(args.load):
            marks["load_on"] = time.monotonic() - marks["first"]
            finished.wait(max(0.0, marks["first"] + args.load_until - time.monotonic()))
            marks["load_off"] = time.monotonic() - marks["first"]

    with tempfile.TemporaryDirectory(prefix="vcamd-afterload-") as tmp_name, _cache_dir(Path(tmp_name) / "optimized"):
        tmp = Path(tmp_name)
        clip = still_clip(read_image(lc.ASSETS / "images" / args.photo, "photo"), settings, tmp, (settings.width, settings.height))
        cfg = scenario_config("groups", settings, tmp, Config(), face_selection="all")
        precision = argparse.Namespace(precision=None if args.precision == "float" else [args.precision])
        cfg, _ = lc._precision(cfg, precision, clip, settings, tmp)
        loader = threading.Thread(target=load, name="load", daemon=True)
        loader.start()
        try:
            stats, _, _ = lc._vcamd_run(clip, cfg, int(args.seconds * 30), None, on_frame=on_frame)
        finally:
            end = time.monotonic()
            finished.set()
            first_out.set()  # a run that never published: the loader ends too
            loader.join()
    start = marks.get("first", end)
    moves = [(t["time"] - start, t["from"], t["to"], t["reason"], t.get("trigger", {}), t.get("compared") or {})
             for t in stats["degradation"]["transitions"]]
    print(f"{args.photo} {args.resolution}, {args.load} busy processes from {marks.get('load_on', float('nan')):.1f} "
          f"to {marks.get('load_off', float('nan')):.1f} s, {end - start:.1f} s of frames out")
    for at, frm, to, reason, trigger, compared in moves:
        above = f" (rung above: p95 {compared['p95_ms']:.1f})" if compared else ""
        print(f"  {at:6.1f} s  {frm} → {to}  {reason}: window p95 {trigger.get('p95_ms', 0):.1f} ms, "
              f"over budget {trigger.get('over_budget_share', 0):.2f}{above}")
    shares = level_shares(moves, end - start)
    for bucket, share in shares.items():
        print(f"  {bucket:5.0f}–{bucket + BUCKET_S:.0f} s  " + ", ".join(f"{name} {v:.2f}" for name, v in share.items()))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "load": marks, "transitions": moves,
                                         "shares": shares, "latency_ms": stats["latency_ms"]}, indent=1))


def level_shares(moves: list[tuple], seconds: float) -> dict[float, dict[str, float]]:
    """The share of time at each level in every BUCKET_S, from the transitions (time, from, to, …)."""
    spans, level, since = [], "full", 0.0
    for at, _, to, *_ in moves:
        spans.append((since, at, level))
        level, since = to, at
    spans.append((since, seconds, level))
    shares: dict[float, dict[str, float]] = {}
    bucket = 0.0
    while bucket < seconds:
        top = min(bucket + BUCKET_S, seconds)
        share: dict[str, float] = {}
        for a, b, name in spans:
            overlap = min(b, top) - max(a, bucket)
            if overlap > 0:
                share[name] = round(share.get(name, 0.0) + overlap / (top - bucket), 2)
        shares[bucket] = share
        bucket += BUCKET_S
    return shares


if __name__ == "__main__":
    main()
