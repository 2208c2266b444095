"""A webcam through OpenCV (`OpenCVCamera`: V4L2 on Linux, MSMF/DirectShow on Windows,
AVFoundation on macOS), the cameras this machine has (`list_cameras`, `cameras_here`), and what
every OpenCV capture shares — the video file played as a camera too (`vcamd.live.capture.sources`):
its frame size checked, whether it is MJPG, OpenCV's own log silenced while a camera is tried."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from vcamd.common.errors import VcamdError
from vcamd.common.types import Frame
from vcamd.config.schema import CameraConfig
from vcamd.live.capture.jpeg import NOT_AN_IMAGE, decode_jpeg, is_jpeg_packet

log = logging.getLogger(__name__)

MIN_FRAME_SIDE = 32
"""Smallest frame width/height a camera may deliver: below it no face can be found (the detector's
smallest anchor is 16 px) and no message fits on the offline card; such a source is refused at open."""


class Capture(Protocol):
    """What the sources ask of an opened `cv2.VideoCapture` (a test's stand-in driver offers the same)."""

    def isOpened(self) -> bool: ...

    def release(self) -> None: ...

    def get(self, prop_id: int, /) -> float: ...

    def set(self, prop_id: int, value: float, /) -> bool: ...

    def grab(self) -> bool: ...

    def read(self) -> tuple[bool, npt.NDArray[Any] | None]:
        """(ok, the image: uint8 BGR, or a JPEG packet's bytes as a 1×N row; None past the end)."""
        ...

    def getBackendName(self) -> str: ...


def checked_frame_size(cap: Capture, description: str, *, fix: str) -> tuple[int, int] | None:
    """(width, height) an opened capture reports; None when it does not know yet (some backends
    say 0 until the first frame). Refuses frames smaller than MIN_FRAME_SIDE with one line."""
    import cv2

    width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    if width <= 0 or height <= 0:
        return None
    if width < MIN_FRAME_SIDE or height < MIN_FRAME_SIDE:
        raise VcamdError(f"{description} delivers {width}×{height} frames, too small for face swapping "
                         f"(the minimum is {MIN_FRAME_SIDE}×{MIN_FRAME_SIDE})", fix=fix)
    return width, height


def is_mjpg(cap: Capture) -> bool:
    import cv2

    fourcc = int(cap.get(cv2.CAP_PROP_FOURCC)) & 0xFFFFFFFF
    return fourcc.to_bytes(4, "little").upper() == b"MJPG"


def _undecoded_mjpg(cap: Capture) -> bool:
    """Ask an MJPG webcam on Linux's V4L2 backend for its JPEGs undecoded; whether it agreed.

    With conversion off, OpenCV's V4L2 backend hands over each frame's JPEG as a 1×N byte row
    (its `retrieveFrame`), which `decode_jpeg` decodes to the same pixels with less CPU — and
    without the full-frame copy out of OpenCV's own buffer that `read()` makes of a decoded frame.
    Other backends (MSMF, DirectShow, AVFoundation, GStreamer) decode as they always did."""
    import cv2

    if cap.getBackendName() != "V4L2" or not is_mjpg(cap):
        return False
    return bool(cap.set(cv2.CAP_PROP_CONVERT_RGB, 0))


class OpenCVCamera:
    """A webcam through OpenCV (V4L2 on Linux, MSMF/DirectShow on Windows, AVFoundation on macOS)."""

    def __init__(self, device: int | str, cfg: CameraConfig, *, open_capture: Callable[[int | str], Capture] | None = None) -> None:
        self.device = device
        self.cfg = cfg
        self.description = f"camera {device}"
        self._open_capture = open_capture  # None: cv2.VideoCapture; a test passes a stand-in driver
        self._cap: Capture | None = None
        self._packets = False  # the backend hands over the camera's JPEGs undecoded (V4L2 + MJPG)
        self._fps = cfg.fps
        self.frame_size: tuple[int, int] | None = None
        self.skipped = 0  # a camera delivers as it captures: nothing is skipped at the source

    @property
    def fps(self) -> float:
        return self._fps

    def open(self) -> None:
        import cv2

        with opencv_quiet():  # each backend OpenCV tries prints its own failure; ours is the one line below
            cap = (self._open_capture or cv2.VideoCapture)(self.device)
        if not cap.isOpened():
            cap.release()
            raise VcamdError(
                f"cannot open {self.description}",
                fix=f"check it is plugged in and not used by another app; {cameras_here()}; "
                "set [camera] device or pass --source (no webcam: `--source synthetic`, a test pattern, or a video file)",
            )
        if self.cfg.mjpg:
            # MJPG lets USB cameras deliver 720p/1080p at 30 fps; raw YUYV usually cannot.
            cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*"MJPG"))
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.cfg.width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.cfg.height)
        cap.set(cv2.CAP_PROP_FPS, self.cfg.fps)
        cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # the driver's own queue: keep it as short as it allows
        got = cap.get(cv2.CAP_PROP_FPS)
        self._fps = float(got) if got and got > 0 else self.cfg.fps
        try:
            self.frame_size = checked_frame_size(cap, self.description, fix="set [camera] width and height to a mode "
                                                 "the camera supports (e.g. 640 and 480)")
        except VcamdError:
            cap.release()
            raise
        self._packets = _undecoded_mjpg(cap)
        self._cap = cap

    def read(self) -> Frame | None:
        if self._cap is None:
            return None
        ok, frame = self._cap.read()
        if not ok:
            return None
        if not self._packets or frame is None:
            return frame
        if is_jpeg_packet(frame):
            return decode_jpeg(frame)
        return self._decoding_in_opencv_again(frame)

    def _decoding_in_opencv_again(self, frame: object) -> Frame:
        """The backend agreed to hand over JPEGs but sent something else (a driver that switched
        format, an OpenCV that decodes anyway): a decoded picture is used as it is; anything
        else is a bad frame, and OpenCV decodes from the next frame on."""
        import cv2

        if isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] == 3:
            return frame
        log.warning("%s sent a frame that is not a JPEG (shape %s) although it is in MJPG mode; "
                    "OpenCV decodes its frames from now on", self.description, getattr(frame, "shape", None))
        self._packets = False
        if self._cap is not None:  # read() called this with its capture open
            self._cap.set(cv2.CAP_PROP_CONVERT_RGB, 1)
        return NOT_AN_IMAGE

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None


