"""Does an int8 copy pay for the enhancer and the face parser (issue 37's "where it pays")? It prints
what it measured; it asserts nothing.

    .venv/bin/python benchmarks/int8_models.py                 # ~3 min on 2 cores (quantising included)
    .venv/bin/python benchmarks/int8_models.py --rounds 5 --threads 2 --models parser

The compute-equivalent stand-ins (`vcamd.bench.standins`: GFPGAN 1.4's layer list, ~86 M parameters,
512²; BiSeNet with a ResNet-18 context path, 512²; random weights) are quantised the way the swapper's
copy is (`vcamd.models.quantize.quantize_copy`), calibrated on real aligned faces (newton.png and the
1927 Solvay photo in ../shared/assets, up to 8 faces), and run through vcamd's own `Enhancer` and
`FaceParser`, the copy loaded as vcamd loads it (`Sessions.run_copy`). Float and int8 alternate face
by face; the figure is each side's median ms a face.

The copy is fed and checked the way vcamd builds one (`vcamd.models.int8roles`: each role's calibration
crop, feeds and fidelity check, the real MobileFaceNet as the recogniser); the last column is that
check's verdict on the stand-in, printed for completeness only: random weights spread a layer's values
in a way trained weights do not, so it says nothing about a real GFPGAN's or BiSeNet's copy — that is
what the check on the user's own weights is for (a copy that fails it stays float in vcamd).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed runs a face a side (after one warm-up run)")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0 = all cores)")
    parser.add_argument("--models", default="enhancer,parser")
    args = parser.parse_args()

    from vcamd.faces.calibration import CALIBRATION_FACES
    from vcamd.faces.detect import FaceDetector
    from vcamd.files.images import read_image
    from vcamd.inference.precision import int8_units, needs_reduced_range
    from vcamd.inference.runtime import Sessions

    detector = FaceDetector(ASSETS / "models" / "scrfd_2.5g_kps.onnx", Sessions(["cpu"], args.threads), 640, 0.5)
    images = [read_image(ASSETS / "images" / name, name) for name in ("newton.png", "solvay_conference_1927.png")]
    faces = [(image, face) for image in images for face in sorted(detector.detect(image), key=lambda f: -f.area)][:CALIBRATION_FACES]
    units = int8_units()
    print(f"{len(faces)} faces; CPU int8 units: {units.describe()}; ONNX Runtime threads {args.threads or 'all cores'}")
    print(f"{'model':10s} {'float ms':>9s} {'int8 ms':>8s} {'speed-up':>9s}  {'MB float → int8':>16s}  the fidelity check (stand-in weights)")
    with tempfile.TemporaryDirectory(prefix="vcamd-int8-models-") as tmp:
        for name in args.models.split(","):
            row = measure(name.strip(), Path(tmp), faces, args, needs_reduced_range(units))
            print(row, flush=True)


def measure(name: str, folder: Path, faces: list[tuple[Any, Any]], args: argparse.Namespace, reduce_range: bool) -> str:
    from vcamd.bench.standins import build_enhancer, build_parser
    from vcamd.faces.calibration import CalibrationFaces
    from vcamd.faces.enhance import Enhancer
    from vcamd.faces.parse import FaceParser
    from vcamd.inference.runtime import Sessions
    from vcamd.models.int8roles import calibration_crop, check_for
    from vcamd.models.quantize import quantize_copy

    model, copy = folder / f"{name}.onnx", folder / f"{name}.int8.onnx"
    if name == "enhancer":
        build_enhancer(model, compute_equivalent=True)
        make: Callable[[Sessions], Any] = lambda sessions: Enhancer(model, sessions, strength=1.0)  # noqa: E731
    elif name == "parser":
        build_parser(model, compute_equivalent=True)
        make = lambda sessions: FaceParser(model, sessions)  # noqa: E731
    else:
        raise SystemExit(f"--models {name}: enhancer or parser")
    floating = make(Sessions(["cpu"], args.threads))
    spec = calibration_crop(name, model)
    crops = [spec.align(image, face.kps)[0] for image, face in faces]
    recogniser = ASSETS / "models" / "mobilefacenet.onnx"
    source = np.zeros(128, np.float32)  # no source photo here: the identity drop reads 0; PSNR and int8 vs float face stand
    check = check_for(name, model, recogniser, CalibrationFaces(crops, source), ["cpu"], args.threads)
    started = time.monotonic()
    quantize_copy(model, copy, check.feeds(), reduce_range=reduce_range)
    built_s = time.monotonic() - started
    sessions = Sessions(["cpu"], args.threads)
    sessions.run_copy(model, copy)
    quantised = make(sessions)
    assert sessions.runs_copy(model), "the int8 copy did not load"
    run = (lambda m, c: m.restore(c)) if name == "enhancer" else (lambda m, c: m.classes([c])[0])
    for m in (floating, quantised):
        run(m, crops[0])  # the first run allocates
    times: dict[str, list[float]] = {"float": [], "int8": []}
    outs: dict[str, list[Any]] = {"float": [], "int8": []}
    for r in range(args.rounds):
        for crop in crops:
            for side, m in (("float", floating), ("int8", quantised)):
                t0 = time.perf_counter()
                out = run(m, crop)
                times[side].append((time.perf_counter() - t0) * 1000.0)
                if r == 0:
                    outs[side].append(out)
    said = check.compare(outs["float"], outs["int8"]).summary()
    f, q = statistics.median(times["float"]), statistics.median(times["int8"])
    sizes = f"{model.stat().st_size / 1e6:.0f} → {copy.stat().st_size / 1e6:.0f}"
    return f"{name:10s} {f:9.0f} {q:8.0f} {f / q:8.2f}×  {sizes:>16s}  quantised in {built_s:.0f} s; the check: {said}"


if __name__ == "__main__":
    main()
