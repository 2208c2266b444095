"""The preview page in a real browser (Debian's headless chromium): live stats and the live picture."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.quality import Level
from vcamd.sinks.preview import PreviewSink

FRAME_BGR = (40, 180, 220)  # a warm yellow: RGB (220, 180, 40)
# The shape of the --stats-json document…
STATS_JSON = {
    "state": "running",
    "fps": {"published": 27.3, "source": 29.9},
    "latency_ms": {"p50": 14.2, "p95": 33.8, "p99": 39.0},
    "level": Level.no_enhancer,
    "frames": {"swapped": 4321, "held": 17, "published": 4400},
    "queue_depth": {"max": 1},
    "providers": {"scrfd_2.5g_kps.onnx": "CPUExecutionProvider"},
}
STATS_JSON_SHOWN = {
    "conn": "live",
    "state": "running",
    "camera": "–",
    "fps": "27.3",
    "fps-source": "29.9",
    "latency-p50": "14.2 ms",
    "latency-p95": "33.8 ms",
    "level": "no_enhancer",
    "swapped": "4321",
    "held": "17",
    "queue": "1",
    "providers": "scrfd_2.5g_kps.onnx: CPUExecutionProvider",
}
# …and the shape of the engine's status() (what `vcamd run` hands the sink).
ENGINE_STATUS = {
    "enabled": True,
    "state": "offline",
    "camera": "reopening",
    "level": "frame_skip",
    "fps": 24.75,
    "latency_ms": {"p50": 18.0, "p95": 41.5},
    "providers": {"det_10g.onnx": "CUDAExecutionProvider"},
    "frames": {"published": 99, "swapped": 80, "held": 12},
    "queue_depth": 0,
}
ENGINE_STATUS_SHOWN = {
    "conn": "live",
    "state": "offline",
    "camera": "reopening",
    "fps": "24.8",
    "fps-source": "–",
    "latency-p50": "18.0 ms",
    "latency-p95": "41.5 ms",
    "level": "frame_skip",
    "swapped": "80",
    "held": "12",
    "queue": "0",
    "providers": "det_10g.onnx: CUDAExecutionProvider",
}


@pytest.fixture
def start_preview(make_config, publisher, solid) -> Iterator:
    """`start_preview(stats)` → an open PreviewSink receiving a solid frame and `stats` at 30 fps."""
    sinks: list[PreviewSink] = []

    def start(stats: dict) -> PreviewSink:
        sink = PreviewSink(make_config(preview={"port": 0}).preview, 320, 240, 30.0)
        sink.open()
        sinks.append(sink)
        publisher(sink, solid(320, 240, FRAME_BGR), stats)
        return sink

    yield start
    for sink in sinks:
        sink.close()


def run_chromium(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=3000",
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.mark.parametrize(
    ("stats", "shown"), [(STATS_JSON, STATS_JSON_SHOWN), (ENGINE_STATUS, ENGINE_STATUS_SHOWN)], ids=["stats-json", "engine-status"]
)
def test_page_shows_the_live_stats(chromium, start_preview, tmp_path, stats, shown):
    sink = start_preview(stats)
    dom = run_chromium(chromium, tmp_path, "--dump-dom", sink.login_url()).stdout
    assert dict(re.findall(r'<dd id="([\w-]+)"[^>]*>(.*?)</dd>', dom)) == shown


def test_page_shows_the_live_picture(chromium, start_preview, tmp_path):
    sink = start_preview(STATS_JSON)
    png = tmp_path / "page.png"
    run_chromium(chromium, tmp_path, f"--screenshot={png}", "--window-size=800,600", sink.login_url())  # logs in once, as from the tray
    shot = cv2.imread(str(png), cv2.IMREAD_COLOR)
    assert shot is not None and shot.shape[:2] == (600, 800)
    near = np.abs(shot.astype(int) - np.array(FRAME_BGR)).max(axis=2) <= 12
    # The 320×240 frame is drawn at its natural size: most of its 76 800 pixels carry its colour.
    assert near.sum() > 0.8 * 320 * 240, f"only {near.sum()} pixels of the frame's colour in the screenshot"
    ys, xs = np.nonzero(near)
    assert xs.max() - xs.min() + 1 >= 300 and ys.max() - ys.min() + 1 >= 220
