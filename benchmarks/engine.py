"""Per-stage milliseconds of the per-frame face path, against insightface's reference paste-back.

    .venv/bin/python benchmarks/engine.py [--frames 30] [--compute-equivalent] [--threads 2]

Runs `FaceEngine.process_frame` (detect → select → align → swap → enhance → blend) on Newton's
portrait scaled into 640×480, 1280×720 and 1920×1080 frames, with the real SCRFD detector
(`../shared/assets/models/scrfd_500m_kps.onnx` by default) and stand-in recognizer / swapper /
enhancer built in a temp dir (light by default; `--compute-equivalent` builds the 138 M-parameter
inswapper and the ~86 M-parameter GFPGAN layer lists, which cost what the real models cost).

Every ONNX Runtime `run` is timed, so each stage splits into model inference and our own code;
"ours w/o inference" is the whole per-frame path minus all inference — what this project controls.

In the same run, on the same frames, faces, swapper model and M: insightface's reference
`INSwapper.get(img, face, source, paste_back=True)`. Its paste-back cost is
get(paste_back=True) − get(paste_back=False), each with its own inference time taken out. Ours:
`FaceEngine.composite` of the same swapped crop at the same keypoints.

Targets (docs/performance.md): blend ≥ 15× faster than the reference at 720p and ≤ 3 ms per face;
the whole path except inference ≤ 5 ms at 720p. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from vcamd.models.pipeline import build_face_engine

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"
RESOLUTIONS = ((640, 480), (1280, 720), (1920, 1080))

INFERENCE_BY_THREAD: dict[str, float] = defaultdict(float)
"""The same `run` times as the per-model log, by the thread that ran them (the live path's full
detections run beside the loop, not in its time)."""


class _TimedSession:
    """Forwards everything to an InferenceSession and adds up the wall time of `run` calls."""

    def __init__(self, session: Any, log: dict[str, float], name: str) -> None:
        self._session = session
        self._log = log
        self._name = name

    def run(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._session.run(*args, **kwargs)
        finally:
            ms = (time.perf_counter() - start) * 1000.0
            self._log[self._name] += ms
            INFERENCE_BY_THREAD[threading.current_thread().name] += ms

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def _timed_sessions(providers: list[str], threads: int, log: dict[str, float]) -> Any:
    from vcamd.inference.runtime import Sessions

    class TimedSessions(Sessions):
        def _get(self, path: Path, input_hw: tuple[int, int] | None) -> Any:  # type: ignore[override]
            return _TimedSession(super()._get(path, input_hw), log, path.stem)

    return TimedSessions(providers, threads)


def _frame(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """The portrait scaled to the frame's height (letterboxed/cropped to its width)."""
    scale = height / image.shape[0]
    scaled = cv2.resize(image, (round(image.shape[1] * scale), height), interpolation=cv2.INTER_AREA)
    frame = np.zeros((height, width, 3), np.uint8)
    w = min(width, scaled.shape[1])
    x_dst, x_src = (width - w) // 2, (scaled.shape[1] - w) // 2
    frame[:, x_dst : x_dst + w] = scaled[:, x_src : x_src + w]
    return frame


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=None, help="frames per resolution (default 30; 3 with --compute-equivalent)")
    parser.add_argument("--compute-equivalent", action="store_true", help="use the 138 M-param swapper and GFPGAN-sized enhancer stand-ins")
    parser.add_argument("--detector", type=Path, default=ASSETS / "models" / "scrfd_500m_kps.onnx")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0 = all cores)")
    parser.add_argument("--providers", default="cpu", help="comma-separated [models] providers, e.g. cuda or cpu")
    parser.add_argument("--no-enhancer", action="store_true", help="leave the enhancer out of the per-frame path")
    args = parser.parse_args(argv)
    frames_per_res = args.frames or (3 if args.compute_equivalent else 30)

    from insightface.app.common import Face as InsightFace
    from insightface.model_zoo.inswapper import INSwapper

    from vcamd.bench.standins import build_enhancer, build_recognizer, build_swapper
    from vcamd.common.quality import Level
    from vcamd.config.reading import config_from_dict
    from vcamd.faces.align import estimate_affine
    from vcamd.faces.engine import FaceEngine

    image = cv2.imread(str(ASSETS / "images" / "newton.png"))
    inference: dict[str, float] = defaultdict(float)
    with tempfile.TemporaryDirectory(prefix="vcamd-bench-") as tmp:
        folder = Path(tmp)
        print(f"building stand-ins in {folder} ({'compute-equivalent' if args.compute_equivalent else 'light'}) …", file=sys.stderr)
        swapper_path = build_swapper(folder / "swapper.onnx", compute_equivalent=args.compute_equivalent)
        cfg = config_from_dict(
            {
                "models": {
                    "detector": str(args.detector),
                    "recognizer": str(build_recognizer(folder / "recognizer.onnx")),
                    "swapper": str(swapper_path),
                    "enhancer": str(build_enhancer(folder / "enhancer.onnx", compute_equivalent=args.compute_equivalent)),
                    "providers": args.providers.split(","),
                    "threads": args.threads,
                },
                "swap": {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True},
                "enhancer": {"enabled": not args.no_enhancer, "strength": 0.8},
            }
        )
        sessions = _timed_sessions(list(cfg.models.providers), cfg.models.threads, inference)
        engine = build_face_engine(cfg, sessions)
        engine_no_cc = FaceEngine(engine.detector, engine.recognizer, engine.swapper, color_correction=False)
        engine_no_cc._source = engine._source  # same identity, no second embedding
        with contextlib.redirect_stdout(io.StringIO()):  # INSwapper prints its input shape
            reference = INSwapper(str(swapper_path), session=sessions.get(swapper_path))
        source = InsightFace(embedding=engine.parts.source.embedding)  # type: ignore[union-attr]
        det_name = args.detector.stem

        rows = []
        for width, height in RESOLUTIONS:
            frame = _frame(image, width, height)
            faces = engine.detect(frame)
            if len(faces) != 1:
                print(f"{width}×{height}: expected one face, found {len(faces)}; skipped", file=sys.stderr)
                continue
            face = faces[0]
            stats: dict[str, float] = {}
            for level in (Level.full, Level.no_enhancer):
                for key, value in _offline(engine, frame, level, frames_per_res, inference, det_name).items():
                    stats[f"{level.name}.{key}"] = value
                stats[f"{level.name}.live_wo_inference"] = _live(engine, cfg, frame, level, frames_per_res, inference)
            stats.update(_blend(engine, engine_no_cc, frame, face, frames_per_res))
            stats.update(_reference(engine, reference, frame, face, source, frames_per_res, inference))
            m = estimate_affine(face.kps, 128)
            paste_px = round(128 / float(np.hypot(m[0, 0], m[0, 1])))
            rows.append((f"{width}×{height}", round(face.width), paste_px, stats))

    _print_table(rows, frames_per_res, args, enhancer=not args.no_enhancer)
    return 0


