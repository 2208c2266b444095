"""CPU cost of one `FaceDetector.detect` call, split into the ONNX Runtime run and our own work.

    .venv/bin/python benchmarks/detect_cost.py                 # SCRFD-2.5G, 720p and 1080p frames, 640² and a 192² crop
    .venv/bin/python benchmarks/detect_cost.py --repeats 5     # five rounds; prints the median of the rounds' medians

Frames: Newton's portrait scaled into a 1280×720 / 1920×1080 grey frame (as `vcamd bench`'s clip),
and the 192² tracking crop around its face (`crop_around`). Times are the process's CPU time
(`time.process_time`: OpenCV spreads some work over its own threads), which other processes
on the machine disturb less than wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from live import SHARED  # noqa: E402


class TimedSession:
    """Wraps an ORT session; adds each run's thread CPU time to `ms`."""

    def __init__(self, session, log: list[float]) -> None:
        self._session, self._log = session, log

    def run(self, *args, **kwargs):
        t = time.process_time()
        try:
            return self._session.run(*args, **kwargs)
        finally:
            self._log.append((time.process_time() - t) * 1000.0)

    def __getattr__(self, name):
        return getattr(self._session, name)


def main() -> None:
    import cv2

    from vcamd.bench.clips import BACKGROUND
    from vcamd.faces.detect import FaceDetector
    from vcamd.inference.runtime import Sessions
    from vcamd.live.tracking.cropplan import crop_around

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--detector", type=Path, default=SHARED / "models" / "scrfd_2.5g_kps.onnx")
    p.add_argument("--calls", type=int, default=40, help="calls per case and round")
    p.add_argument("--repeats", type=int, default=3, help="rounds")
    args = p.parse_args()

    sessions = Sessions(["cpu"], 1)
    ort_ms: list[float] = []
    get, get_resized = sessions.get, sessions.get_resized
    sessions.get = lambda *a, **k: TimedSession(get(*a, **k), ort_ms)  # type: ignore[method-assign]
    sessions.get_resized = lambda *a, **k: TimedSession(get_resized(*a, **k), ort_ms)  # type: ignore[method-assign]
    detector = FaceDetector(args.detector, sessions)
    newton = cv2.imread(str(SHARED / "images" / "newton.png"))
    cases = []
    for w, h in ((1280, 720), (1920, 1080)):
        frame = np.full((h, w, 3), BACKGROUND, np.uint8)
        s = 0.66 * min(h / newton.shape[0], w / newton.shape[1])
        face = cv2.resize(newton, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
        y0, x0 = (h - face.shape[0]) // 2, w // 3
        frame[y0 : y0 + face.shape[0], x0 : x0 + face.shape[1]] = face
        found = detector.detect(frame)
        assert len(found) == 1, f"expected one face in the {w}×{h} frame, found {len(found)}"
        patch, _ = crop_around(frame, found[0], 192)
        cases += [(f"{h}p full 640", frame, 640), (f"{h}p crop 192", patch, 192)]

    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
    for _ in range(args.repeats):
        for name, image, size in cases:
            detector.detect(image, size)  # warm (session built, caches filled)
            totals, ort_ms[:] = [], []
            for _ in range(args.calls):
                t = time.process_time()
                detector.detect(image, size)
                totals.append((time.process_time() - t) * 1000.0)
            own = [a - b for a, b in zip(totals, ort_ms)]
            results[name].append((statistics.median(totals), statistics.median(own)))
    print(f"FaceDetector.detect, {args.detector.name}, process CPU-ms per call: median of {args.repeats} rounds × {args.calls} calls")
    print("| case | total | ONNX Runtime run | our own (pre + post) | own, per round |")
    print("| --- | --- | --- | --- | --- |")
    for name, rounds in results.items():
        total = statistics.median(r[0] for r in rounds)
        own = statistics.median(r[1] for r in rounds)
        print(f"| {name} | {total:.2f} | {total - own:.2f} | {own:.3f} | {', '.join(f'{r[1]:.3f}' for r in rounds)} |")


if __name__ == "__main__":
    main()
