"""The published frames' latency p95 with and without a flood of status requests on the control socket.

    .venv/bin/python benchmarks/control_flood.py [--clients 200] [--seconds 10]

Runs the real `vcamd run` twice (a 640×480 face clip played as the camera, the real SCRFD
detector, stand-in recognizer/swapper from vcamd.bench.standins, the null sink): once alone, once while
`--clients` threads in another process ask for `status` as fast as they are answered. Each run
ends with `vcamd quit`; the daemon's own `--stats-json` gives the capture→publish latency.

Issue 10 measured p95 11 → 46 ms under 200 status clients with a thread per connection. Not a
test: it prints numbers (a loaded machine moves them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO.parent / "shared" / "assets"

FLOOD = r"""
import sys, threading, time
from pathlib import Path
from vcamd.control.client import ControlClient
from vcamd.control.protocol import ControlError, DaemonNotRunning

runtime, clients, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
answered, refused = [0], [0]
lock = threading.Lock()
end = time.monotonic() + seconds

def ask():
    client = ControlClient(runtime, timeout_s=10)
    while time.monotonic() < end:
        try:
            client.status()
            with lock: answered[0] += 1
        except (ControlError, DaemonNotRunning, OSError):
            with lock: refused[0] += 1

threads = [threading.Thread(target=ask) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
print(answered[0], refused[0])
"""


def build_inputs(folder: Path) -> tuple[Path, Path]:
    import cv2
    import tomli_w

    from vcamd.bench.clips import write_sliding_clip
    from vcamd.bench.standins import build_recognizer, build_swapper

    newton = cv2.imread(str(ASSETS / "images" / "newton.png"))
    clip = write_sliding_clip(folder / "camera.avi", newton, size=(640, 480), fps=30.0, frames=60, face_scale=0.6)
    config = folder / "config.toml"
    config.write_text(tomli_w.dumps({
        "models": {"detector": str(ASSETS / "models" / "scrfd_500m_kps.onnx"),
                   "swapper": str(build_swapper(folder / "swapper.onnx")),
                   "recognizer": str(build_recognizer(folder / "recognizer.onnx")), "providers": ["cpu"], "threads": 1},
        "detection": {"size": 320, "track_size": 160},
        "swap": {"source_face": str(ASSETS / "images" / "newton.png"), "source_consent": True},
    }))
    return clip, config


def one_run(folder: Path, clip: Path, config: Path, seconds: float, clients: int) -> dict:
    from vcamd.control.client import ControlClient

    runtime = Path(tempfile.mkdtemp(prefix="vcb-", dir="/tmp"))
    stats = folder / f"stats-{clients}.json"
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(runtime)}
    daemon = subprocess.Popen([sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(clip), "--loop",
                               "--sink", "null", "--no-tray", "--stats-json", str(stats)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = ControlClient(runtime, timeout_s=10)
    deadline = time.monotonic() + 60
    while not client.is_running():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the daemon did not start (exit {daemon.poll()})")
        time.sleep(0.2)
    time.sleep(2.0)  # past the warm-up frames; the stats below still cover the whole run
    answered = refused = 0
    if clients:
        flood = subprocess.run([sys.executable, "-c", FLOOD, str(runtime), str(clients), str(seconds)],
                               env=env, capture_output=True, text=True, timeout=seconds + 120)
        answered, refused = (int(v) for v in flood.stdout.split())
    else:
        time.sleep(seconds)
    threads = _thread_count(daemon.pid)
    client.quit()
    daemon.wait(30)
    data = json.loads(stats.read_text())
    return {"p50": data["latency_ms"]["p50"], "p95": data["latency_ms"]["p95"], "fps": data["fps"]["published"],
            "answered": answered, "refused": refused, "threads": threads, "exit": daemon.returncode}


def _thread_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clip, config = build_inputs(folder)
        rows = [("no flood", one_run(folder, clip, config, args.seconds, 0)),
                (f"{args.clients} status clients", one_run(folder, clip, config, args.seconds, args.clients))]
    print(f"{'run':<22} {'p50 ms':>7} {'p95 ms':>7} {'fps':>6} {'answers':>8} {'refused':>8} {'threads':>8} {'exit':>5}")
    for name, r in rows:
        print(f"{name:<22} {r['p50']:7.1f} {r['p95']:7.1f} {r['fps']:6.1f} {r['answered']:8d} {r['refused']:8d} "
              f"{r['threads']:8d} {r['exit']:5d}")


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
