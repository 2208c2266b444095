"""Where the live loop's CPU goes: CPU-ms per published frame, split by thread and by stage.

    .venv/bin/python benchmarks/cpu_profile.py --resolution 720p --frames 600      # light stand-in, watchdog pinned at full
    .venv/bin/python benchmarks/cpu_profile.py --resolution 1080p --frames 600 --runs 3

Runs the light scenario of `vcamd bench` (the same clip, models and engine; `--quality full` by
default, so every run does the same work whatever the machine's load) and measures:

* per thread, its CPU time (`/proc/self/task/<tid>/stat`, utime + stime, polled every 20 ms
  while the run lasts) — exact, and undisturbed by other processes except through caches;
* within the threads, where the time goes, by sampling every thread's stack with py-spy (if it is
  installed: `pip install py-spy`) — each stage's share of its thread's samples, scaled to that
  thread's measured CPU time.

Stages: camera decode (the reader thread: MJPG decode to BGR), full detection and tracking crops
(each split into ONNX Runtime run, pre-processing — letterbox resize + blob, colour swap included —
and post-processing — anchor decode + NMS), swap (model run and the work around it), the loop's
composite (colour correction's LAB conversions apart), crop cutting, badge, sink, stats, and the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from live import SHARED  # noqa: E402  (the shared test assets)

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


# -- per-thread CPU time ---------------------------------------------------------------------------

class ThreadCpu:
    """Polls every thread's CPU time while a run lasts; keeps the last value seen per thread, so a
    thread that ends before the run does is still counted (up to one poll interval short)."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.ms: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self.comm: dict[int, str] = {}
        self._base: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-poller", daemon=True)

    @staticmethod
    def _read() -> dict[int, float]:
        out: dict[int, float] = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the thread ended meanwhile
            out[int(tid)] = (int(fields[11]) + int(fields[12])) * TICK_MS  # utime, stime
        return out

    def start(self) -> None:
        self._base = self._read()
        self._thread.start()

    def _poll(self) -> None:
        for t in threading.enumerate():
            if t.native_id is not None:
                self.names[t.native_id] = t.name
        for tid, ms in self._read().items():
            self.ms[tid] = ms - self._base.get(tid, 0.0)
            if tid not in self.names and tid not in self.comm:
                try:
                    self.comm[tid] = "native thread: " + Path(f"/proc/self/task/{tid}/comm").read_text().strip()
                except OSError:
                    pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._poll()
        by_name: dict[str, float] = defaultdict(float)
        for tid, ms in self.ms.items():
            name = self.names.get(tid) or "native worker threads (OpenCV, FFmpeg pools)"
            if name != "cpu-poller":
                by_name[name] += ms
        return dict(by_name)


def child(args: argparse.Namespace) -> None:
    """One measured run (under py-spy when the parent found it); writes per-thread CPU as JSON."""
    from vcamd.bench.clips import sliding_clip
    from vcamd.bench.runs import run_live, scenario_config
    from vcamd.bench.scenarios import _cache_dir
    from vcamd.bench.settings import RESOLUTIONS, BenchSettings
    from vcamd.config.schema import Config
    from vcamd.files.images import read_image

    width, height = RESOLUTIONS[args.resolution]
    settings = BenchSettings(
        face=SHARED / "images" / "newton.png", detector=str(args.detector), width=width, height=height,
        fps=30.0, frames=args.frames, inswapper_frames=args.frames, providers=["cpu"], threads=1, fp16=False,
        quality=args.quality,
    )
    poller = ThreadCpu()
    # The stand-in swapper's optimised graph is kept in the run's own folder, as `vcamd bench` keeps
    # it, not in the user's cache (its model file is deleted after the run).
    with tempfile.TemporaryDirectory(prefix="vcamd-cpu-") as tmp, _cache_dir(Path(tmp) / "optimized"):
        tmpdir = Path(tmp)
        clip = sliding_clip(read_image(settings.face, "face"), settings, tmpdir, (width, height))
        cfg = scenario_config("light", settings, tmpdir, Config())
        t0 = time.process_time()
        stats, _stages, _ = run_live(cfg, clip, args.frames, args.quality, on_engine=lambda _e: poller.start())
        process_ms = (time.process_time() - t0) * 1000.0
    threads = poller.stop()
    Path(args.child_json).write_text(json.dumps({
        "published": stats["frames"]["published"],
        "cpu_ms_per_frame": stats["cpu_ms_per_frame"],
        "threads_ms": threads,
        "process_ms_incl_warmup": process_ms,
        "swapped": stats["frames"]["swapped"],
        "levels": stats["degradation"]["level_share"],
        "latency_ms": stats["latency_ms"],
    }))


