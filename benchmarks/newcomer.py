"""A second person comes into view beside a tracked face (face_selection = "all"): in how many
published frames is the newcomer recognisable? A check from outside the suite (docs/reliability.md,
"A newcomer beside a tracked face"); it prints what it measured, it asserts nothing.

    .venv/bin/python benchmarks/newcomer.py                          # 15 fps, SCRFD-500M, on_miss blur
    .venv/bin/python benchmarks/newcomer.py --fps 30 --seconds 10
    .venv/bin/python benchmarks/newcomer.py --detector scrfd_2.5g_kps.onnx --on-miss hold

The camera (1280×720, lossless, looped every 4 s): Newton's head at 30 % of the width in every
frame; from second 1 to second 3 a second real person (the largest face of insightface's own
`t1.jpg`) stands at 72 %. `vcamd run` publishes to an MP4 file through the real CLI with the
stand-in swapper of the privacy tests (it puts a stranger's real face on every face it is given:
vcamd/bench/leaks.py); every published frame is then checked at the newcomer's place with the
real MobileFaceNet: recognised as the newcomer (cosine above 0.3, and more than as the stranger)
is a raw face published. Printed: the frames, the runs of raw frames, and one letter a frame
(R raw, s swapped, . neither: covered, held, or no newcomer in view).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"
WIDTH, HEIGHT = 1280, 720


def _head(image, detector, leaks, face_px: float):
    """The image's largest face with its surroundings, the face `face_px` high (`leaks.head_cut`)."""
    return leaks.head_cut(image, max(detector.detect(image), key=lambda f: f.area), face_px)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fps", type=float, default=15.0)
    parser.add_argument("--detector", default="scrfd_500m_kps.onnx", help="the daemon's detector, in ../shared/assets/models")
    parser.add_argument("--on-miss", default="blur", choices=["blur", "hold"])
    parser.add_argument("--full-every", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=16.0, help="published frames to wait for, in seconds of the camera")
    args = parser.parse_args()

    import insightface
    from privacy import leak_checkers  # benchmarks/privacy.py: this folder is on the path

    from vcamd.bench import standins
    from vcamd.config.reading import config_from_dict

    leaks, both, recognizer, (stranger_crop, stranger) = leak_checkers()

    newton, (ncx, ncy) = _head(cv2.imread(str(ASSETS / "images" / "newton.png")), both[1], leaks, HEIGHT / 3)
    t1 = Path(insightface.__file__).parent / "data" / "images" / "t1.jpg"
    newcomer, (hcx, hcy) = _head(cv2.imread(str(t1)), both[1], leaks, HEIGHT / 4)
    period, enters, leaves = round(4 * args.fps), round(args.fps), round(3 * args.fps)
    frames = []
    for i in range(period):
        frame = np.full((HEIGHT, WIDTH, 3), leaks.BACKGROUND, np.uint8)
        leaks.paste(frame, newton, int(0.3 * WIDTH - ncx), int(HEIGHT / 2 - ncy))
        if enters <= i < leaves:
            leaks.paste(frame, newcomer, int(0.72 * WIDTH - hcx), int(HEIGHT / 2 - hcy))
        frames.append(frame)
    placed = leaks.placements_in(frames[enters], both, recognizer)
    assert len(placed) == 2, f"expected Newton and the newcomer, found {len(placed)} faces"
    place = max(placed, key=lambda p: p.face.box[0])
    print(f"camera: {period} frames looped at {args.fps:g} fps; the newcomer in frames {enters}–{leaves - 1}, "
          f"face {place.face.width:.0f} px wide", flush=True)

    with tempfile.TemporaryDirectory(prefix="vcamd-newcomer-") as tmp:
        work = Path(tmp)
        clip = leaks.Clip(leaks.write_clip(work / "camera.avi", frames, args.fps), (WIDTH, HEIGHT), args.fps, frames, placed)
        cfg = config_from_dict({
            "models": {"detector": str(ASSETS / "models" / args.detector),
                       "swapper": str(leaks.build_identity_swapper(work / "stranger.onnx", stranger_crop)),
                       "recognizer": str(standins.build_recognizer(work / "recognizer.onnx")), "providers": ["cpu"], "threads": 1},
            "swap": {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True,
                     "face_selection": "all", "on_miss": args.on_miss},
            "detection": {"full_every": args.full_every},
            "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
        })
        wanted = round(args.fps * args.seconds)
        published, stats = leaks.run_daemon_until(work, "run", cfg, clip, frames=wanted, swapped_faces=wanted)

    print(f"published {len(published)} frames: {stats['frames']}; faces {stats['faces']}; levels {stats['degradation']['level_share']}")
    letters, runs, run = [], [], 0
    for frame in published:
        embedding = recognizer.embed(frame, place.face)
        raw = leaks.recognised_as(embedding, place.embedding, stranger) is not None
        letters.append("R" if raw else "s" if float(embedding @ stranger) > leaks.MAX_COSINE else ".")
        if raw:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    if run:
        runs.append(run)
    print(f"the newcomer recognised raw in {sum(runs)} of {len(published)} frames; runs of {runs}")
    print("per frame (R raw, s swapped, . neither):", "".join(letters))


if __name__ == "__main__":
    main()
