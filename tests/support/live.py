"""Helpers for tests of the live engine: a real face engine with a method replaced, and a
`LiveEngine` playing a clip in a loop into a sink."""

from __future__ import annotations

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