def _offline(engine: Any, frame: np.ndarray, level: Any, n: int, inference: dict[str, float], det_name: str) -> dict[str, float]:
    """`process_frame` (full-frame detection every frame): median ms per stage and inference."""
    samples: dict[str, list[float]] = defaultdict(list)
    for i in range(n + 1):  # round 0 warms caches and sessions up
        inference.clear()
        work = frame.copy()
        start = time.perf_counter()
        result = engine.process_frame(work, level)
        total = (time.perf_counter() - start) * 1000.0
        if i == 0:
            continue
        for stage, ms in result.stage_ms.items():
            samples[stage].append(ms)
        samples["det_infer"].append(inference[det_name])
        samples["swap_infer"].append(inference["swapper"])
        samples["enh_infer"].append(inference["enhancer"])
        samples["total"].append(total)
        samples["wo_inference"].append(total - sum(inference.values()))
    return {k: _median(v) for k, v in samples.items()}


def _live(engine: Any, cfg: Any, frame: np.ndarray, level: Any, n: int, inference: dict[str, float]) -> float:
    """The live engine's per-frame work on the loop's thread: the daemon's `LiveTracker` (crops
    around the known face on its BoundedCall thread, which the loop waits for; a full detection
    every [detection] full_every frames on the FullDetector's own thread, which it does not) +
    swap_faces + composite, on a face drifting 2 px per frame, the frames handed in at the
    camera's rate ([camera] fps). Mean ms per frame without the
    inference the loop waited for (the full detector's runs, in parallel, are not subtracted;
    the mean, because one frame in `full_every` hands a frame copy to the full detector)."""
    from vcamd.live.measures.stats import LiveStats
    from vcamd.live.tracking.full import FullDetector
    from vcamd.live.tracking.sizes import detect_sizes
    from vcamd.live.tracking.tracker import LiveTracker

    height, width = frame.shape[:2]
    frames = [cv2.warpAffine(frame, np.float32([[1, 0, 2 * (i % 10) - 10], [0, 1, (i % 10) - 5]]), (width, height)) for i in range(n)]
    sizes = detect_sizes(cfg, level)
    full = FullDetector(engine, LiveStats(), time.monotonic)
    tracker = LiveTracker(engine, full, full_every=cfg.detection.full_every)
    full.start()
    spent: list[float] = []
    index = 0
    interval_s = 1.0 / cfg.camera.fps  # frames come at the camera's rate, as in the daemon
    next_at = time.perf_counter()
    try:
        for measured in (False, True):  # the first pass builds the crop sizes' sessions and warms up
            for shown in frames:
                time.sleep(max(0.0, next_at - time.perf_counter()))
                next_at = max(next_at, time.perf_counter()) + interval_s
                inference.clear()
                INFERENCE_BY_THREAD.clear()
                work = shown.copy()
                start = time.perf_counter()
                report = tracker.update(work, index, **sizes, deadline_s=5.0)
                targets = engine.select(report.faces, work)
                for swapped, face in zip(engine.swap_faces(work, targets, level), targets):
                    engine.composite(work, swapped, face)
                elapsed = (time.perf_counter() - start) * 1000.0
                if measured:
                    spent.append(elapsed - (sum(inference.values()) - INFERENCE_BY_THREAD["full-detector"]))
                index += 1
    finally:
        tracker.stop()
        full.stop()
    return statistics.fmean(spent)


