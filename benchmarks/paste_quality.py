"""How good a paste is at the face's real size: the footprint-sized paste against the full-size one.

    .venv/bin/python benchmarks/paste_quality.py            # ~1 min on 2 cores

`Blender.paste` works at the size the face covers in the frame (`footprint_sized=True`, the
default): a crop with ≥ SHRINK_RATIO crop pixels per frame pixel is area-halved before its warp, and
a face whose paste rectangle is smaller than the crop is colour-corrected there. The reference is
the paste as it was before (`footprint_sized=False`: everything at the crop's 128², one bilinear
step down to the face). Real faces, real detector (SCRFD-2.5G), the light stand-in swapper:

1. Geometry (colour correction off). Newton and the three largest faces of the Solvay photo, the
   photo area-downscaled so that the face's 128² crop covers 16…128 frame pixels (and 302: the
   181-px face of the 720p one-face bench). The crop is taken from the full-size photo (sharp).
   * swap: the stand-in's output pasted; PSNR on the face (mask ≥ ½) against the anti-aliased
     ideal (`vcamd.bench.pastes.ideal_paste`, 8× supersampled);
   * identity: the face's own sharp crop pasted back; PSNR against the downscaled photo itself —
     a perfect swap's ideal composite is the camera frame.
2. The live configuration (colour correction on), every face of two scenes pasted into its own
   copy of the frame: the Solvay photo fitted into 720p (the groups bench: 29 faces, 24–31 px wide)
   and crowd_selfie.jpg (a colour photo, ~440 faces of 8–150 px). Per face: PSNR and largest
   difference between the two pastes on the face; how far the pasted face's mean LAB colour lies
   from the original face's; how much the paste changed the face (mean |paste − original| on it:
   the swap is shown, not the original face); and for a swap that came out too blue (the face's
   own crop, tinted), how far colour correction left its colour from the face's.
3. A face at least its crop's size (colour-corrected in crop space): its own statistics taken on
   every other pixel of every other row of its crop (the live paste: a quarter of the pixels warped,
   converted and measured) against the whole crop's — the same figures, per face.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from live import SHARED  # noqa: E402

FOOTPRINTS = (16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 64, 96, 128, 302)


def main() -> None:
    import cv2

    from vcamd.bench.clips import fitted_frame
    from vcamd.bench.pastes import face_core, footprint, ideal_paste, psnr, scaled_for_footprint
    from vcamd.bench.standins import build_swapper
    from vcamd.faces.align import estimate_affine, warp
    from vcamd.faces.blend import Blender
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.swap import Swapper
    from vcamd.inference.runtime import Sessions

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--detector", type=Path, default=SHARED / "models" / "scrfd_2.5g_kps.onnx")
    args = p.parse_args()

    sessions = Sessions(["cpu"], 1)
    detector = FaceDetector(args.detector, sessions)
    with tempfile.TemporaryDirectory() as tmp:
        swapper = Swapper(build_swapper(Path(tmp) / "swapper.onnx"), sessions)
    latent = swapper.latent(np.random.default_rng(0).standard_normal(512).astype(np.float32))
    images = {name: cv2.imread(str(SHARED / "images" / name)) for name in ("newton.png", "solvay_conference_1927.png", "crowd_selfie.jpg")}
    solvay_faces = sorted(detector.detect(images["solvay_conference_1927.png"], 1280), key=lambda f: f.area, reverse=True)[:3]
    faces = [("newton", images["newton.png"], detector.detect(images["newton.png"])[0])]
    faces += [(f"solvay{i}", images["solvay_conference_1927.png"], face) for i, face in enumerate(solvay_faces)]
    full, sized = Blender(128, color_correction=False, footprint_sized=False), Blender(128, color_correction=False)

    print("1. Geometry, colour correction off: PSNR dB on the face, mean of 4 faces (worst change new − full-size)")
    print("| crop footprint px | swap vs ideal: full-size | footprint-sized | identity vs frame: full-size | footprint-sized |")
    print("| --- | --- | --- | --- | --- |")
    for pixels in FOOTPRINTS:
        rows = []
        for _name, image, face in faces:
            crop, _ = swapper.align(image, face)
            swapped = swapper.swap([crop], latent)[0]
            small, small_face = scaled_for_footprint(image, face, pixels)
            m = estimate_affine(small_face.kps, 128)
            core = face_core(small.shape, m, 128)
            row = []
            for content, ideal in ((swapped, ideal_paste(small, swapped, m)), (crop, small)):
                for blender in (full, sized):
                    out = small.copy()
                    blender.paste(out, content, m)
                    row.append(psnr(out, ideal, core))
            rows.append(row)
        means = np.mean(rows, axis=0)
        worst_swap = min(r[1] - r[0] for r in rows)
        worst_identity = min(r[3] - r[2] for r in rows)
        print(f"| {pixels} | {means[0]:.1f} | {means[1]:.1f} ({worst_swap:+.1f}) | {means[2]:.1f} | {means[3]:.1f} ({worst_identity:+.1f}) |")

    print()
    print("2. Live configuration, colour correction on, each face pasted alone: medians over the faces (worst)")
    print("| scene | faces | footprint px | PSNR new vs full-size on the face | max |new − full-size| | colour error full-size | footprint-sized "
          "| face change full-size | footprint-sized | tinted swap's colour error full-size | footprint-sized |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    group = fitted_frame(images["solvay_conference_1927.png"], (1280, 720))
    crowd = images["crowd_selfie.jpg"]
    full_cc, sized_cc = Blender(128, footprint_sized=False), Blender(128)
    for scene, frame, found in (("Solvay @720p", group, detector.detect(group)), ("crowd_selfie", crowd, detector.detect(crowd, 1280))):
        per_face = []
        crops = swapper.swap([swapper.align(frame, face)[0] for face in found], latent)
        lab = cv2.cvtColor(frame, cv2.COLOR_BGR2LAB).astype(np.float64)
        for face, swapped in zip(found, crops):
            m = estimate_affine(face.kps, 128)
            core = face_core(frame.shape, m, 128, 0.9)
            if core.sum() < 16:
                continue
            outs = []
            for blender in (full_cc, sized_cc):
                out = frame.copy()
                blender.paste(out, swapped, m)
                outs.append(out)
            colour = [_colour_error(o, lab, core) for o in outs]
            change = [float(np.abs(o[core].astype(np.float64) - frame[core]).mean()) for o in outs]
            diff = int(np.abs(outs[0][core].astype(np.int16) - outs[1][core]).max())
            # A swap that came out too blue: the face's own crop, tinted. Colour correction's job
            # is to bring it back to the face's colour.
            tinted = np.clip(warp(frame, m, 128).astype(np.int16) + np.int16([45, -25, -30]), 0, 255).astype(np.uint8)
            back = []
            for blender in (full_cc, sized_cc):
                out = frame.copy()
                blender.paste(out, tinted, m)
                back.append(_colour_error(out, lab, core))
            per_face.append((footprint(m, 128), psnr(outs[1], outs[0], core), diff, *colour, *change, *back))
        for lo, hi in ((0, 32), (32, 64), (64, 128), (128, 1e9)):
            bucket = [r for r in per_face if lo <= r[0] < hi]
            if not bucket:
                continue
            cols = list(zip(*bucket))
            med = [statistics.median(c) for c in cols]
            span = f"{lo}–{hi:.0f}" if hi < 1e9 else f"≥ {lo}"
            print(f"| {scene} | {len(bucket)} | {span} | {med[1]:.1f} ({min(cols[1]):.1f}) | {med[2]:.0f} ({max(cols[2])}) | "
                  f"{med[3]:.2f} ({max(cols[3]):.1f}) | {med[4]:.2f} ({max(cols[4]):.1f}) | {med[5]:.1f} | {med[6]:.1f} | "
                  f"{med[7]:.2f} ({max(cols[7]):.1f}) | {med[8]:.2f} ({max(cols[8]):.1f}) |")
    _halved_statistics(detector, swapper, latent, images)


def _halved_statistics(detector, swapper, latent, images) -> None:  # type: ignore[no-untyped-def]
    """3. A face at least its crop's size: its colour statistics on every other pixel of every other
    row of its crop (the live paste) against the whole crop's (`original_crop` given, as before)."""
    import cv2

    from vcamd.bench.clips import fitted_frame
    from vcamd.bench.pastes import face_core, footprint, psnr
    from vcamd.faces.align import estimate_affine, warp
    from vcamd.faces.blend import Blender

    print()
    print("3. Large faces' colour statistics on a quarter of their crop's pixels (live) against the whole crop's: per face")
    print("| face | footprint px | PSNR quarter vs whole on the face | max |quarter − whole| | mean | colour error whole | quarter "
          "| tinted swap's colour error whole | quarter |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    scenes = [(f"newton @{h}p", fitted_frame(images["newton.png"], (w, h))) for w, h in ((854, 480), (1280, 720), (1920, 1080))]
    crowd = images["crowd_selfie.jpg"]
    scenes += [(f"crowd_selfie #{i}", crowd) for i in range(6)]
    crowd_faces = sorted(detector.detect(crowd, 1280), key=lambda f: f.area, reverse=True)[:6]
    for k, (name, frame) in enumerate(scenes):
        face = detector.detect(frame)[0] if k < 3 else crowd_faces[k - 3]
        m = estimate_affine(face.kps, 128)
        core = face_core(frame.shape, m, 128, 0.9)
        swapped = swapper.swap([swapper.align(frame, face)[0]], latent)[0]
        tinted = np.clip(warp(frame, m, 128).astype(np.int16) + np.int16([45, -25, -30]), 0, 255).astype(np.uint8)
        lab = cv2.cvtColor(frame, cv2.COLOR_BGR2LAB).astype(np.float64)
        row = []
        for crop in (swapped, tinted):
            whole, half = frame.copy(), frame.copy()
            Blender(128).paste(whole, crop, m, original_crop=warp(frame, m, 128))
            Blender(128).paste(half, crop, m)
            row.append((whole, half))
        (whole, half), (t_whole, t_half) = row
        diff = np.abs(half[core].astype(np.int16) - whole[core])
        print(f"| {name} | {footprint(m, 128):.0f} | {psnr(half, whole, core):.1f} | {diff.max()} | {diff.mean():.2f} | "
              f"{_colour_error(whole, lab, core):.2f} | {_colour_error(half, lab, core):.2f} | {_colour_error(t_whole, lab, core):.2f} | "
              f"{_colour_error(t_half, lab, core):.2f} |")


def _colour_error(out, lab, core) -> float:  # type: ignore[no-untyped-def]
    """The largest of |mean L|, |mean a|, |mean b| differences between `out` and the original (its
    LAB `lab`) on the face's core."""
    import cv2

    pasted = cv2.cvtColor(out, cv2.COLOR_BGR2LAB).astype(np.float64)[core].mean(0)
    return float(np.abs(pasted - lab[core].mean(0)).max())


if __name__ == "__main__":
    main()
