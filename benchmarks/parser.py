"""What the face parser (`[models] parser`) costs per face at each rung of the quality ladder, and
what a hand in front of a face looks like with it. It prints what it measured; it asserts nothing.

    .venv/bin/python benchmarks/parser.py                                  # ~1 min on 2 cores
    .venv/bin/python benchmarks/parser.py --image docs/hand-in-front.jpg

The parser runs on the swap worker's thread (`FaceEngine.swap_faces`, stage "parse"), on the
camera's aligned crop of each face resized to 512², so the loop pays nothing. Its cost is the
compute-equivalent BiSeNet stand-in's (ResNet-18 context path at 512², `standins.build_parser`,
random weights) plus the crop's resize and the region mask at the pasted crop's size: 128 (no
pixel boost), 256 (`[swap] pixel_boost = 256`, the rows by rung) or 512 (the enhancer's FFHQ crop,
the last row). Newton at 720p, the light stand-in swapper and enhancer, one face; median of --frames runs per rung after one warm-up.

`--image`: the camera frame with a synthetic gloved hand over the face (vcamd.bench.hands, as tests/faces/test_parse.py),
the swap pasted without a parser, and with the rule-based parser stand-in (skin by colour), side by side.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import cv2
import numpy as np

from vcamd.models.pipeline import build_face_engine

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--providers", default="cpu")
    parser.add_argument("--image", type=Path, default=None, help="write the hand-in-front picture here (.jpg)")
    args = parser.parse_args()

    from vcamd.bench.standins import build_enhancer, build_parser, build_recognizer, build_swapper, parser_layer_stats
    from vcamd.common.quality import Level
    from vcamd.config.reading import config_from_dict
    from vcamd.faces.engine import FaceEngine
    from vcamd.faces.results import StageTimer
    from vcamd.inference.runtime import Sessions

    sessions = Sessions([args.providers], args.threads)
    newton = cv2.imread(str(ASSETS / "images" / "newton.png"))
    frame = cv2.resize(newton, (1280, 720), interpolation=cv2.INTER_CUBIC)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        models = {"swapper": build_swapper(d / "swapper.onnx"), "recognizer": build_recognizer(d / "recognizer.onnx"),
                  "enhancer": build_enhancer(d / "enhancer.onnx")}
        cost_parser, rule_parser = build_parser(d / "bisenet.onnx", compute_equivalent=True), build_parser(d / "rule.onnx")

        def engine(parser_path: Path | None, enhancer: bool = False, **swap) -> FaceEngine:
            cfg = config_from_dict({
                "models": {"detector": str(ASSETS / "models" / "scrfd_2.5g_kps.onnx"), **{k: str(v) for k, v in models.items()},
                           "parser": str(parser_path) if parser_path else "", "providers": [args.providers], "threads": args.threads},
                "swap": {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True, **swap},
                "enhancer": {"enabled": enhancer},
            })
            return build_face_engine(cfg, sessions)

        timed = engine(cost_parser, pixel_boost=256)
        rows = [(level.name, timed, level) for level in Level] + [("full+enhancer", engine(cost_parser, True, pixel_boost=256), Level.full)]
        face = max(timed.detect(frame), key=lambda f: f.area)
        params, macs = parser_layer_stats()
        print(f"1280x720, face box {face.width:.0f} px; parser: compute-equivalent BiSeNet stand-in ({params / 1e6:.1f} M params, "
              f"{macs / 1e9:.1f} GMAC at 512²), {args.providers}, {args.threads} thread(s), {args.frames} runs per rung")
        print(f"{'rung':13} {'pasted crop':>12} {'parse ms/face':>14} {'swap ms/face':>13} {'parse / swap':>13}")
        for name, e, level in rows:
            e.swap_faces(frame, [face], level)  # warm-up
            runs = []
            for _ in range(args.frames):
                timer = StageTimer()
                [swapped] = e.swap_faces(frame, [face], level, timer)
                runs.append((timer.ms["parse"], timer.ms["swap"]))
            parse, swap = (statistics.median(col) for col in zip(*runs))
            print(f"{name:13} {swapped.size:>10}px {parse:14.1f} {swap:13.1f} {parse / swap:13.2f}")

        if args.image is not None:
            from vcamd.bench.hands import with_hand  # the parser tests' synthetic hand

            face = max(timed.detect(newton), key=lambda f: f.area)
            camera, _hand = with_hand(newton, face, reach=0.35)
            panels = [camera]
            for parser_path in (None, rule_parser):
                e = engine(parser_path)
                out = camera.copy()
                [swapped] = e.swap_faces(camera, [face], Level.no_enhancer)
                e.composite(out, swapped, face)
                panels.append(out)
            x1, y1, x2, y2 = (int(v) for v in face.box)
            pad = int(0.5 * (x2 - x1))
            cut = [p[max(0, y1 - pad) : y2 + pad, max(0, x1 - pad) : x2 + 2 * pad] for p in panels]
            labels = ("camera", "swap, no parser", "swap, parser")
            for image, text in zip(cut, labels):
                cv2.putText(image, text, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
            sheet = np.hstack([np.pad(c, ((0, 0), (0, 4), (0, 0)), constant_values=255) for c in cut])
            args.image.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(args.image), sheet, [cv2.IMWRITE_JPEG_QUALITY, 88])
            print(f"wrote {args.image} ({args.image.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
