"""Where live frames come from: a camera, a video file played like a camera, or a test pattern.

A `reader.CameraReader` thread reads the source as fast as it delivers and writes each frame, stamped with
its capture time, into a `reader.LatestFrame` slot. The slot holds at most one frame: a newer frame
replaces an older one that nobody took (the older one is counted as dropped), so the pipeline never
works on a stale frame and nothing queues up.

When the source stops delivering (unplugged, file ended without loop), the reader reports the
source offline, releases it and reopens it every `reopen_interval_s` until it delivers again.
"""

from __future__ import annotations

import logging
import sys
import time
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

Clock = Callable[[], float]

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


class FrameSource(Protocol):
    """A source of frames. `read()` blocks until the next frame is due and returns None when the
    source has stopped delivering (camera lost, file ended)."""

    description: str
    skipped: int
    """Frames the source let pass undelivered because it lagged (dropped before the reader saw them)."""

    def open(self) -> None: ...

    def read(self) -> Frame | None: ...

    def close(self) -> None: ...

    @property
    def fps(self) -> float: ...

    @property
    def frame_size(self) -> tuple[int, int] | None:
        """(width, height) of the frames once open, if the source knows it."""
        ...






class Pacer:
    """Holds a fixed frame rate by the wall clock: frame k is due at t0 + k / fps.

    `due_index()` says which frame the clock has reached, so a source that fell behind can skip
    straight to it instead of playing late frames.
    """

    def __init__(self, fps: float, clock: Clock = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.fps = fps
        self._clock = clock
        self._sleep = sleep
        self._t0: float | None = None

    def restart(self) -> None:
        self._t0 = None

    def due_index(self) -> int:
        now = self._clock()
        if self._t0 is None:
            self._t0 = now
        return int((now - self._t0) * self.fps)

    def rebase(self, index: int) -> None:
        """Make frame `index` due now: a source that fell behind for good plays on from here at its
        rate instead of chasing a clock it cannot catch."""
        self._t0 = self._clock() - index / self.fps

    def wait_for(self, index: int) -> None:
        if self._t0 is None:
            self._t0 = self._clock()
        delay = self._t0 + index / self.fps - self._clock()
        if delay > 0:
            self._sleep(delay)


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


class VideoFileCamera:
    """A video file played in real time as if it were a camera.

    An MJPG file (what the bench and the tests record, and what webcams send at 720p/1080p) is read
    as its JPEG packets, each one decoded by `jpeg.decode_jpeg` as an MJPG webcam's frames are
    (libjpeg-turbo, straight to BGR), about half the CPU of FFmpeg's decoder plus its colour
    conversion; a skipped frame is then not decoded at all. Other codecs
    are decoded by FFmpeg as they come.

    Frames are released at the file's frame rate by the wall clock. When decoding falls behind the
    clock for a moment, frames are skipped (grabbed, not converted) — a camera does not wait for
    anyone either. When decoding is slower than the file's rate (a 4K MJPEG file at 120 fps on a
    small CPU), skipping cannot catch up: a grab decodes too, so each skip loses more ground. Then
    every decoded frame is delivered as soon as it is ready — like a camera that delivers slower
    than its nominal rate: what arrives, at the rate it arrives. With `loop`, playback restarts at
    the end; without it the source reports itself finished (read() → None), which the reader
    treats like an unplugged camera.
    """

    CATCH_UP_BUDGET_S = 0.1
    """Longest one read() spends skipping late frames; still behind after that, the file plays on
    from where it is (the pacer is rebased) rather than falling silent while it skips."""

    def __init__(self, path: Path, *, loop: bool, clock: Clock = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.path = path
        self.loop = loop
        self.description = f"video file {path}"
        self._clock = clock
        self._sleep = sleep  # with `clock`, the pacer's time: a test passes both and owns the clock
        self._cap: Capture | None = None
        self._packets = False  # the capture delivers undecoded JPEG packets (MJPG files)
        self._fps = 30.0
        self._pacer = Pacer(self._fps, clock, sleep)
        self._next = 0  # index (since the pacer's start) of the next frame to release
        self._decode_s = 0.0  # recent cost of decoding one frame (moving average)
        self.skipped = 0
        """Frames whose time passed while decoding lagged: skipped without decoding (dropped)."""
        self.frame_size: tuple[int, int] | None = None

    @property
    def fps(self) -> float:
        return self._fps

    def open(self) -> None:
        import cv2

        if not self.path.is_file():
            raise VcamdError(f"video file not found: {self.path}", fix="check [camera] device or --source")
        cap = cv2.VideoCapture(str(self.path))
        if not cap.isOpened():
            raise VcamdError(
                f"cannot open video file {self.path}", fix="use a file OpenCV/FFmpeg can decode (mp4, avi, mkv)"
            )
        fps = cap.get(cv2.CAP_PROP_FPS)
        self._fps = float(fps) if fps and 1.0 <= fps <= 240.0 else 30.0
        try:
            self.frame_size = checked_frame_size(cap, self.description, fix="use a video of at least "
                                                 f"{MIN_FRAME_SIDE}×{MIN_FRAME_SIDE} pixels (e.g. 640×480)")
        except VcamdError:
            cap.release()
            raise
        self._pacer = Pacer(self._fps, self._clock, self._sleep)
        self._next = 0
        self._decode_s = 0.0
        self._packets = _jpeg_packets(cap)
        self._cap = cap

    def read(self) -> Frame | None:
        cap = self._cap
        if cap is None:
            return None
        due = self._pacer.due_index()
        if self._next < due and not self._can_catch_up():
            self._pacer.rebase(self._next)
            due = self._next
        # Behind the clock: skip the frames whose time has passed, within the catch-up budget.
        started = self._clock()
        while self._next < due:
            if self._clock() - started > self.CATCH_UP_BUDGET_S:
                self._pacer.rebase(self._next)
                break
            if not self._grab(cap):
                return None
            self._next += 1
            self.skipped += 1
        self._pacer.wait_for(self._next)
        t0 = self._clock()
        frame = self._read_one(cap)
        self._decode_s = 0.7 * self._decode_s + 0.3 * (self._clock() - t0)
        self._next += 1
        return frame

    def _can_catch_up(self) -> bool:
        """Skipping helps only while a frame decodes faster than the file's frame interval."""
        return self._decode_s < 1.0 / self._fps

    def _grab(self, cap: Capture) -> bool:
        if cap.grab():
            return True
        return self.loop and self._rewind(cap) and cap.grab()

    def _read_one(self, cap: Capture) -> Frame | None:
        ok, frame = cap.read()
        if not ok and self.loop and self._rewind(cap):
            ok, frame = cap.read()
        if not ok or frame is None:  # OpenCV gives a frame whenever ok
            return None
        return decode_jpeg(frame) if self._packets else frame

    def _rewind(self, cap: Capture) -> bool:
        import cv2

        return bool(cap.set(cv2.CAP_PROP_POS_FRAMES, 0))

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None


def _is_mjpg(cap: Capture) -> bool:
    import cv2

    fourcc = int(cap.get(cv2.CAP_PROP_FOURCC)) & 0xFFFFFFFF
    return fourcc.to_bytes(4, "little").upper() == b"MJPG"


def _jpeg_packets(cap: Capture) -> bool:
    """Switch an opened MJPG file's capture to deliver its JPEG packets undecoded; whether it did
    (other codecs, or a backend without raw packets, keep FFmpeg's decoded frames)."""
    import cv2

    return _is_mjpg(cap) and bool(cap.set(cv2.CAP_PROP_FORMAT, -1))


def _undecoded_mjpg(cap: Capture) -> bool:
    """Ask an MJPG webcam on Linux's V4L2 backend for its JPEGs undecoded; whether it agreed.

    With conversion off, OpenCV's V4L2 backend hands over each frame's JPEG as a 1×N byte row
    (its `retrieveFrame`), which `decode_jpeg` decodes to the same pixels with less CPU — and
    without the full-frame copy out of OpenCV's own buffer that `read()` makes of a decoded frame.
    Other backends (MSMF, DirectShow, AVFoundation, GStreamer) decode as they always did."""
    import cv2

    if cap.getBackendName() != "V4L2" or not _is_mjpg(cap):
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


class SyntheticCamera:
    """A moving test pattern at the configured size and rate: no hardware, no files."""

    def __init__(self, width: int, height: int, fps: float, clock: Clock = time.monotonic) -> None:
        self.description = f"synthetic {width}x{height}@{fps:g}"
        self.width, self.height = width, height
        self.frame_size = (width, height)
        self.skipped = 0  # paced, never behind: nothing is skipped at the source
        self._fps = fps
        self._pacer = Pacer(fps, clock)
        self._index = 0
        self._base: Frame | None = None

    @property
    def fps(self) -> float:
        return self._fps

    def open(self) -> None:
        # A fixed gradient background, built once; each frame moves a bright square across it.
        x = np.linspace(0, 255, self.width, dtype=np.float32)
        y = np.linspace(0, 255, self.height, dtype=np.float32)[:, None]
        base = np.empty((self.height, self.width, 3), np.uint8)
        base[..., 0] = x[None, :].astype(np.uint8)
        base[..., 1] = y.astype(np.uint8)
        base[..., 2] = 96
        self._base = base
        self._pacer.restart()
        self._index = 0

    def read(self) -> Frame | None:
        if self._base is None:
            return None
        self._index = max(self._index, self._pacer.due_index())
        self._pacer.wait_for(self._index)
        frame = self._base.copy()
        side = max(8, self.height // 6)
        x = (self._index * 4) % max(1, self.width - side)
        y = (self.height - side) // 2
        frame[y : y + side, x : x + side] = 255
        self._index += 1
        return frame

    def close(self) -> None:
        self._base = None


def open_source(spec: str, cfg: CameraConfig, *, loop: bool | None = None) -> FrameSource:
    """Build (not open) the source named by `spec`: a camera index ("0"), a device path
    ("/dev/video0"), "synthetic", or a video file path."""
    spec = spec.strip()
    if not spec:
        raise VcamdError("empty camera source", fix='set [camera] device or --source to "0", a file, or "synthetic"')
    if spec == "synthetic":
        return SyntheticCamera(cfg.width, cfg.height, cfg.fps)
    if spec.isdigit():
        return OpenCVCamera(int(spec), cfg)
    if spec.startswith("/dev/video"):
        return OpenCVCamera(spec, cfg)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise VcamdError(
            f"camera source {spec!r} is not a camera index, a /dev/video device, 'synthetic' or an existing video file",
            fix="check [camera] device or --source",
        )
    return VideoFileCamera(path, loop=cfg.loop if loop is None else loop)
