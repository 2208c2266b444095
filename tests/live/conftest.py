"""Fixtures for the live-daemon tests: a video file that plays like a camera, stand-in models,
a real face engine on the real SCRFD detector, and a sink that records what was published."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from vcamd.config.reading import config_from_dict
from vcamd.config.schema import Config

CLIP_SIZE = (640, 480)


def write_clip(path: Path, image: np.ndarray, *, fps: float, frames: int, size: tuple[int, int] = CLIP_SIZE) -> Path:
    """`image` (3/4 of the frame) sliding 3 px a frame on grey."""
    from vcamd.bench.clips import write_sliding_clip

    return write_sliding_clip(path, image, size=size, fps=fps, frames=frames, step_px=3)


@pytest.fixture
def make_clip(tmp_path, newton) -> Callable[..., Path]:
    """`make_clip(name, fps=, frames=, size=)` → a newton clip in tmp_path."""

    def make(name: str, *, fps: float, frames: int, size: tuple[int, int] = CLIP_SIZE) -> Path:
        return write_clip(tmp_path / name, newton, fps=fps, frames=frames, size=size)

    return make


@pytest.fixture(scope="session")
def clip_20fps(tmp_path_factory, newton) -> Path:
    """640×480, 20 fps, 2 s: played with loop it is an endless camera."""
    return write_clip(tmp_path_factory.mktemp("clips") / "newton_20fps.avi", newton, fps=20.0, frames=40)


@pytest.fixture(scope="session")
def models(tmp_path_factory, assets: Path) -> dict[str, Path]:
    """Real SCRFD from the shared assets; swapper and recognizer stand-ins built here."""
    from vcamd.bench.standins import build_recognizer, build_swapper

    d = tmp_path_factory.mktemp("models")
    return {
        "detector": assets / "models" / "scrfd_500m_kps.onnx",
        "swapper": build_swapper(d / "swapper_light.onnx"),
        "recognizer": build_recognizer(d / "recognizer.onnx"),
    }


@pytest.fixture(scope="session")
def live_config(models, assets) -> Callable[..., Config]:
    """Config for a live test run: stand-in models, newton as source face, consent given."""

    def make(**sections) -> Config:
        data = {
            "models": {
                "detector": str(models["detector"]),
                "swapper": str(models["swapper"]),
                "recognizer": str(models["recognizer"]),
                "providers": ["cpu"],
                "threads": 1,
            },
            "detection": {"size": 320, "track_size": 160, "full_every": 10},
            "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
            "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
        }
        for name, values in sections.items():
            data.setdefault(name, {}).update(values)
        return config_from_dict(data)

    return make


class RecordingSink:
    """Keeps every published frame's time and a copy of every `keep_every`-th frame."""

    def __init__(self, keep_every: int = 1) -> None:
        self.keep_every = keep_every
        self.times: list[float] = []
        self.frames: list[np.ndarray] = []
        self.opened = self.closed = False
        self.status: dict | None = None
        """The engine's status as of the last frame (its own snapshot, not a copy)."""
        self._lock = threading.Lock()

    def open(self) -> None:
        self.opened = True

    def send(self, frame: np.ndarray, stats: dict | None = None) -> None:
        with self._lock:
            if len(self.times) % self.keep_every == 0:
                self.frames.append(frame.copy())
            self.times.append(time.monotonic())
            self.status = stats

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def recording_sink() -> Callable[..., RecordingSink]:
    return RecordingSink


@pytest.fixture(scope="session")
def face_engine_factory() -> Callable[[Config], object]:
    """Builds the real face engine (vcamd.faces.engine.FaceEngine) for a config."""
    from vcamd.live.loading import build_face_pipeline

    return lambda cfg: build_face_pipeline(cfg)[0]


@pytest.fixture
def run_live(face_engine_factory, recording_sink):
    """Run the live engine on a video-file camera for `frames` published frames.

    Returns (stats JSON, the recording sink, the engine). `wrap` may wrap the face engine (to make
    its swapper block or crash); `before_run(engine)` is called once it is built. With `until`, `frames` is only a cap: the run stops as soon as
    `until(sink)` holds — for a condition whose frame count depends on how busy the machine is
    (how many detections fit in a second), never a guessed frame count."""
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine

    def run(cfg: Config, clip: Path, *, frames: int, loop: bool = True, wrap=None, keep_every: int = 5,
            until: Callable[[RecordingSink], bool] | None = None, before_run: Callable[[object], None] | None = None):
        faces = face_engine_factory(cfg)
        if wrap is not None:
            faces = wrap(faces)
        sink = recording_sink(keep_every=keep_every)
        engine = LiveEngine(
            cfg, source=open_source(str(clip), cfg.camera, loop=loop), sink_factory=lambda w, h, fps: sink, faces=faces,
        )
        if before_run is not None:
            before_run(engine)
        if until is None:
            return engine.run(max_frames=frames), sink, engine
        done = threading.Event()

        def stop_when_met() -> None:
            while not done.wait(0.01):
                if until(sink):
                    engine.request_quit()
                    return

        watcher = threading.Thread(target=stop_when_met, name="test-until", daemon=True)
        watcher.start()
        try:
            stats = engine.run(max_frames=frames)
        finally:
            done.set()
            watcher.join()
        return stats, sink, engine

    return run

