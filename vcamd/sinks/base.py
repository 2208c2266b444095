"""The one contract every output follows (`Sink`), and the resize helper the sinks share.

Build a sink with `vcamd.sinks.registry.open_sink(spec, …)`, call `open()` before the first frame (that is
where a missing device or a busy port is reported, as a `VcamdError` naming the fix), `send()` each
published frame from the loop's thread, and `close()` at the end (idempotent).
Each sink class also builds itself from its `--sink` spec with the classmethod
`from_spec(argument, cfg, width, height, fps)` — what `registry.FORMS` calls.

Rules every sink keeps, because the loop is on the frame budget:
- `send()` never raises for a transient problem (a failed device write, a preview client that
  went away); it counts it and carries on. It raises `RuntimeError` only when called before
  `open()` — a programming error. After `close()`, frames are dropped silently (shutdown races).
- An output that can be lost for good (the file sink's recording, on a disk that filled up) says
  why in a `failure` attribute (a `VcamdError`, None while fine) once closed: `vcamd run` exits
  with it rather than reporting the frames it published.
- A frame whose size differs from the size the sink was opened with is resized, and only then.
- A sink never keeps a reference to a frame after `send()` returns: the caller may reuse or draw
  on the array. Sinks that need the pixels later copy them, and only when someone will look.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast, runtime_checkable

import cv2

from vcamd.common.types import Frame


@runtime_checkable
class Sink(Protocol):
    """What the live engine publishes to. See the module docstring for the rules."""

    def open(self) -> None:
        """Acquire the device/port/file. Raises VcamdError with the fix when it cannot."""

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None:
        """Publish one BGR frame; `stats` is the engine's latest status (kept, not copied)."""

    def close(self) -> None:
        """Release everything. Safe to call twice and from another thread."""

    @property
    def url(self) -> str | None:
        """The page where a person watches this output (once open); None for a sink without one."""


SinkFactory = Callable[[int, int, float], Sink]
"""(width, height, fps) -> a sink, not yet open: how the engine (re)builds its output."""


def fit_to_size(frame: Frame, width: int, height: int) -> Frame:
    """`frame` itself when it already has the size, else a resized copy (the only full-frame op here)."""
    h, w = frame.shape[:2]
    if (w, h) == (width, height):
        return frame
    shrinking = w * h > width * height
    # cv2's stubs type every result as a generic array: a uint8 frame in is a uint8 frame out.
    return cast(Frame, cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR))