@contextmanager
def opencv_quiet() -> Iterator[None]:
    """OpenCV's own log silenced for the duration: opening a missing camera makes every backend it
    tries print warnings (V4L2, FFmpeg, obsensor) before our one-line error — and again on every
    reopen attempt while the camera is unplugged."""
    import cv2

    api = getattr(getattr(cv2, "utils", None), "logging", None)
    if api is None:
        yield
        return
    previous = api.getLogLevel()
    api.setLogLevel(api.LOG_LEVEL_SILENT)
    try:
        yield
    finally:
        api.setLogLevel(previous)


VIDEO4LINUX = Path("/sys/class/video4linux")


def list_cameras(root: Path = VIDEO4LINUX) -> list[tuple[str, str]]:
    """The video devices of this machine as (device path, name), Linux only ([] elsewhere)."""
    try:
        entries = [e for e in root.iterdir() if e.name.startswith("video") and e.name[5:].isdigit()]
    except OSError:
        return []
    cameras = []
    for entry in sorted(entries, key=lambda e: int(e.name[5:])):
        try:
            name = (entry / "name").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            name = ""
        cameras.append((f"/dev/{entry.name}", name or "unnamed"))
    return cameras


def cameras_here(root: Path = VIDEO4LINUX) -> str:
    """The cameras that exist, said for an error's fix."""
    cameras = list_cameras(root)
    if cameras:
        return "cameras here: " + ", ".join(f"{path} ({name})" for path, name in cameras)
    if root.is_dir() or sys.platform.startswith("linux"):
        return "no camera was found (no /dev/video device)"
    return "list your cameras with your system's camera settings"