def _blend(engine: Any, engine_no_cc: Any, frame: np.ndarray, face: Any, n: int) -> dict[str, float]:
    """One 128² swapped crop composited into the frame (colour correction on, as by default; and off)."""
    from vcamd.common.quality import Level

    swapped = engine.swap_faces(frame, [face], Level.no_enhancer)[0]
    out: dict[str, float] = {}
    for label, eng in (("blend_cc", engine), ("blend_nocc", engine_no_cc)):
        times = []
        for i in range(n + 1):
            work = frame.copy()
            start = time.perf_counter()
            eng.composite(work, swapped, face)
            if i:
                times.append((time.perf_counter() - start) * 1000.0)
        out[label] = _median(times)
    return out


def _reference(engine: Any, reference: Any, frame: np.ndarray, face: Any, source: Any, n: int, inference: dict[str, float]) -> dict[str, float]:
    """insightface on the same frame, face, swapper session and M.

    ref_paste: get(paste_back=True) − get(paste_back=False), each without its ONNX Runtime run.
    ref_wo_inference: its per-frame path (SCRFD decode on the same session + get(paste_back=True))
    minus the ONNX Runtime runs inside it.
    """
    from insightface.app.common import Face as InsightFace

    target = InsightFace(kps=face.kps)
    from insightface.model_zoo.scrfd import SCRFD

    # insightface's own SCRFD pre/post-processing on our (timed) square session, as the reference path runs it.
    decoder = SCRFD(model_file=None, session=engine.detector.sessions.get(engine.detector.path))
    decoder.nms_thresh = 0.4
    size = engine.detector.size
    paste, whole = [], []
    for i in range(n + 1):
        # Each call's own ORT time is taken out, so a slow (compute-equivalent) model's run-to-run
        # jitter does not swamp the few milliseconds of paste-back.
        inference.clear()
        start = time.perf_counter()
        reference.get(frame, target, source, paste_back=False)
        no_paste = (time.perf_counter() - start) * 1000.0 - sum(inference.values())
        inference.clear()
        start = time.perf_counter()
        reference.get(frame, target, source, paste_back=True)
        with_paste = (time.perf_counter() - start) * 1000.0 - sum(inference.values())
        inference.clear()
        start = time.perf_counter()
        _, kpss = decoder.detect(frame, input_size=(size, size))
        reference.get(frame, InsightFace(kps=kpss[0]), source, paste_back=True)
        total = (time.perf_counter() - start) * 1000.0
        if i:
            paste.append(max(0.0, with_paste - no_paste))
            whole.append(total - sum(inference.values()))
    return {"ref_paste": _median(paste), "ref_wo_inference": _median(whole)}


def _print_table(rows: list[tuple[str, int, int, dict[str, float]]], frames: int, args: argparse.Namespace, enhancer: bool) -> None:
    kind = "compute-equivalent" if args.compute_equivalent else "light"
    print(
        f"\nmedian ms over {frames} frames, one face; stand-ins: {kind}; detector {args.detector.name}; "
        f"providers {args.providers}; threads {args.threads or 'all'}; enhancer {'on' if enhancer else 'off'}"
    )
    for level in ("full", "no_enhancer"):
        print(f"\n[{level}] vcamd swap's path (process_frame, full-frame detection every frame); (infer) = ONNX Runtime run")
        header = ("frame", "face px", "detect", "(infer)", "align", "swap", "(infer)", "enhance", "(infer)", "blend", "total", "w/o infer", "live w/o infer")
        print(" | ".join(f"{h:>9}" for h in header))
        for name, face_px, _, s in rows:
            g = lambda key: s[f"{level}.{key}"]  # noqa: E731
            values = (name, face_px, g("detect"), g("det_infer"), g("align"), g("swap"), g("swap_infer"), g("enhance"), g("enh_infer"), g("blend"), g("total"), g("wo_inference"), g("live_wo_inference"))
            print(" | ".join(f"{v:>9.2f}" if isinstance(v, float) else f"{v!s:>9}" for v in values))
    print("\nreference per-frame path w/o inference (insightface SCRFD decode + INSwapper.get(paste_back=True)):")
    print("  " + ", ".join(f"{name} {s['ref_wo_inference']:.2f} ms" for name, _, _, s in rows))
    print("\nblend: paste-back of one swapped 128² crop, median ms")
    header2 = ("frame", "paste px", "ours cc on", "ours cc off", "reference", "× (cc off)", "× (cc on)")
    print(" | ".join(f"{h:>11}" for h in header2))
    for name, _, paste_px, s in rows:
        values2 = (name, paste_px, s["blend_cc"], s["blend_nocc"], s["ref_paste"], s["ref_paste"] / s["blend_nocc"], s["ref_paste"] / s["blend_cc"])
        print(" | ".join(f"{v:>11.2f}" if isinstance(v, float) else f"{v!s:>11}" for v in values2))


if __name__ == "__main__":
    raise SystemExit(main())
