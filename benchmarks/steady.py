"""How steady the pasted face is on a still head, and how closely it follows a moving one: the
live tracker with the real SCRFD-2.5G on a real portrait moved by a script, each frame's paste
placement (the swap crop's alignment from the face's keypoints) measured with the smoothing
filter off and on (`vcamd/live/tracking/smoothing.py`). It prints what it measured; it asserts nothing.

    .venv/bin/python benchmarks/steady.py
    .venv/bin/python benchmarks/steady.py --noise 6 --min-cutoff 0.5 --beta 40

The camera (1280×720, 30 fps): Newton's portrait scaled so his face box is --face px wide, on grey,
with fresh Gaussian sensor noise (--noise grey levels) in every frame; still for --still frames,
then panning right at --speed px a frame for --pan frames, then still again. The tracker
(`LiveTracker`: crop re-detection, motion following, the periodic full detections on their
thread, waited for here as a fast machine would have them) gives each frame's face; the paste's
placement is where the swap crop's centre lands in the frame and the crop's side there
(`align.estimate_affine` of the keypoints at 128 px, inverted).

Printed per filter setting: the still head's frame-to-frame motion of the paste's centre (p95,
px) and the std of its side (px), over the first still run after the tracker settled; while
panning, the mean lag behind the unfiltered paste along the motion (px); after the stop, the
largest overshoot past where the head rests (px, the median unfiltered position of the last
still run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"
WIDTH, HEIGHT, FPS = 1280, 720, 30.0
SETTLE = 10  # frames the tracker takes to find the face and settle (left out of the still run)


def make_scene(portrait: np.ndarray, detector, face_px: float) -> tuple[np.ndarray, float]:
    """The portrait scaled so its face box is `face_px` wide, cut to the head and shoulders around
    it (2.2 face widths wide, at most the frame's height), and that scale."""
    face = max(detector.detect(portrait), key=lambda f: f.area)
    k = face_px / face.width
    scaled = cv2.resize(portrait, None, fx=k, fy=k, interpolation=cv2.INTER_AREA)
    cx, cy = (face.box[0] + face.box[2]) / 2 * k, (face.box[1] + face.box[3]) / 2 * k
    half_w, half_h = int(1.1 * face_px), HEIGHT // 2
    x0, y0 = max(0, int(cx) - half_w), max(0, int(cy) - half_h)
    return scaled[y0 : y0 + 2 * half_h, x0 : x0 + 2 * half_w], k


def frame_at(scene: np.ndarray, x: int, rng: np.random.Generator, noise: float) -> np.ndarray:
    frame = np.full((HEIGHT, WIDTH, 3), 118, np.float32)
    h, w = min(scene.shape[0], HEIGHT), min(scene.shape[1], WIDTH - x)
    y = (HEIGHT - h) // 2
    frame[y : y + h, x : x + w] = scene[:h, :w]
    frame += rng.normal(0.0, noise, frame.shape).astype(np.float32)
    return np.clip(frame + 0.5, 0, 255).astype(np.uint8)


def placement(kps: np.ndarray) -> tuple[float, float, float]:
    """(centre x, centre y, side) of the 128-px swap crop's paste in the frame."""
    from vcamd.faces.align import estimate_affine, invert_affine

    inv = invert_affine(estimate_affine(kps, 128))
    cx, cy = inv @ np.array([64.0, 64.0, 1.0])
    side = 128.0 * float(np.sqrt(abs(np.linalg.det(inv[:, :2]))))
    return float(cx), float(cy), side


def track(frames: list[np.ndarray], detector_path: Path) -> list:
    """The tracker's face per frame (None where it reported none)."""
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions
    from vcamd.live.measures.stats import LiveStats
    from vcamd.live.tracking.full import FullDetector
    from vcamd.live.tracking.tracker import LiveTracker

    detector = FaceDetector(detector_path, Sessions(["cpu"], threads=1))
    full = FullDetector(detector, LiveStats(), time.monotonic)
    full.start()
    tracker = LiveTracker(detector, full, full_every=10)
    out = []
    try:
        for i, frame in enumerate(frames):
            report = tracker.update(frame, i, full_size=640, track_size=192, deadline_s=10.0)
            out.append(report)
            while not full.idle:  # a fast machine: the full detection is in by the next frame
                time.sleep(0.002)
    finally:
        tracker.stop()
        full.stop()
    return out


def measure(positions: list[tuple[float, float, float]], still: int, pan: int, raw: list[tuple[float, float, float]]) -> dict[str, float]:
    p = np.array(positions)
    r = np.array(raw)
    first = p[SETTLE:still]
    steps = np.hypot(*np.diff(first[:, :2], axis=0).T)
    panning = slice(still + 2, still + pan)  # after the first two frames of the start
    lag = r[panning, 0] - p[panning, 0]
    rest = float(np.median(r[still + pan + 15 :, 0]))
    after = p[still + pan :, 0]
    return {"p95": float(np.percentile(steps, 95)), "side_std": float(first[:, 2].std()),
            "lag": float(lag.mean()), "overshoot": max(0.0, float((after - rest).max()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--detector", default="scrfd_2.5g_kps.onnx", help="in ../shared/assets/models")
    parser.add_argument("--face", type=float, default=285.0, help="face box width in px")
    parser.add_argument("--noise", type=float, default=2.0, help="sensor noise, grey levels (std)")
    parser.add_argument("--still", type=int, default=70)
    parser.add_argument("--pan", type=int, default=45)
    parser.add_argument("--speed", type=int, default=8, help="px a frame while panning")
    parser.add_argument("--min-cutoff", type=float, default=None, help="[smoothing] min_cutoff_hz (default: the config's)")
    parser.add_argument("--beta", type=float, default=None, help="[smoothing] beta (default: the config's)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from vcamd.config.schema import SmoothingConfig
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions
    from vcamd.live.tracking.smoothing import FaceSmoother

    portrait = cv2.imread(str(ASSETS / "images" / "newton.png"))
    probe = FaceDetector(ASSETS / "models" / args.detector, Sessions(["cpu"], threads=1))
    scene, _k = make_scene(portrait, probe, args.face)
    rng = np.random.default_rng(args.seed)
    x0 = 120
    xs = [x0] * args.still + [x0 + args.speed * (i + 1) for i in range(args.pan)]
    xs += [xs[-1]] * args.still
    frames = [frame_at(scene, x, rng, args.noise) for x in xs]
    reports = track(frames, ASSETS / "models" / args.detector)
    missing = [i for i, r in enumerate(reports) if len(r.faces) != 1]
    if any(i >= SETTLE for i in missing):
        print(f"the tracker lost the face in frames {[i for i in missing if i >= SETTLE]}: figures below skip nothing, read with care")

    defaults = SmoothingConfig()
    on = SmoothingConfig(min_cutoff_hz=args.min_cutoff if args.min_cutoff is not None else defaults.min_cutoff_hz,
                         beta=args.beta if args.beta is not None else defaults.beta)
    rows = {}
    for name, cfg in (("off", SmoothingConfig(enabled=False)), ("on", on)):
        smoother = FaceSmoother()
        positions = []
        for i, report in enumerate(reports):
            faces = smoother.steady(report.faces, i / FPS, cfg, report.appeared)
            positions.append(placement(faces[0].kps) if faces else (np.nan, np.nan, np.nan))
        rows[name] = positions
    print(f"{args.detector}, {WIDTH}x{HEIGHT} at {FPS:g} fps, face box {args.face:g} px (paste side ~{np.nanmedian(np.array(rows['off'])[:, 2]):.0f} px), "
          f"noise std {args.noise:g}; still {args.still}, pan {args.pan} x {args.speed} px, still {args.still}; "
          f"smoothing min_cutoff_hz={on.min_cutoff_hz:g} beta={on.beta:g}")
    print(f"{'filter':8} {'still p95 step px':>18} {'still side std px':>18} {'pan mean lag px':>16} {'stop overshoot px':>18}")
    for name, positions in rows.items():
        m = measure(positions, args.still, args.pan, rows["off"])
        print(f"{name:8} {m['p95']:18.3f} {m['side_std']:18.3f} {m['lag']:16.3f} {m['overshoot']:18.3f}")


if __name__ == "__main__":
    main()