# -- stage split from py-spy's raw stacks -------------------------------------------------------------

THREAD_STAGE = {
    "camera-reader": "camera decode (reader thread)",
    "full-detector": "full detection",
    "face-tracker": "tracking crops (re-detection)",
    "swap-worker": "swap worker",
}


WAITS = ("Condition.wait ", "Event.wait ", "Pacer.wait_for ", "sleep ", "LatestFrame.take ")
"""Innermost frames of a thread that is waiting, not computing: py-spy can sample a thread that
was just woken (or is runnable but not running on a busy machine) in these; they are left out of
the split, so a thread's measured CPU time goes to the stages it was computing in."""

RUN_MARKERS = ("FrameProcessor.process", "FrameProcessor.send", "LiveEngine.run", "NewestWorker._loop", "CameraReader._run")
"""A stack belongs to the measured run only if it passes through one of these (not warm-up, not
building the models or the clip)."""


def stage_of(thread: str, frames: list[str]) -> str | None:
    """The stage a sampled stack belongs to; None for a stack outside the measured run or waiting."""
    text = ";".join(frames)
    if not any(m in text for m in RUN_MARKERS) or "warm_up" in text:
        return None
    if frames and frames[-1].startswith(WAITS):
        return None
    if "CameraReader._run" in text:
        thread = "camera-reader"
    elif "FullDetector._work" in text:
        thread = "full-detector"
    elif "BoundedCall._work" in text:
        thread = "face-tracker"
    elif "SwapWorker._work" in text:
        thread = "swap-worker"
    base = THREAD_STAGE.get(thread, thread)
    if "Session.run " in text or "InferenceSession.run " in text:
        return f"{base}: ONNX Runtime run"
    if "FaceDetector.detect" in text:
        if "_blob" in text or "_prepare_input_blob" in text or "_detect_candidates (" in text.split(";")[-1]:
            return f"{base}: pre-processing (letterbox resize, blob)"
        return f"{base}: post-processing (anchor decode, NMS)"
    if thread in ("full-detector", "face-tracker", "swap-worker", "camera-reader"):
        if thread == "swap-worker" and ("align" in text or "warp" in text or "estimate_affine" in text):
            return f"{base}: align (similarity + warp)"
        if thread == "swap-worker" and ("to_blob" in text or "to_crops" in text):
            return f"{base}: pre/post (blob, crops)"
        if "notify" in text:
            return f"{base}: hand-off (wake the waiting thread)"
        return base if thread == "camera-reader" else f"{base}: other"
    if "crop_around" in text:
        return "loop: cutting tracking crops"
    if "faces/colour.py" in text or "_corrected_crop" in text:
        return "loop: composite — colour correction (LAB)"
    if "estimate_affine" in text or "similarity_transform" in text or "_similarity" in text:
        return "loop: composite — similarity transform"
    if "composite" in text or "faces/blend.py" in text or "faces/footprint.py" in text or "faces/masks.py" in text:
        return "loop: composite — warp + blend"
    if "badge" in text:
        return "loop: badge"
    if "Sink.send" in text or "vcamd/sinks/" in text:
        return "loop: sink"
    if ("stats.py" in text or "watchdog.py" in text or "LiveEngine.status" in text or "_refresh_status" in text
            or "log_events" in text):
        return "loop: stats, watchdog, status"
    if "LiveTracker" in text or "BoundedCall.call" in text or "FullDetector.submit" in text:
        return "loop: tracker hand-off"
    if "_submit" in text or "SwapWorker" in text:
        return "loop: swap hand-off (region copy)"
    if "obscure" in text:
        return "loop: obscure (misses)"
    return "loop: other"


