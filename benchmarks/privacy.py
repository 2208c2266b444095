"""How unrecognisable an obscured face is: the table in docs/reliability.md ("privacy: obscured faces").

    .venv/bin/python benchmarks/privacy.py            # Newton and Solvay scenes, both head boxes
    .venv/bin/python benchmarks/privacy.py --crowd    # also the crowd selfie (report only: most of its
                                                      # faces are 10–40 px, too small for the recogniser raw)

For every face the real SCRFD detectors find at 0.5, its head box is obscured with
`vcamd.privacy.obscure.obscure_region`; then both SCRFD models look for a face there (best score
reported) and MobileFaceNet compares the obscured face with the raw one, aligned at the raw face's
keypoints (pass: score < 0.5 and cosine ≤ 0.3). "baseline" is the cosine of the raw face with a
0.75× resampled copy of itself: what a face the recogniser still knows scores. The last lines show
the same measurement for the 16-px pixelation used before, and the cost per obscured pixel.
The measurement code is vcamd/bench/obscured.py, the same one tests/privacy asserts with.
Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"


def leak_checkers(threads: int = 2):
    """What the privacy benchmarks measure with (the leak tests' tools, `vcamd.bench.leaks`): the
    module, both real SCRFD detectors, the real MobileFaceNet, and the stranger the stand-in swapper
    pastes (crowd_selfie's largest face) as (its aligned crop, its embedding)."""
    from vcamd.bench import leaks

    both, recognizer = leaks.load_checkers(ASSETS / "models", threads)
    return leaks, both, recognizer, leaks.stranger(ASSETS / "images", both[1], recognizer)


def _row(result, detectors) -> str:
    scores = "  ".join(f"{result.max_score[d]:>10.2f}" for d in detectors)
    widths = [f.width for f in result.faces]
    return (f"| {result.name:<34} | {result.scale:>4.1f} | {len(result.faces):>5} | {min(widths):>4.0f}–{max(widths):<4.0f} | "
            f"{scores} | {result.max_cosine:>6.2f} | {result.min_baseline:>8.2f} |")


def cost_per_pixel(obscure_region) -> list[tuple[int, float]]:
    frame = np.random.default_rng(0).integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    rows = []
    for side in (64, 128, 256, 512, 1024):
        box = (100, 20, 100 + side, 20 + side)
        runs = max(20, 4_000_000 // (side * side))
        start = time.perf_counter()
        for _ in range(runs):
            obscure_region(frame, box)
        rows.append((side, (time.perf_counter() - start) / runs * 1e9 / (side * side)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crowd", action="store_true", help="also measure the crowd selfie (faces 10–90 px at 720p)")
    args = parser.parse_args(argv)
    if not ASSETS.is_dir():
        print(f"shared assets not found at {ASSETS}", file=sys.stderr)
        return 2
    from vcamd.bench import obscured as measure
    from vcamd.privacy.obscure import obscure_region

    models = measure.load_models(ASSETS)
    detectors = list(models.detectors)
    print(f"| {'scene':<34} | head | faces | face w px | " + "  ".join(f"{d.split('_')[1]:>10}" for d in detectors)
          + " | max cos | baseline |")
    print("|" + "|".join(["---"] * (6 + len(detectors))) + "|")
    failed = False
    for name, scene in measure.scenes(ASSETS, models, crowd=args.crowd).items():
        faces = measure.find_faces(models, scene)
        for scale in measure.HEAD_SCALES:
            result = measure.measure(models, name, scene, faces, scale)
            print(_row(result, detectors))
            if not name.startswith("crowd"):  # report only: its raw 10–40 px faces are not recognisable either
                failed |= max(result.max_score.values()) >= measure.DETECTION_THRESHOLD or result.max_cosine > measure.MAX_COSINE
    scenes = measure.scenes(ASSETS, models)
    for name in ("newton, face 1/3 of 720p", "solvay_conference_1927.png @720p"):
        faces = measure.find_faces(models, scenes[name])
        result = measure.measure(models, f"{name} (old 16-px)", scenes[name], faces, measure.ENGINE_HEAD_SCALE, measure.pixelate_16px)
        print(_row(result, detectors))
    print()
    print("cost: " + ", ".join(f"{side}²: {ns:.1f} ns/px" for side, ns in cost_per_pixel(obscure_region)))
    print("FAIL: a face was found or recognised in an obscured region" if failed else "all obscured faces pass (score < 0.5, cosine ≤ 0.3)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
