"""`FakeEngine`: the engine's control surface (`vcamd.control.protocol.Controllable`) in memory.

Thread-safe; every call is recorded in `calls` (and, with `log_path`, appended to a JSON-lines
file, for a test that watches a subprocess). It really reads a source photo (`read_image`, which
refuses what the engine refuses) and really encodes its frame as PNG, so what a control server, the
control page or the tray hands back carries real data. The control, panel and tray suites subclass
it for what their tests look at (the status they report, a reload that fails, ...).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from vcamd.common.errors import FaceError
from vcamd.common.quality import Level
from vcamd.files.images import read_image


class FakeEngine:
    def __init__(self, frame: np.ndarray | None = None, *, log_path: Path | None = None) -> None:
        self._lock = threading.RLock()
        self.frame = frame
        self.log_path = log_path
        self.calls: list[tuple[str, Any]] = []
        self.enabled = True
        self.state = "running"
        self.level = Level.full
        self.quality: Level | None = None
        self.source_face: Path | None = None
        self.config_error: str | None = None
        self.badge = True
        self.transitions: list[dict[str, Any]] = []
        self.quit_requested = threading.Event()

    def log(self, event: str, value: Any = None) -> None:
        with self._lock:
            self.calls.append((event, value))
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"event": event, "value": value, "t": time.time()}) + "\n")

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "enabled": self.enabled,
                "state": self.state,
                "level": self.level if self.quality is None else self.quality,
                "quality": "auto" if self.quality is None else self.quality.name,
                "source_face": self.source_face,
                "config_error": self.config_error,
            }

    def set_enabled(self, on: bool) -> None:
        with self._lock:
            self.log("set_enabled", on)
            self.enabled = on

    def toggle(self) -> None:
        with self._lock:  # one step, like the engine's loop command; recorded as the change it made
            self.set_enabled(not self.enabled)

    def set_source_face(self, path: Path) -> None:
        self.log("set_source_face", str(path))
        read_image(path, "source face")  # raises FaceError for a missing or unreadable photo
        with self._lock:
            self.source_face = Path(path)

    def set_quality(self, level: Level | None) -> None:
        with self._lock:
            self.log("set_quality", None if level is None else level.name)
            self.quality = level

    def reload_config(self) -> None:
        self.log("reload_config")

    def snapshot_png(self) -> bytes:
        import cv2

        frame = self.latest_frame()
        if frame is None:
            raise FaceError("no frame yet", fix="wait for the camera")
        ok, encoded = cv2.imencode(".png", frame)
        assert ok
        return encoded.tobytes()

    def latest_frame(self) -> np.ndarray | None:
        with self._lock:
            return self.frame

    def recent_transitions(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.transitions)

    def set_badge(self, on: bool) -> None:
        with self._lock:
            self.log("set_badge", on)
            self.badge = on

    def set_model(self, role: str, name: str) -> None:
        with self._lock:
            self.log("set_model", [role, name])
            self.models = {**getattr(self, "models", {}), role: name}

    def request_quit(self) -> None:
        self.log("request_quit")
        self.quit_requested.set()
