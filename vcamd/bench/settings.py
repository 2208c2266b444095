"""What one `vcamd bench` run is asked to do: the scenarios, the clip's size and length, the models,
the load — shared by the scenarios (`scenarios`) and the printout (`report`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESOLUTIONS = {"480p": (640, 480), "720p": (1280, 720), "1080p": (1920, 1080)}
SCENARIOS = ("light", "inswapper", "groups", "crowd", "resolution", "startup", "call", "remote")
DEFAULT_SCENARIOS = ("light", "inswapper")
PRECISIONS = ("float", "int8")
"""What `--precision` may list: the swapper in float, and its int8 copy (`vcamd.inference.precision`)."""
PRECISION_SCENARIOS = ("inswapper", "startup", "call")
"""The scenarios that run once per `--precision`, side by side (the others: the swapper in float)."""

GROUP_PHOTO = "solvay_conference_1927.png"
GROUP_FACES = 29
"""Without a group photo, the groups scenario tiles this many copies of --face (as many faces as
the 1927 Solvay photo the figures in docs/performance.md were measured on)."""
CROWD_PHOTO = "crowd_selfie.jpg"
CROWD_RESOLUTION = "1080p"
"""The crowd scenario's camera: 100+ small faces are a 1080p camera's case (at 720p most are too small to find)."""
CALL_SWAP_MS = 370.0
"""What the call scenario's swapper costs a face, quiet, as the run's swapper runs (`--swap-ms`):
the swapper the call's targets were set for. Built to measure on each machine (`callswapper`)."""
BUSY_CODE = "import os; os.write(1, b'.'); os.close(1)\nwhile 1: pass"
"""What a busy process of `--load` runs: one core's worth of CPU at normal priority. It writes one
byte before the loop, so the bench starts measuring once the load is really there (a process just
forked has not started Python yet)."""


@dataclass(frozen=True)
class BenchSettings:
    face: Path
    detector: str
    width: int
    height: int
    fps: float
    frames: int
    inswapper_frames: int
    providers: list[str]
    threads: int
    fp16: bool
    quality: str | None = None
    group_photo: Path | None = None
    """The groups scenario's photo; None: GROUP_FACES copies of `face` tiled (`clips.tiled_group`)."""
    crowd_photo: Path | None = None
    rounds: int = 1
    load: int = 0
    swap_ms: float = CALL_SWAP_MS
    swappers: tuple[str, ...] = ()
    """`--swapper`: the swapper models whose compute-equivalent stand-ins are timed (`modeltimes`)."""
    enhancers: tuple[str, ...] = ()
    """`--enhancer`: the same for enhancer models."""
    precisions: tuple[str, ...] = ("float",)
    workdir: Path | None = None
    """Where stand-ins, clips and int8 copies are built and kept for later runs; None: a temporary folder."""


def settings_dict(s: BenchSettings) -> dict:
    return {
        "face": str(s.face), "detector": s.detector, "width": s.width, "height": s.height, "fps": s.fps,
        "frames": s.frames, "inswapper_frames": s.inswapper_frames, "providers": s.providers, "threads": s.threads, "fp16": s.fp16,
        "quality": s.quality, "group_photo": str(s.group_photo) if s.group_photo else None,
        "crowd_photo": str(s.crowd_photo) if s.crowd_photo else None, "rounds": s.rounds,
        "load": s.load, "swap_ms": s.swap_ms, "swappers": list(s.swappers), "enhancers": list(s.enhancers),
        "precisions": list(s.precisions), "workdir": str(s.workdir) if s.workdir else None,
    }
