"""Soak: the live loop for many minutes — does memory grow, do threads pile up, does latency drift?

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--fps 30] [--size 1280x720] [--json out.json]

Runs the real `LiveEngine` (camera reader thread, pipeline loop, swap worker) with the real SCRFD
detector (`../shared/assets/models/scrfd_500m_kps.onnx`), the light stand-in recognizer and swapper
(built in a temp dir), a 720p video file played in real time as the camera (looped), and the null
sink. Once a second it samples the process's resident memory (VmRSS) and thread count (all native
threads, ONNX Runtime's pools included); every minute it prints the published frames, fps,
capture→publish latency p50/p99 of that minute, RSS and threads.

Criteria (PASS/FAIL each):
- memory growth < 5 %: RSS at the end vs RSS after the warm-up (models loaded, first frames out);
- no latency drift: the last minute's p99 ≤ the first minute's p99 × 1.2 + 5 ms;
- threads stable: no more threads at the end than after the warm-up;
- cadence: published fps ≥ 0.95 × the camera's fps over the whole run.
Not a test: it prints numbers (docs/reliability.md records them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import cv2
import numpy as np

from vcamd.models.pipeline import build_face_engine

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"


def proc_status() -> tuple[float, int]:
    """(resident memory in MB, native thread count) of this process, from /proc/self/status."""
    rss_kb, threads = 0, 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss_kb / 1024.0, threads


def make_clip(path: Path, width: int, height: int, fps: float, frames: int = 90) -> Path:
    """A real-photo clip: Newton's portrait scaled to the frame height, drifting sideways."""
    photo = cv2.imread(str(ASSETS / "images" / "newton.png"))
    scale = height / photo.shape[0]
    scaled = cv2.resize(photo, (round(photo.shape[1] * scale), height), interpolation=cv2.INTER_AREA)
    base = np.zeros((height, width, 3), np.uint8)
    w = min(width, scaled.shape[1])
    base[:, (width - w) // 2 : (width - w) // 2 + w] = scaled[:, (scaled.shape[1] - w) // 2 : (scaled.shape[1] - w) // 2 + w]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    if not writer.isOpened():
        raise SystemExit("OpenCV cannot write mp4v here")
    for k in range(frames):
        shift = int(40 * np.sin(2 * np.pi * k / frames))  # there and back: the loop has no jump
        writer.write(np.roll(base, shift, axis=1))
    writer.release()
    return path


def build(args: argparse.Namespace, folder: Path):
    from vcamd.bench.standins import build_recognizer, build_swapper
    from vcamd.config.reading import config_from_dict
    from vcamd.inference.runtime import Sessions
    from vcamd.live.capture.sources import VideoFileCamera
    from vcamd.live.engine import LiveEngine
    from vcamd.sinks.null import NullSink

    width, height = args.width, args.height
    clip = make_clip(folder / "camera.mp4", width, height, args.fps)
    cfg = config_from_dict(
        {
            "models": {
                "dir": str(folder),
                "detector": str(args.detector),
                "recognizer": str(build_recognizer(folder / "recognizer.onnx")),
                "swapper": str(build_swapper(folder / "swapper.onnx")),
                "providers": ["cpu"],
                "threads": args.threads,
            },
            "swap": {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True},
            "camera": {"device": str(clip), "loop": True, "width": width, "height": height, "fps": args.fps},
            "tray": {"enabled": False},
        },
        "soak",
    )
    sessions = Sessions(["cpu"], args.threads)
    faces = build_face_engine(cfg, sessions)
    sink = NullSink(width, height)
    engine = LiveEngine(
        cfg,
        source=VideoFileCamera(clip, loop=True),
        sink_factory=lambda w, h, fps: sink,
        faces=faces,
        providers=sessions.active_providers(),
    )
    return engine


def latency_count(stats) -> int:
    """Latency samples recorded so far (every published frame but the offline placeholders)."""
    from vcamd.common.types import Outcome

    return stats.published - stats.outcomes[Outcome.offline]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--size", default="1280x720", help="WIDTHxHEIGHT of the camera clip")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime intra-op threads (0 = cores)")
    parser.add_argument("--warmup-s", type=float, default=20.0, help="seconds before the 'start' memory/thread sample")
    parser.add_argument("--detector", type=Path, default=ASSETS / "models" / "scrfd_500m_kps.onnx")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    args.width, args.height = (int(v) for v in args.size.lower().split("x"))
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="vcamd-soak-") as tmp:
        rss0, threads0 = proc_status()
        engine = build(args, Path(tmp))
        error: list[BaseException] = []
        runner = threading.Thread(target=lambda: _run(engine, error), name="soak-engine", daemon=True)
        t_start = time.monotonic()
        runner.start()
        duration = args.minutes * 60.0
        samples: list[dict] = []
        minutes: list[dict] = []
        start_sample: dict | None = None
        minute_start_t, minute_start_pub, minute_start_lat = t_start, 0, 0
        print(f"soak: {args.minutes:g} min, {args.width}x{args.height} @ {args.fps:g} fps video-file camera, "
              f"SCRFD {args.detector.name} + light stand-in swapper, null sink; RSS before models {rss0:.0f} MB, threads {threads0}")
        print(f"{'min':>4} {'published':>9} {'fps':>6} {'p50 ms':>7} {'p99 ms':>7} {'RSS MB':>7} {'threads':>7}")
        while time.monotonic() - t_start < duration and runner.is_alive():
            time.sleep(1.0)
            now = time.monotonic()
            rss, threads = proc_status()
            sample = {"t": round(now - t_start, 1), "rss_mb": round(rss, 1), "threads": threads, "published": engine.parts.stats.published}
            samples.append(sample)
            if start_sample is None and now - t_start >= args.warmup_s:
                start_sample = sample
            if now - minute_start_t >= 60.0 or now - t_start >= duration:
                stats = engine.parts.stats
                count = latency_count(stats)
                new = count - minute_start_lat
                window = stats.latency_ms.recent(new)
                p50, p99 = (float(np.percentile(window, q)) for q in (50, 99)) if window.size else (0.0, 0.0)
                published = stats.published - minute_start_pub
                row = {
                    "minute": len(minutes) + 1,
                    "published": published,
                    "fps": round(published / (now - minute_start_t), 2),
                    "p50_ms": round(p50, 1),
                    "p99_ms": round(p99, 1),
                    "rss_mb": round(rss, 1),
                    "threads": threads,
                }
                minutes.append(row)
                print(f"{row['minute']:>4} {row['published']:>9} {row['fps']:>6.1f} {row['p50_ms']:>7.1f} {row['p99_ms']:>7.1f} "
                      f"{row['rss_mb']:>7.0f} {row['threads']:>7}", flush=True)
                minute_start_t, minute_start_pub, minute_start_lat = now, stats.published, count
        engine.request_quit()
        runner.join(15)
        if error:
            print(f"FAIL: the engine crashed: {error[0]!r}")
            return 1
        final = engine.stats_json()
        end = samples[-1] if samples else {"rss_mb": 0, "threads": 0}
        start_sample = start_sample or (samples[0] if samples else end)

    f = final["frames"]
    growth = (end["rss_mb"] - start_sample["rss_mb"]) / start_sample["rss_mb"] * 100.0 if start_sample["rss_mb"] else 0.0
    first_p99 = minutes[0]["p99_ms"] if minutes else 0.0
    last_p99 = minutes[-1]["p99_ms"] if minutes else 0.0
    fps_ratio = final["fps"]["published"] / final["fps"]["source"] if final["fps"]["source"] else 0.0
    print()
    print(f"frames: captured {f['captured']}, published {f['published']}, dropped {f['dropped']}, swapped {f['swapped']}, "
          f"held {f['held']}, blurred {f['blurred']}, passthrough {f['passthrough']}, offline {f['offline']}")
    print(f"fps: source {final['fps']['source']}, published {final['fps']['published']}; latency p50/p95/p99 "
          f"{final['latency_ms']['p50']}/{final['latency_ms']['p95']}/{final['latency_ms']['p99']} ms; "
          f"{final['cpu_ms_per_frame']} CPU-ms/frame")
    print(f"RSS: {start_sample['rss_mb']:.1f} MB after {args.warmup_s:g} s warm-up → {end['rss_mb']:.1f} MB at the end "
          f"({growth:+.2f} %); threads {start_sample['threads']} → {end['threads']}")
    checks = [
        ("memory growth < 5 %", growth < 5.0, f"{growth:+.2f} %"),
        ("no latency drift (last-minute p99 ≤ first × 1.2 + 5 ms)", last_p99 <= first_p99 * 1.2 + 5.0, f"p99 {first_p99} → {last_p99} ms"),
        ("threads stable", end["threads"] <= start_sample["threads"], f"{start_sample['threads']} → {end['threads']}"),
        ("published fps ≥ 0.95 × source", fps_ratio >= 0.95, f"{fps_ratio:.3f}"),
    ]
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    if args.json is not None:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "minutes": minutes,
                                         "start": start_sample, "end": end, "stats": final,
                                         "checks": {n: {"pass": ok, "value": d} for n, ok, d in checks}}, indent=2) + "\n")
    return 0 if all(ok for _, ok, _ in checks) else 1


def _run(engine, error: list[BaseException]) -> None:
    try:
        engine.run()
    except BaseException as exc:  # reported by main
        error.append(exc)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
