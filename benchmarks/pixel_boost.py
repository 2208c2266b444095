"""What `[swap] pixel_boost` costs per face, and what it gains: the 128-px swapper run on
(N/128)² polyphase tiles of the face aligned at N px (vcamd/faces/boost.py). It prints what it
measured; it asserts nothing.

    .venv/bin/python benchmarks/pixel_boost.py                         # light stand-in swapper
    .venv/bin/python benchmarks/pixel_boost.py --compute-equivalent    # inswapper-sized (138 M params): ~40 s of 2 cores
    .venv/bin/python benchmarks/pixel_boost.py --compute-equivalent --providers cuda

The scene: Newton's portrait at 1920×1080 (a 257-px face box; its 128-px crop covers ~430 frame
pixels), real SCRFD-2.5G. Per size: the face's align, swap (the model on every tile) and blend
milliseconds (median of --frames runs, after one warm-up) — the inswapper-sized model's work is
(N/128)² times its 174.6 GMAC, printed beside them — and the gain: the perfect swap (a model
whose output is its input) pasted back — the paste's PSNR on the face against the camera frame
itself, which is what a perfect swap's composite is; what it loses is what the crop's size loses.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import cv2

from vcamd.models.pipeline import build_face_engine

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compute-equivalent", action="store_true", help="the inswapper-sized stand-in (slow on a CPU)")
    parser.add_argument("--sizes", default="128,256,512")
    parser.add_argument("--frames", type=int, default=3, help="timed runs per size (after one warm-up)")
    parser.add_argument("--providers", default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    from vcamd.bench.pastes import face_core, psnr
    from vcamd.bench.standins import build_identity_swapper, build_recognizer, build_swapper, swapper_layer_stats
    from vcamd.common.quality import Level
    from vcamd.config.reading import config_from_dict
    from vcamd.faces.align import estimate_affine
    from vcamd.faces.engine import FaceEngine
    from vcamd.faces.results import StageTimer
    from vcamd.inference.runtime import Sessions

    sizes = [int(s) for s in args.sizes.split(",")]
    frame = cv2.resize(cv2.imread(str(ASSETS / "images" / "newton.png")), (1920, 1080), interpolation=cv2.INTER_CUBIC)
    sessions = Sessions([args.providers], args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        swapper = build_swapper(d / "swapper.onnx", compute_equivalent=args.compute_equivalent)
        identity = build_identity_swapper(d / "identity.onnx")
        recognizer = build_recognizer(d / "recognizer.onnx")

        def engine(size: int, model: Path) -> FaceEngine:
            cfg = config_from_dict({
                "models": {"detector": str(ASSETS / "models" / "scrfd_2.5g_kps.onnx"), "recognizer": str(recognizer),
                           "swapper": str(model), "providers": [args.providers], "threads": args.threads},
                "swap": {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True, "pixel_boost": size},
            })
            return build_face_engine(cfg, sessions)

        face = max(engine(128, identity).detect(frame), key=lambda f: f.area)
        print(f"1920x1080, face box {face.width:.0f} px, swapper: {'compute-equivalent (138 M params)' if args.compute_equivalent else 'light'} "
              f"stand-in, {args.providers}, {args.frames} timed runs per size")
        gmac = swapper_layer_stats()[1] / 1e9  # the real model's work per 128-px run (the compute-equivalent's layers)
        print(f"{'size':>5} {'tiles':>5} {'inswapper GMAC':>15} {'align ms':>9} {'swap ms':>10} {'blend ms':>9} {'per face ms':>12} {'× 128':>7} "
              f"{'perfect-swap PSNR dB':>21}")
        base = None
        for size in sizes:
            e = engine(size, swapper)
            e.swap_faces(frame, [face], Level.full)  # warm-up
            rows = []
            for _ in range(args.frames):
                timer = StageTimer()
                [swapped] = e.swap_faces(frame, [face], Level.full, timer)
                out = frame.copy()
                t0 = time.perf_counter()
                e.composite(out, swapped, face)
                rows.append((timer.ms["align"], timer.ms["swap"], (time.perf_counter() - t0) * 1000.0))
            align, swap, blend = (statistics.median(col) for col in zip(*rows))
            total = align + swap + blend
            base = base or total
            perfect = engine(size, identity)
            out = frame.copy()
            [swapped] = perfect.swap_faces(frame, [face], Level.full)
            perfect.composite(out, swapped, face)
            quality = psnr(out, frame, face_core(frame.shape, estimate_affine(face.kps, 128), 128))
            print(f"{size:5d} {(size // 128) ** 2:5d} {gmac * (size // 128) ** 2:15.1f} {align:9.2f} {swap:10.1f} {blend:9.2f} {total:12.1f} {total / base:7.2f} {quality:21.2f}")


if __name__ == "__main__":
    main()