def split_stacks(raw: Path, leaves: dict[str, Counter] | None = None) -> dict[str, Counter]:
    """thread → stage → samples; `leaves` collects stage → innermost frames (for a closer look)."""
    per_thread: dict[str, Counter] = defaultdict(Counter)
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = frames[0].split(": ", 1)[1] if ": " in frames[0] else frames[0]
        stage = stage_of(thread, frames[1:])
        if stage is not None:
            per_thread[thread][stage] += int(count)
            if leaves is not None:
                leaves[stage][" < ".join(f.split(" (")[0] + " (" + f.split("/")[-1] for f in frames[-3:][::-1])] += int(count)
    return per_thread


def parent(args: argparse.Namespace) -> None:
    spy = shutil.which("py-spy") or (str(Path(sys.executable).parent / "py-spy") if (Path(sys.executable).parent / "py-spy").exists() else None)
    runs: list[dict] = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="vcamd-cpuprof-") as tmp:
            out, raw = Path(tmp) / "threads.json", Path(tmp) / "stacks.txt"
            cmd = [sys.executable, __file__, "--child-json", str(out), "--resolution", args.resolution,
                   "--frames", str(args.frames), "--detector", str(args.detector)]
            if args.quality:
                cmd += ["--quality", args.quality]
            if spy and not args.no_spy:
                cmd = [spy, "record", "--format", "raw", "--threads", "--nonblocking", "--rate", str(args.rate), "-o", str(raw), "--", *cmd]
            load = os.getloadavg()[0]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            run = json.loads(out.read_text())
            run["load"] = load
            leaves: dict[str, Counter] = defaultdict(Counter)
            run["stacks"] = {t: dict(c) for t, c in split_stacks(raw, leaves).items()} if raw.exists() else {}
            run["leaves"] = {stage: dict(c.most_common(8)) for stage, c in leaves.items()}
            runs.append(run)
            print(f"run {i + 1}/{args.runs}: {run['cpu_ms_per_frame']:.1f} CPU-ms/frame, load {load:.1f}", file=sys.stderr)
    table = breakdown(runs)
    print(format_breakdown(table, runs, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "breakdown": table}, indent=1))


def breakdown(runs: list[dict]) -> dict[str, list[float]]:
    """stage → CPU-ms per published frame, one value per run: each thread's measured CPU time
    split by its samples' stages."""
    rows: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        published = max(1, run["published"])
        per_run: dict[str, float] = defaultdict(float)
        for thread, ms in run["threads_ms"].items():
            stages = run["stacks"].get(thread)
            total = sum(stages.values()) if stages else 0
            if not total:
                per_run[THREAD_STAGE.get(thread, thread) + ": (not sampled)"] += ms / published
                continue
            for stage, n in stages.items():
                per_run[stage] += ms * n / total / published
        per_run["= whole process (stats cpu_ms_per_frame)"] = run["cpu_ms_per_frame"]
        for stage in set(per_run) | set(rows):
            rows[stage].append(per_run.get(stage, 0.0))
    return dict(rows)


def format_breakdown(table: dict[str, list[float]], runs: list[dict], args: argparse.Namespace) -> str:
    lines = [f"CPU-ms per published frame, {args.resolution}, light stand-in, quality {args.quality or 'automatic'}, "
             f"{len(runs)} run(s) of {args.frames} frames; median [min–max]",
             "| stage | CPU-ms/frame | range |", "| --- | --- | --- |"]
    for stage, values in sorted(table.items(), key=lambda kv: (kv[0].startswith("="), -statistics.median(kv[1]))):
        lines.append(f"| {stage} | {statistics.median(values):.2f} | {min(values):.2f}–{max(values):.2f} |")
    lines.append("load average at start: " + ", ".join(f"{r['load']:.1f}" for r in runs))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--resolution", default="720p", choices=["480p", "720p", "1080p"])
    p.add_argument("--frames", type=int, default=600)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--quality", default="full", help="pin the watchdog's level (default full); '' for automatic")
    p.add_argument("--detector", type=Path, default=SHARED / "models" / "scrfd_2.5g_kps.onnx")
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--no-spy", action="store_true", help="per-thread CPU only")
    p.add_argument("--json", default=None, help="also write the runs and the breakdown as JSON")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="print one breakdown over the runs of earlier --json files (e.g. runs interleaved with another build)")
    p.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.quality = args.quality or None
    if args.merge:
        runs = [run for path in args.merge for run in json.loads(Path(path).read_text())["runs"]]
        args.frames = f"{sorted({r['published'] for r in runs})[0]}+"
        print(format_breakdown(breakdown(runs), runs, args))
    elif args.child_json:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
