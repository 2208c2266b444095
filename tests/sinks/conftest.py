"""Fixtures for the sink tests: configs, a fake sysfs tree, scripted cameras, a publisher thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vcamd.config.reading import config_from_dict
from vcamd.config.schema import Config


@pytest.fixture
def make_config() -> Callable[..., Config]:
    """`make_config(preview={"port": 0})` → a validated Config with those sections set."""

    def make(**sections: dict[str, Any]) -> Config:
        return config_from_dict(sections)

    return make


@pytest.fixture
def solid() -> Callable[[int, int, tuple[int, int, int]], np.ndarray]:
    """`solid(w, h, (b, g, r))` → a BGR frame of one colour."""

    def make(width: int, height: int, bgr: tuple[int, int, int]) -> np.ndarray:
        frame = np.empty((height, width, 3), np.uint8)
        frame[:] = bgr
        return frame

    return make


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> Callable[..., Path]:
    """`fake_sysfs({"video0": "Integrated Camera", ...}, module_loaded=False)` → a /sys-like root."""

    def build(devices: dict[str, str], module_loaded: bool = False) -> Path:
        root = tmp_path / "sys"
        class_dir = root / "class" / "video4linux"
        class_dir.mkdir(parents=True, exist_ok=True)
        for node, label in devices.items():
            (class_dir / node).mkdir()
            (class_dir / node / "name").write_text(label + "\n")
        if module_loaded:
            (root / "module" / "v4l2loopback").mkdir(parents=True)
        return root

    return build


class ScriptedCamera:
    """Stands in for pyvirtualcam.Camera (the device, not the sink under test).

    `fail_next` is how many of the following send() calls raise; -1 = every one.
    """

    def __init__(self, device: str | None, backend: str = "v4l2loopback", fail_next: int = 0) -> None:
        self._device = device or "OBS Virtual Camera"
        self._backend = backend
        self.fail_next = fail_next
        self.calls = 0
        self.frames: list[np.ndarray] = []
        self.closed = False

    @property
    def device(self) -> str:
        return self._device

    @property
    def backend(self) -> str:
        return self._backend

    def send(self, frame: np.ndarray) -> None:
        self.calls += 1
        if self.closed:
            raise RuntimeError("send on a closed camera")
        if self.fail_next:
            self.fail_next -= 1 if self.fail_next > 0 else 0
            raise OSError(5, "Input/output error")
        self.frames.append(frame)

    def close(self) -> None:
        self.closed = True


class CameraFactoryLog:
    """A camera factory that records its calls and hands out ScriptedCameras (or raises)."""

    def __init__(self, backend: str = "v4l2loopback", fail_first_send: int = 0) -> None:
        self.backend = backend
        self.fail_first_send = fail_first_send
        self.calls: list[tuple[int, int, float, str | None, str | None]] = []
        self.cameras: list[ScriptedCamera] = []
        self.open_error: Exception | None = None

    def __call__(self, width: int, height: int, fps: float, device: str | None, backend: str | None) -> ScriptedCamera:
        self.calls.append((width, height, fps, device, backend))
        if self.open_error is not None:
            raise self.open_error
        camera = ScriptedCamera(device, backend or self.backend, fail_next=self.fail_first_send if not self.cameras else 0)
        self.cameras.append(camera)
        return camera


@pytest.fixture
def camera_factory() -> Callable[..., CameraFactoryLog]:
    return CameraFactoryLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def publisher() -> Iterator[Callable[..., threading.Event]]:
    """`publisher(sink, frame, stats, fps=30, burst=1)` sends `frame` on a thread until the test ends,
    `burst` times each time the thread wakes (so many frames per wake however rarely a loaded
    machine lets the thread run)."""
    stops: list[threading.Event] = []
    threads: list[threading.Thread] = []

    def start(sink: Any, frame: np.ndarray, stats: dict[str, Any] | None = None, fps: float = 30.0, burst: int = 1) -> threading.Event:
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                for _ in range(burst):
                    sink.send(frame, stats)
                time.sleep(1.0 / fps)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        stops.append(stop)
        threads.append(thread)
        return stop

    yield start
    for stop in stops:
        stop.set()
    for thread in threads:
        thread.join(timeout=2)
