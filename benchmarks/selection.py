"""The user in view from the start, a larger face coming closer (face_selection = "largest", the
default): in how many published frames is the user recognisable, and the larger face? A check from
outside the suite (docs/reliability.md, "The user keeps the swap"); it prints, it asserts nothing.

    .venv/bin/python benchmarks/selection.py                   # others = "obscure" (the default)
    .venv/bin/python benchmarks/selection.py --others show --seconds 20

The camera (1280×720, 15 fps, lossless, looped every 14 s): Newton's head (a face 146 px high) at
25 % of the width in every frame, alone for 7 s; then a larger real face (315 px: a face of
crowd_selfie.jpg) slides in from the right edge over one second, stays 2.3 s, is gone 1 s, and
appears at once at 72 % for 2.7 s (the clip of tests/privacy/test_selection_e2e.py). The clip plays
while the models load, so the first choice of "largest" may fall on the larger face; the figures
are also given from the first frame that shows the user swapped on. `vcamd run` publishes to an MP4 file through the real CLI with the
stand-in swapper of the privacy tests (a stranger's real face on what it swaps:
vcamd/bench/leaks.py); every published frame is checked with the real MobileFaceNet at both
places: recognised as the raw face there (cosine above 0.3, and more than as the stranger) is a
raw face published. Printed: the counts, and two letters a frame (user, larger face: R raw,
s swapped, . neither).
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fps", type=float, default=15.0)
    parser.add_argument("--others", default=None, choices=["obscure", "show"], help="[swap] others (unset: the default)")
    parser.add_argument("--seconds", type=float, default=28.0, help="swapped faces to wait for, in seconds of the camera")
    args = parser.parse_args()

    from privacy import leak_checkers  # benchmarks/privacy.py: this folder is on the path

    from vcamd.bench import standins
    from vcamd.config.reading import config_from_dict

    leaks, both, recognizer, (stranger_crop, stranger) = leak_checkers()  # the stranger: crowd_selfie's largest face
    crowd = cv2.imread(str(ASSETS / "images" / "crowd_selfie.jpg"))
    crowd_faces = sorted(both[1].detect(crowd), key=lambda f: -f.area)
    newton_image = cv2.imread(str(ASSETS / "images" / "newton.png"))
    user, (ux, uy) = leaks.head_cut(newton_image, max(both[1].detect(newton_image), key=lambda f: f.area), HEIGHT / 5)
    larger, (lx, ly) = leaks.head_cut(crowd, crowd_faces[3], HEIGHT / 2.6, margin=(0.8, 0.75))

    fps = args.fps
    period, enters, settles, leaves, returns = round(14 * fps), round(7 * fps), round(8 * fps), round(31 / 3 * fps), round(34 / 3 * fps)
    frames = []
    for i in range(period):
        frame = np.full((HEIGHT, WIDTH, 3), leaks.BACKGROUND, np.uint8)
        leaks.paste(frame, user, int(0.25 * WIDTH - ux), int(HEIGHT / 2 - uy))
        centre = (1.0 + (0.72 - 1.0) * (i - enters) / (settles - enters) if enters <= i < settles
                  else 0.72 if settles <= i < leaves or i >= returns else None)
        if centre is not None:
            leaks.paste(frame, larger, int(centre * WIDTH - lx), int(HEIGHT / 2 - ly))
        frames.append(frame)
    placed = sorted(leaks.placements_in(frames[settles], both, recognizer), key=lambda p: p.face.box[0])
    assert len(placed) == 2, f"expected the user and the larger face, found {len(placed)}"
    user_place, larger_place = placed
    print(f"camera: {period} frames looped at {fps:g} fps; the user's face {user_place.face.height:.0f} px high, the larger "
          f"{larger_place.face.height:.0f} px: slides in over frames {enters}–{settles - 1}, stays to {leaves - 1}, "
          f"appears at once at {returns}", flush=True)

    with tempfile.TemporaryDirectory(prefix="vcamd-selection-") as tmp:
        work = Path(tmp)
        clip = leaks.Clip(leaks.write_clip(work / "camera.avi", frames, fps), (WIDTH, HEIGHT), fps, frames, placed)
        swap = {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True}
        if args.others is not None:
            swap["others"] = args.others
        cfg = config_from_dict({
            "models": {"detector": str(ASSETS / "models" / "scrfd_500m_kps.onnx"),
                       "swapper": str(leaks.build_identity_swapper(work / "stranger.onnx", stranger_crop)),
                       "recognizer": str(standins.build_recognizer(work / "recognizer.onnx")), "providers": ["cpu"], "threads": 1},
            "swap": swap,
            "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
        })
        wanted = round(fps * args.seconds)
        published, stats = leaks.run_daemon_until(work, "run", cfg, clip, frames=wanted, swapped_faces=wanted)

    print(f"published {len(published)} frames: {stats['frames']}; faces {stats['faces']}")
    letters, raw = [], {"user": 0, "larger": 0}
    for frame in published:
        pair = ""
        for name, place in (("user", user_place), ("larger", larger_place)):
            embedding = recognizer.embed(frame, place.face)
            is_raw = leaks.recognised_as(embedding, place.embedding, stranger) is not None
            raw[name] += is_raw
            pair += "R" if is_raw else "s" if float(embedding @ stranger) > leaks.MAX_COSINE else "."
        letters.append(pair)
    first = next((i for i, pair in enumerate(letters) if pair[0] == "s"), len(letters))
    after = letters[first:]
    print(f"the user recognised raw in {raw['user']} of {len(published)} frames; the larger face raw in {raw['larger']}")
    print(f"from the user's first swap (frame {first}) on: the user raw in {sum(p[0] == 'R' for p in after)} of {len(after)} frames, "
          f"swapped in {sum(p[0] == 's' for p in after)}; the larger face raw in {sum(p[1] == 'R' for p in after)}")
    print("per frame (user+larger: R raw, s swapped, . neither):", " ".join(letters))


if __name__ == "__main__":
    main()
