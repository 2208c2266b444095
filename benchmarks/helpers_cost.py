"""CPU cost per call of the per-frame helpers outside the live engine.

    .venv/bin/python benchmarks/helpers_cost.py               # 5 rounds; median of the rounds' medians

crop_around (the 192² tracking crop of a 720p face), dedupe_faces (the 29 faces of the group
photo), estimate_affine (5 keypoints → M), Blender.paste of a 128² crop at 720p and 1080p (colour
correction on, the default; the same crop every call, as a live swap is pasted frame after frame,
and a new crop every call, as the first paste of a new swap; and at `footprint_sized=False`, whose
float32 cross-fade the premultiplied one replaced for faces larger than their crop), the group photo fitted into 720p
(the groups bench's camera: 29 faces 24–31 px wide) — one face's paste, the composite of all 29
(`FaceEngine.composite`'s work: estimate_affine + paste each; also with the full-size paste,
`footprint_sized=False`, for comparison) and their 29 aligned 128² crops (`swap_faces`' align) —
and draw_badge at 720p. Process CPU time (`time.process_time`).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from live import SHARED  # noqa: E402


def _per_call_ms(fn, calls: int) -> float:
    fn()
    samples = []
    for _ in range(calls):
        t = time.process_time()
        fn()
        samples.append((time.process_time() - t) * 1000.0)
    return statistics.median(samples)


def main() -> None:
    import cv2

    from vcamd.bench.clips import fitted_frame
    from vcamd.common.types import Face
    from vcamd.faces.align import estimate_affine, for_warps, warp
    from vcamd.faces.blend import PREPARED_PIXELS, Blender
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions
    from vcamd.live.tracking.cropplan import crop_around
    from vcamd.live.tracking.trackedfaces import dedupe_faces
    from vcamd.privacy.badge import draw_badge

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    rng = np.random.default_rng(0)
    frames = {h: rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for w, h in ((1280, 720), (1920, 1080))}
    face_720 = Face(box=(500.0, 200.0, 700.0, 450.0), score=0.9, kps=np.zeros((5, 2), np.float32))
    solvay = cv2.imread(str(SHARED / "images" / "solvay_conference_1927.png"))
    detector = FaceDetector(SHARED / "models" / "scrfd_2.5g_kps.onnx", Sessions(["cpu"], 1))
    group = detector.detect(solvay)
    kps = {720: np.array([[600, 300], [680, 300], [640, 350], [610, 400], [670, 400]], np.float32)}
    kps[1080] = kps[720] * 1.5
    crop = rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)
    blender = Blender(128)
    new_crops = itertools.cycle([rng.integers(0, 256, (128, 128, 3), dtype=np.uint8) for _ in range(PREPARED_PIXELS // 128**2 + 1)])
    fitted = fitted_frame(solvay, (1280, 720))
    small = detector.detect(fitted)
    small_crops = [np.ascontiguousarray(255 - warp(fitted, estimate_affine(f.kps, 128), 128)) for f in small]
    full_size = Blender(128, footprint_sized=False)

    def composite(blender: Blender) -> None:
        out = fitted.copy()
        for face, swapped in zip(small, small_crops):
            blender.paste(out, swapped, estimate_affine(face.kps, 128), mouth_kps=face.kps)

    def align_all() -> None:
        source = for_warps(fitted, len(small), 128)
        for face in small:
            warp(source, estimate_affine(face.kps, 128), 128)

    cases = {
        "crop_around 192² (720p face)": lambda: crop_around(frames[720], face_720, 192),
        f"dedupe_faces ({len(group)} faces)": lambda: dedupe_faces(group),
        "estimate_affine": lambda: estimate_affine(kps[720], 128),
        "Blender.paste 128² at 720p": lambda: blender.paste(frames[720], crop, estimate_affine(kps[720], 128)),
        "Blender.paste 128² at 1080p": lambda: blender.paste(frames[1080], crop, estimate_affine(kps[1080], 128)),
        "Blender.paste 128² at 720p, float cross-fade (footprint_sized=False)": lambda: full_size.paste(frames[720], crop, estimate_affine(kps[720], 128)),
        "Blender.paste 128² at 1080p, float cross-fade (footprint_sized=False)": lambda: full_size.paste(frames[1080], crop, estimate_affine(kps[1080], 128)),
        "Blender.paste 128² at 720p, a new crop each call": lambda: blender.paste(frames[720], next(new_crops), estimate_affine(kps[720], 128)),
        "Blender.paste, one group face at 720p": lambda: blender.paste(fitted, small_crops[0], estimate_affine(small[0].kps, 128)),
        f"composite of the {len(small)} group faces at 720p (copy of the frame included)": lambda: composite(blender),
        f"composite of the {len(small)} group faces at 720p, full-size paste": lambda: composite(full_size),
        f"align the {len(small)} group faces (128² crops)": align_all,
        "draw_badge 720p": lambda: draw_badge(frames[720], "AI-altered", "bottom-right"),
    }
    rounds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            rounds[name].append(_per_call_ms(fn, args.calls))
    print(f"CPU-ms per call, median of {args.repeats} rounds × {args.calls} calls")
    print("| helper | ms | rounds |")
    print("| --- | --- | --- |")
    for name, values in rounds.items():
        print(f"| {name} | {statistics.median(values):.3f} | {', '.join(f'{v:.3f}' for v in values)} |")


if __name__ == "__main__":
    main()
