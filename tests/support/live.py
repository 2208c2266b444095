"""Helpers for tests of the live engine: a real face engine with a method replaced, and a
`LiveEngine` playing a clip in a loop into a sink."""

from __future__ import annotations

import threading

import numpy as np

from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine


class Wrapped:
    """The real face engine with one method replaced (a failure injected around it)."""

    def __init__(self, engine, **replace) -> None:
        self._engine = engine
        self.__dict__.update(replace)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def make_engine(cfg, clip, faces, sink):
    return LiveEngine(cfg, source=open_source(str(clip), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink, faces=faces)


class KeepAll:
    """A sink keeping every published frame."""

    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        pass

    def send(self, frame: np.ndarray, stats: dict | None = None) -> None:
        with self._lock:
            self.frames.append(frame.copy())

    def close(self) -> None:
        pass

    def since(self, start: int) -> list[np.ndarray]:
        """The frames published from the `start`-th on."""
        with self._lock:
            return self.frames[start:]


class WatchedEvent(threading.Event):
    """An event that says when somebody started waiting on it (`waited`): a test can tell "it
    waits" from "it went on" without a clock."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return super().wait(timeout)

