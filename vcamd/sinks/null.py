"""`--sink null`: frames are counted and discarded (benchmarks, tests)."""

from __future__ import annotations

from typing import Any

from vcamd.common.types import Frame
from vcamd.config.schema import Config


class NullSink:
    """Counts frames and discards them (benchmarks, tests)."""

    url = None  # no page to watch it on

    @classmethod
    def from_spec(cls, argument: str, cfg: Config, width: int, height: int, fps: float) -> NullSink:
        return cls(width, height)

    def __init__(self, width: int = 0, height: int = 0) -> None:
        self._size = (width, height)
        self._state = "new"
        self.frames_sent = 0

    def open(self) -> None:
        if self._state == "closed":
            raise RuntimeError("NullSink cannot be reopened after close(); build a new one")
        self._state = "open"

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None:
        if self._state == "new":
            raise RuntimeError("NullSink.send() before open()")
        if self._state == "open":
            self.frames_sent += 1

    def close(self) -> None:
        self._state = "closed"

    def describe(self) -> str:
        return "null (frames are counted and discarded)"
