"""Live-loop benchmark: the same code as `vcamd bench`, with the shared test assets as defaults.

    .venv/bin/python benchmarks/live.py                      # 720p @ 30 fps, light + inswapper stand-ins, CPU
    .venv/bin/python benchmarks/live.py --frames 600 --json out.json
    .venv/bin/python benchmarks/live.py --resolution 1080p --providers cuda --fp16   # a GPU machine

Prints one table: published vs source fps, capture→publish p50/p95/p99, pipeline overhead per frame
(everything but model inference), CPU-ms per frame and % of frames swapped, against the targets.
"""

from __future__ import annotations

import sys
from pathlib import Path

from vcamd.cli import main

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "assets"
DEFAULTS = [
    "--face", str(SHARED / "images" / "newton.png"),
    "--detector", str(SHARED / "models" / "scrfd_2.5g_kps.onnx"),
    "--providers", "cpu",
]


def with_defaults(argv: list[str]) -> list[str]:
    """Shared-asset defaults for the options the caller did not give."""
    given = {a.split("=")[0] for a in argv if a.startswith("--")}
    extra: list[str] = []
    for flag, value in zip(DEFAULTS[::2], DEFAULTS[1::2]):
        if flag not in given:
            extra += [flag, value]
    return ["bench", *extra, *argv]


if __name__ == "__main__":
    if not SHARED.is_dir():
        sys.exit(f"shared assets not found at {SHARED}: pass --face PHOTO and --detector MODEL")
    sys.exit(main(with_defaults(sys.argv[1:])))
