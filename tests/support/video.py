"""Reading back a video file a test wrote (a sink's output, `vcamd swap`'s result, a clip)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def read_video(path: Path) -> list[np.ndarray]:
    """Every frame of the video at `path`, in order (BGR, as OpenCV decodes them)."""
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened(), f"cannot open {path}"
    frames = []
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                return frames
            frames.append(frame)
    finally:
        capture.release()


def video_fps(path: Path) -> float:
    """The frame rate the container at `path` declares."""
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened(), f"cannot open {path}"
    try:
        return float(capture.get(cv2.CAP_PROP_FPS))
    finally:
        capture.release()
