"""`vcamd faces IMAGE`: detect the faces in a photo with the configured detector and list them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vcamd.commands import Subcommands, add_config_option


def register(subparsers: Subcommands) -> None:
    parser = subparsers.add_parser(
        "faces",
        help="list the faces the detector finds in a photo",
        description="Detect the faces in IMAGE with the configured detector ([models] detector, [detection] size/threshold) "
        "and list them left to right: box, score and the 5 keypoints.",
    )
    parser.add_argument("image", type=Path, metavar="IMAGE", help="a JPEG or PNG photo")
    add_config_option(parser)
    parser.add_argument("--json", action="store_true", help='print {"faces": [{"box", "score", "kps"}]} as JSON')
    parser.set_defaults(func=run_faces)


def run_faces(args: argparse.Namespace) -> int:
    from vcamd.config.reading import load_config
    from vcamd.faces.detect import FaceDetector
    from vcamd.files.images import read_image
    from vcamd.inference.runtime import Sessions
    from vcamd.modelstore.store import ModelStore

    cfg, _ = load_config(args.config)
    image = read_image(args.image, "image")  # fail on a bad photo before paying for a model load
    [detector_path] = ModelStore.from_config(cfg.models).paths_for([(cfg.models.detector, "detector")])
    sessions = Sessions(list(cfg.models.providers), cfg.models.threads)
    detector = FaceDetector(detector_path, sessions, size=cfg.detection.size, threshold=cfg.detection.threshold)
    faces = detector.detect(image)
    if args.json:
        rows = [
            {
                "box": [round(v, 1) for v in face.box],
                "score": round(face.score, 4),
                "kps": [[round(float(x), 1), round(float(y), 1)] for x, y in face.kps],
            }
            for face in faces
        ]
        print(json.dumps({"faces": rows}))
        return 0
    print(f"{len(faces)} face(s) in {args.image} ({image.shape[1]}×{image.shape[0]}, detector {detector_path.name})")
    if faces:
        print(f"{'#':>3}  {'x1':>7} {'y1':>7} {'x2':>7} {'y2':>7}  {'score':>5}  {'left eye':>15}  {'right eye':>15}")
        for i, face in enumerate(faces, 1):
            (lx, ly), (rx, ry) = face.kps[0], face.kps[1]
            x1, y1, x2, y2 = face.box
            print(f"{i:>3}  {x1:7.1f} {y1:7.1f} {x2:7.1f} {y2:7.1f}  {face.score:5.2f}  ({lx:6.1f},{ly:6.1f})  ({rx:6.1f},{ry:6.1f})")
    return 0
