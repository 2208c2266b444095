"""Where published frames go: the virtual camera, a local preview page, an mp4 file, or nowhere.

Every sink follows one small protocol (`Sink`): build it with `open_sink(spec, …)`, call `open()`
before the first frame (that is where a missing device or a busy port is reported, as a
`VcamdError` naming the fix), `send()` each published frame from the publisher thread, and
`close()` at the end (idempotent).

Rules every sink keeps, because the publisher thread is on the 40 ms budget:
- `send()` never raises for a transient problem (a failed device write, a preview client that
  went away); it counts it and carries on. It raises `RuntimeError` only when called before
  `open()` — a programming error. After `close()`, frames are dropped silently (shutdown races).
- A frame whose size differs from the size the sink was opened with is resized, and only then.
- A sink never keeps a reference to a frame after `send()` returns: the caller may reuse or draw
  on the array. Sinks that need the pixels later copy them, and only when someone will look.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import platform
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

import cv2
import numpy as np

from vcamd.config import Config, PreviewConfig, VirtualCameraConfig
from vcamd.errors import VcamdError
from vcamd.live.newest import NewestSlot
from vcamd.types import Frame

log = logging.getLogger(__name__)

SINK_FORMS = "virtual (the default), preview, file:PATH.mp4, null"


@runtime_checkable
class Sink(Protocol):
    """What the live engine publishes to. See the module docstring for the rules."""

    name: str

    def open(self) -> None:
        """Acquire the device/port/file. Raises VcamdError with the fix when it cannot."""

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None:
        """Publish one BGR frame; `stats` is the engine's latest stats snapshot (kept, not copied)."""

    def close(self) -> None:
        """Release everything. Safe to call twice and from another thread."""

    def describe(self) -> str:
        """One line the user reads: where the frames go and what apps will call it."""

    def counters(self) -> dict[str, int]:
        """Frames sent, failures and the like, for the stats JSON."""


def open_sink(spec: str, cfg: Config, width: int, height: int, fps: float) -> Sink:
    """Build the sink named by `--sink SPEC`; the caller opens it (`.open()`) before the first frame."""
    if width <= 0 or height <= 0 or fps <= 0:
        raise VcamdError(f"sink size {width}×{height} at {fps} fps is not valid", fix="width, height and fps must be positive")
    text = spec.strip()
    if text in ("", "virtual"):
        return VirtualCameraSink(cfg.virtual_camera, width, height, fps)
    if text == "preview":
        return PreviewSink(cfg.preview, width, height, fps)
    if text == "null":
        return NullSink(width, height)
    if text.startswith("file:"):
        path = text[len("file:") :].strip()
        if not path:
            raise VcamdError("--sink file: needs a path", fix="write it as file:PATH.mp4, e.g. --sink file:out.mp4")
        return FileSink(Path(path).expanduser(), width, height, fps)
    raise VcamdError(f"unknown sink {spec!r}", fix=f"use one of: {SINK_FORMS}")


def fit_to_size(frame: Frame, width: int, height: int) -> Frame:
    """`frame` itself when it already has the size, else a resized copy (the only full-frame op here)."""
    h, w = frame.shape[:2]
    if (w, h) == (width, height):
        return frame
    shrinking = w * h > width * height
    return cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)


# ---------------------------------------------------------------------------------------------
# Virtual camera (pyvirtualcam)
# ---------------------------------------------------------------------------------------------

MODPROBE_TEMPLATE = 'sudo modprobe v4l2loopback devices=1 video_nr=10 card_label="{name}" exclusive_caps=1'
"""The command that creates the Linux device; exclusive_caps=1 is what makes Chrome and Zoom list it."""

BACKENDS_BY_SYSTEM = {"Linux": ("v4l2loopback",), "Windows": ("obs", "unitycapture"), "Darwin": ("obs",)}
"""pyvirtualcam's backends per platform.system(); the sink's `system` argument is the one place the platform is chosen."""
_SYSTEM_NAMES = {"Darwin": "macOS"}


def modprobe_command(name: str) -> str:
    return MODPROBE_TEMPLATE.format(name=name)


def list_video_devices(sysfs_root: Path = Path("/sys")) -> list[tuple[str, str]]:
    """(/dev/videoN, card label) for every video device the kernel knows, in device-number order."""
    class_dir = sysfs_root / "class" / "video4linux"
    if not class_dir.is_dir():
        return []
    found: list[tuple[int, str, str]] = []
    for entry in class_dir.iterdir():
        suffix = entry.name.removeprefix("video")
        if not entry.name.startswith("video") or not suffix.isdigit():
            continue
        try:
            label = (entry / "name").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue  # a device that vanished while we looked
        found.append((int(suffix), f"/dev/{entry.name}", label))
    return [(dev, label) for _, dev, label in sorted(found)]


def find_loopback_device(name: str, sysfs_root: Path = Path("/sys")) -> str | None:
    """The /dev/videoN whose card label is exactly `name` (the v4l2loopback card_label), or None."""
    for device, label in list_video_devices(sysfs_root):
        if label == name:
            return device
    return None


SECURE_BOOT_HINT = (
    "if modprobe answers 'Key was rejected by service', Secure Boot refuses the unsigned module: enrol the DKMS "
    "signing key (`sudo mokutil --import /var/lib/dkms/mok.pub`, reboot, confirm in the blue MOK screen)"
)
RESTART_APPS_HINT = "restart Zoom, Teams or the browser afterwards: apps list cameras only when they start"


def missing_device_error(name: str, sysfs_root: Path = Path("/sys")) -> VcamdError:
    """The error for "no v4l2loopback device labelled `name`", with the exact command that fixes it."""
    present = list_video_devices(sysfs_root)
    seen = ", ".join(f"{dev} '{label}'" for dev, label in present) if present else "none"
    module_loaded = (sysfs_root / "module" / "v4l2loopback").is_dir()
    reload_hint = (
        "v4l2loopback is already loaded without it, so first run `sudo modprobe -r v4l2loopback`, then "
        if module_loaded
        else ""
    )
    return VcamdError(
        f"no v4l2loopback device labelled '{name}' found (video devices present: {seen})",
        fix=(
            f"{reload_hint}create it with: {modprobe_command(name)} "
            "(Debian/Ubuntu: `sudo apt install v4l2loopback-dkms` if modprobe cannot find the module; "
            f"{SECURE_BOOT_HINT}); "
            "run `vcamd service install` to make it permanent across reboots; "
            f"or set [virtual_camera] device to an existing loopback device; {RESTART_APPS_HINT}"
        ),
    )


def virtual_camera_setup_fix(system: str, name: str) -> str:
    """How to get a virtual camera pyvirtualcam can open on `system` (platform.system() spelling).

    Windows and macOS have no loopback device of their own: pyvirtualcam writes to OBS Studio's
    virtual camera (both) or to Unity Capture (Windows), which must be installed and registered once.
    """
    if system == "Windows":
        return (
            "install OBS Studio 26 or newer (obsproject.com), start it once, click Start Virtual Camera, then Stop "
            "Virtual Camera and close OBS, so its camera driver is registered; or install Unity Capture "
            "(github.com/schellingb/UnityCapture, Install.bat as administrator) and set [virtual_camera] backend = "
            "\"unitycapture\"; OBS has one virtual camera, so OBS itself must not be running it at the same time; "
            f"{RESTART_APPS_HINT}; apps list it as 'OBS Virtual Camera' (Unity Capture: 'Unity Video Capture')"
        )
    if system == "Darwin":
        return (
            "install OBS Studio 30 or newer (obsproject.com), start it, click Start Virtual Camera and allow its camera "
            "extension when macOS asks (System Settings → Privacy & Security → Allow), then Stop Virtual Camera and quit "
            f"OBS; OBS itself must not be running its virtual camera at the same time; {RESTART_APPS_HINT}; "
            "apps list it as 'OBS Virtual Camera'"
        )
    if system == "Linux":
        return f"create the v4l2loopback device: {modprobe_command(name)} (see `vcamd doctor`)"
    return f"no virtual camera backend is known for {system}: use --sink preview or --sink file:PATH.mp4"


def platform_backends_text(system: str, name: str) -> str:
    """What the user can install on this platform and what apps will list the camera as."""
    if system == "Windows":
        return (
            "Windows backends: OBS Virtual Camera (install OBS Studio 26+ and start its Virtual Camera once; "
            "apps list it as 'OBS Virtual Camera') or Unity Capture (apps list it as 'Unity Video Capture', or as "
            f"'{name}' if you register it under that name and set [virtual_camera] backend = \"unitycapture\" "
            f"and device = \"{name}\")"
        )
    if system == "Darwin":
        return (
            "macOS backend: OBS Virtual Camera (install OBS Studio 30+ and start its Virtual Camera once so macOS "
            f"approves the camera extension); apps list it as 'OBS Virtual Camera' — macOS does not let us call it '{name}'"
        )
    if system == "Linux":
        return f"Linux backend: v4l2loopback; apps list the device by its card_label '{name}'"
    return f"no virtual camera backend is known for {system}; use --sink preview or --sink file:PATH.mp4"


class CameraLike(Protocol):
    """The part of `pyvirtualcam.Camera` the sink uses (so tests can inject a failing camera)."""

    @property
    def device(self) -> str: ...

    @property
    def backend(self) -> str: ...

    def send(self, frame: Frame) -> None: ...

    def close(self) -> None: ...


CameraFactory = Callable[[int, int, float, str | None, str | None], CameraLike]
"""(width, height, fps, device or None, backend or None) -> an open camera; raises when it cannot."""


def pyvirtualcam_camera(width: int, height: int, fps: float, device: str | None, backend: str | None) -> CameraLike:
    try:
        import pyvirtualcam
    except ImportError as exc:
        raise VcamdError(f"pyvirtualcam cannot be imported ({exc})", fix="reinstall vcamd: pip install pyvirtualcam") from None
    # BGR in: the backend converts straight to its native format, saving an RGB copy per frame.
    return pyvirtualcam.Camera(width, height, fps, fmt=pyvirtualcam.PixelFormat.BGR, device=device, backend=backend)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard a failed write is retried. Only the first failing frame of a streak waits."""

    attempts: int = 3
    """Tries per frame before it is dropped."""
    first_backoff_s: float = 0.002
    """Wait before the 2nd try, doubled before each later one (2 + 4 ms: well inside a frame)."""
    reopen_after: int = 15
    """Consecutive dropped frames (≈ 0.5 s at 30 fps) after which the device is closed and reopened."""
    reopen_backoff_s: float = 0.5
    """Wait between reopen attempts, doubled after each failure up to `reopen_backoff_max_s`."""
    reopen_backoff_max_s: float = 8.0


class VirtualCameraSink:
    """The virtual camera apps see as "FaceLive Camera" (pyvirtualcam), opened once and kept open."""

    name = "virtual"

    def __init__(
        self,
        cfg: VirtualCameraConfig,
        width: int,
        height: int,
        fps: float,
        *,
        camera_factory: CameraFactory = pyvirtualcam_camera,
        system: str | None = None,
        sysfs_root: Path = Path("/sys"),
        retry: RetryPolicy = RetryPolicy(),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._cfg = cfg
        self._width, self._height, self._fps = width, height, fps
        self._factory = camera_factory
        self._system = system or platform.system()
        self._sysfs = sysfs_root
        self._retry = retry
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._camera: CameraLike | None = None
        self._device: str | None = None  # resolved device argument passed to the backend
        self._state = "new"  # new → open → closed
        self._streak = 0  # consecutive frames dropped because writes failed
        self._reopen_at: float | None = None  # when the device is down: next reopen attempt (clock time)
        self._reopen_backoff_s = retry.reopen_backoff_s
        self.frames_sent = 0
        self.write_failures = 0
        """Every failed `camera.send` call, retries included."""
        self.frames_dropped = 0
        """Frames not delivered because all tries failed or the device was down."""
        self.reopens = 0
        """Successful re-opens of the device after a failure streak."""
        self.last_error = ""

    # -- opening ------------------------------------------------------------------------------

    def resolve_device(self) -> str | None:
        """The device argument for the backend: a /dev/videoN on Linux, None = backend default elsewhere."""
        cfg = self._cfg
        backend = cfg.backend or None
        known = BACKENDS_BY_SYSTEM.get(self._system, ())
        if backend is not None and backend not in known:
            choices = ", ".join(known) if known else "none"
            raise VcamdError(
                f"[virtual_camera] backend = {backend!r} is not available on {self._system}",
                fix=f"use one of: {choices}, or leave it empty for the platform default",
            )
        if self._system != "Linux":
            return cfg.device or None
        if cfg.device:
            device = cfg.device
            if not Path(device).exists():
                raise VcamdError(
                    f"[virtual_camera] device {device} does not exist",
                    fix=f"create it with: {modprobe_command(cfg.name)} (and `vcamd service install` to make it permanent), "
                    "or clear [virtual_camera] device to find the device labelled by [virtual_camera] name",
                )
            return device
        device = find_loopback_device(cfg.name, self._sysfs)
        if device is None:
            raise missing_device_error(cfg.name, self._sysfs)
        return device

    def open(self) -> None:
        with self._lock:
            if self._state == "open":
                return
            if self._state == "closed":
                raise RuntimeError("VirtualCameraSink cannot be reopened after close(); build a new one")
            self._device = self.resolve_device()
            self._camera = self._open_camera()
            self._state = "open"
        log.info("virtual camera open: %s", self.describe())

    def _open_camera(self) -> CameraLike:
        backend = self._cfg.backend or None
        try:
            return self._factory(self._width, self._height, self._fps, self._device, backend)
        except VcamdError:
            raise
        except Exception as exc:  # the backends raise RuntimeError/ValueError with a readable text
            detail = " ".join(str(exc).split()) or type(exc).__name__
            if self._system == "Linux":
                raise VcamdError(
                    f"cannot open virtual camera {self._device} at {self._width}×{self._height}: {detail}",
                    fix=f"check that you may write to it (`ls -l {self._device}`; join the `video` group), that no other "
                    "program is writing to it, and that it is a v4l2loopback device",
                ) from None
            raise VcamdError(
                f"no virtual camera could be opened on {_SYSTEM_NAMES.get(self._system, self._system)}: {detail}",
                fix=virtual_camera_setup_fix(self._system, self._cfg.name),
            ) from None

    # -- publishing ---------------------------------------------------------------------------

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None:
        with self._lock:
            if self._state == "new":
                raise RuntimeError("VirtualCameraSink.send() before open()")
            if self._state == "closed":
                return
            if self._camera is None and not self._try_reopen():
                self.frames_dropped += 1
                return
            self._write(fit_to_size(frame, self._width, self._height))

    def _write(self, frame: Frame) -> None:
        assert self._camera is not None
        # In a failure streak, one try per frame and no waiting: the pipeline must not slow down.
        attempts = self._retry.attempts if self._streak == 0 else 1
        for attempt in range(attempts):
            try:
                self._camera.send(frame)
            except Exception as exc:  # any backend error is a failed write; the pipeline goes on
                self.write_failures += 1
                self.last_error = " ".join(str(exc).split()) or type(exc).__name__
                if attempt + 1 < attempts:
                    self._sleep(self._retry.first_backoff_s * (2**attempt))
                continue
            if self._streak:
                log.info("virtual camera writes recovered after %d dropped frames", self._streak)
            self._streak = 0
            self.frames_sent += 1
            return
        self.frames_dropped += 1
        self._streak += 1
        if self._streak == 1:
            log.warning("virtual camera write failed (%s); retrying", self.last_error)
        if self._streak >= self._retry.reopen_after:
            log.warning("virtual camera: %d frames failed in a row; reopening %s", self._streak, self._device)
            self._close_camera()
            self._reopen_at = self._clock()  # the next frame tries at once; later tries back off

    def _try_reopen(self) -> bool:
        """Called while the device is down. True when it is open again."""
        now = self._clock()
        if self._reopen_at is not None and now < self._reopen_at:
            return False
        try:
            # Look the device up again: a reloaded v4l2loopback module may have renumbered it.
            self._device = self.resolve_device()
            self._camera = self._open_camera()
        except VcamdError as exc:
            self.last_error = exc.message
            self._reopen_at = now + self._reopen_backoff_s
            log.warning("virtual camera reopen failed (%s); next try in %.1f s", exc.message, self._reopen_backoff_s)
            self._reopen_backoff_s = min(self._reopen_backoff_s * 2, self._retry.reopen_backoff_max_s)
            return False
        self.reopens += 1
        self._streak = 0
        self._reopen_at = None
        self._reopen_backoff_s = self._retry.reopen_backoff_s
        log.info("virtual camera reopened: %s", self.describe())
        return True

    # -- closing / reporting ------------------------------------------------------------------

    def _close_camera(self) -> None:
        camera, self._camera = self._camera, None
        if camera is not None:
            try:
                camera.close()
            except Exception as exc:  # a device that already failed may fail to close too
                log.debug("virtual camera close failed: %s", exc)

    def close(self) -> None:
        with self._lock:
            self._state = "closed"
            self._close_camera()

    @property
    def is_down(self) -> bool:
        """True while the device is closed after a failure streak, waiting to be reopened."""
        return self._state == "open" and self._camera is None

    def describe(self) -> str:
        name = self._cfg.name
        if self._system == "Linux":
            device = self._device or self._cfg.device or "(device not chosen yet)"
            label = dict(list_video_devices(self._sysfs)).get(device, name)
            return f"v4l2loopback {device} '{label}'"
        backend = self._camera.backend if self._camera is not None else (self._cfg.backend or None)
        if backend == "obs":
            return "OBS Virtual Camera (apps list it as 'OBS Virtual Camera')"
        if backend == "unitycapture":
            listed = self._camera.device if self._camera is not None else (self._cfg.device or "Unity Video Capture")
            return f"Unity Capture (apps list it as '{listed}')"
        return platform_backends_text(self._system, name)

    def counters(self) -> dict[str, int]:
        return {
            "frames_sent": self.frames_sent,
            "write_failures": self.write_failures,
            "frames_dropped": self.frames_dropped,
            "reopens": self.reopens,
        }


# ---------------------------------------------------------------------------------------------
# File and null sinks
# ---------------------------------------------------------------------------------------------


class FileSink:
    """An .mp4 file (MPEG-4 Part 2, 'mp4v') written at the output fps.

    Encoding costs ≈ 10 ms per 720p frame, so it runs on a writer thread and the publisher only
    pays for one frame copy. Every frame is kept: when the writer falls `QUEUE_FRAMES` behind,
    send() waits for it — back-pressure the watchdog can see beats a recording with holes.
    """

    name = "file"
    SUFFIXES = (".mp4", ".m4v", ".mov")
    QUEUE_FRAMES = 8

    def __init__(self, path: Path, width: int, height: int, fps: float) -> None:
        self.path = Path(path)
        self._width, self._height, self._fps = width, height, fps
        self._writer: cv2.VideoWriter | None = None
        self._queue: queue.Queue[Frame | None] = queue.Queue(maxsize=self.QUEUE_FRAMES)
        self._thread: threading.Thread | None = None
        self._state = "new"
        self._lock = threading.Lock()
        self.frames_sent = 0
        """Frames accepted by send()."""
        self.frames_written = 0
        """Frames handed to the encoder; equals frames_sent once close() has returned."""
        self.write_failures = 0

    def _check_path(self) -> None:
        path = self.path
        where = f"--sink file:{path}"
        if path.suffix.lower() not in self.SUFFIXES:
            raise VcamdError(f"{where}: the file sink writes MP4 video", fix="name the file with an .mp4 extension")
        if path.is_dir():
            raise VcamdError(f"{where} is a folder", fix="give a file name inside it, e.g. file:" + str(path / "out.mp4"))
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.exists():
            raise VcamdError(f"{where}: folder {parent} does not exist", fix=f"create it (mkdir -p {parent}) or choose another path")
        if not parent.is_dir():
            raise VcamdError(f"{where}: {parent} is not a folder", fix="choose a path inside an existing folder")
        if not os.access(parent, os.W_OK):
            raise VcamdError(f"{where}: folder {parent} is not writable", fix="choose a folder you may write to")

    def open(self) -> None:
        with self._lock:
            if self._state == "open":
                return
            if self._state == "closed":
                raise RuntimeError("FileSink cannot be reopened after close(); build a new one")
            self._check_path()
            writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self._fps, (self._width, self._height))
            if not writer.isOpened():
                writer.release()
                raise VcamdError(
                    f"--sink file:{self.path}: cannot create the video file",
                    fix="check that the path is writable and the disk has space",
                )
            self._writer = writer
            self._thread = threading.Thread(target=self._write_loop, args=(writer,), name="file-sink", daemon=True)
            self._thread.start()
            self._state = "open"

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None:
        with self._lock:
            if self._state == "new":
                raise RuntimeError("FileSink.send() before open()")
            if self._state == "closed":
                return
            # VideoWriter silently drops frames of the wrong size, so fit them first; the writer
            # thread needs its own pixels, so a frame that already fits is copied.
            fitted = fit_to_size(frame, self._width, self._height)
            self._queue.put(fitted if fitted is not frame else frame.copy())
            self.frames_sent += 1

    def _write_loop(self, writer: cv2.VideoWriter) -> None:
        while (frame := self._queue.get()) is not None:
            try:
                writer.write(frame)
            except Exception as exc:  # e.g. the disk filled up: keep draining (send() must never block for good)
                self.write_failures += 1
                if self.write_failures == 1 or self.write_failures % 100 == 0:
                    log.warning("file sink %s: write failed (%d so far): %s", self.path, self.write_failures, exc)
                continue
            self.frames_written += 1

    def close(self) -> None:
        """Waits until every queued frame is written, then finishes the file."""
        with self._lock:
            was_open = self._state == "open"
            self._state = "closed"
            if not was_open:
                return
            self._queue.put(None)
        if self._thread is not None:
            self._thread.join()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.release()

    def describe(self) -> str:
        return f"file {self.path} ({self._width}×{self._height} mp4 at {self._fps:g} fps)"

    def counters(self) -> dict[str, int]:
        return {"frames_sent": self.frames_sent, "frames_written": self.frames_written, "write_failures": self.write_failures}


class NullSink:
    """Counts frames and discards them (benchmarks, tests)."""

    name = "null"

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

    def counters(self) -> dict[str, int]:
        return {"frames_sent": self.frames_sent}


# ---------------------------------------------------------------------------------------------
# Preview page (HTTP on 127.0.0.1)
# ---------------------------------------------------------------------------------------------

PREVIEW_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>FaceLive Camera — preview</title>
<style>
  :root { color-scheme: dark; }
  body { margin: 0; background: #15181c; color: #d8dde3; font: 14px/1.4 system-ui, sans-serif; }
  main { display: flex; flex-wrap: wrap; gap: 16px; padding: 16px; align-items: flex-start; }
  #video { max-width: min(100%, 960px); background: #000; border-radius: 6px; display: block; }
  #panel { flex: 0 1 340px; min-width: 220px; }
  h1 { font-size: 16px; margin: 0 0 8px; }
  dl { display: grid; grid-template-columns: auto auto; gap: 4px 14px; margin: 0; }
  dt { color: #8b95a1; }
  dd { margin: 0; font-variant-numeric: tabular-nums; overflow-wrap: anywhere; }
  #conn.bad { color: #e0a060; }
</style>
</head>
<body>
<main>
  <img id="video" src="/stream.mjpg" alt="live output of FaceLive Camera">
  <section id="panel">
    <h1>FaceLive Camera</h1>
    <dl>
      <dt>connection</dt><dd id="conn">connecting…</dd>
      <dt>state</dt><dd id="state">–</dd>
      <dt>camera</dt><dd id="camera">–</dd>
      <dt>fps (published)</dt><dd id="fps">–</dd>
      <dt>fps (source)</dt><dd id="fps-source">–</dd>
      <dt>latency p50</dt><dd id="latency-p50">–</dd>
      <dt>latency p95</dt><dd id="latency-p95">–</dd>
      <dt>level</dt><dd id="level">–</dd>
      <dt>swapped</dt><dd id="swapped">–</dd>
      <dt>held</dt><dd id="held">–</dd>
      <dt>queue depth</dt><dd id="queue">–</dd>
      <dt>providers</dt><dd id="providers">–</dd>
    </dl>
  </section>
</main>
<script>
"use strict";
const dig = (obj, path) => path.split(".").reduce((v, k) => (v == null ? undefined : v[k]), obj);
const first = (obj, ...paths) => paths.map((p) => dig(obj, p)).find((v) => v != null);
function text(v, digits, unit) {
  if (v == null) return "–";
  if (typeof v === "number") return (digits == null ? String(v) : v.toFixed(digits)) + (unit || "");
  return String(v);
}
function providers(v) {
  if (v == null) return "–";
  if (Array.isArray(v)) return v.join(", ") || "–";
  if (typeof v === "object") return Object.entries(v).map(([k, p]) => k + ": " + p).join(", ") || "–";
  return String(v);
}
function show(id, value) { document.getElementById(id).textContent = value; }
async function poll() {
  const conn = document.getElementById("conn");
  try {
    const r = await fetch("/stats.json", { cache: "no-store" });
    const s = await r.json();
    show("state", text(first(s, "state")));
    show("camera", text(first(s, "camera")));
    // Both shapes are accepted: the engine's status() ("fps": 29.8) and the stats JSON ("fps": {"published": …}).
    show("fps", text(typeof s.fps === "number" ? s.fps : first(s, "fps.published"), 1));
    show("fps-source", text(first(s, "fps.source"), 1));
    show("latency-p50", text(first(s, "latency_ms.p50"), 1, " ms"));
    show("latency-p95", text(first(s, "latency_ms.p95"), 1, " ms"));
    show("level", text(first(s, "level", "degradation.level")));
    show("swapped", text(first(s, "frames.swapped")));
    show("held", text(first(s, "frames.held")));
    show("queue", text(typeof s.queue_depth === "number" ? s.queue_depth : first(s, "queue_depth.current", "queue_depth.max")));
    show("providers", providers(first(s, "providers")));
    conn.textContent = "live"; conn.className = "";
  } catch (e) {
    conn.textContent = "daemon not reachable"; conn.className = "bad";
  }
}
// If the daemon restarts, the stream ends: reconnect instead of leaving a broken image.
document.getElementById("video").addEventListener("error", (ev) => {
  setTimeout(() => { ev.target.src = "/stream.mjpg?t=" + Date.now(); }, 1000);
});
poll();
setInterval(poll, 500);
</script>
</body>
</html>
"""

MJPEG_BOUNDARY = "facelive-frame"


class _PreviewServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client must never keep the daemon from exiting
    sink: "PreviewSink"


class _PreviewHandler(BaseHTTPRequestHandler):
    server: _PreviewServer
    protocol_version = "HTTP/1.0"
    timeout = 10.0  # socket timeout: a viewer that stops reading is dropped instead of pinning a thread

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class names it so)
        log.debug("preview %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        sink = self.server.sink
        if not sink.host_allowed(self.headers.get("Host", "")):
            # Another site's page resolving its name to 127.0.0.1 (DNS rebinding) must not see the camera.
            self._reply(HTTPStatus.FORBIDDEN, "text/plain; charset=utf-8", b"forbidden host\n")
            return
        route = self.path.split("?", 1)[0]
        if route == "/":
            self._reply(HTTPStatus.OK, "text/html; charset=utf-8", PREVIEW_PAGE.encode("utf-8"))
        elif route == "/stats.json":
            self._reply(HTTPStatus.OK, "application/json", sink.stats_json())
        elif route == "/snapshot.jpg":
            jpeg = sink.snapshot_jpeg()
            if jpeg is None:
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", b"no frame published yet\n")
            else:
                self._reply(HTTPStatus.OK, "image/jpeg", jpeg)
        elif route == "/stream.mjpg":
            self._stream(sink)
        else:
            self._reply(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

    def _reply(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, sink: "PreviewSink") -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            with sink.viewer():
                seq = -1  # a new viewer gets the latest frame at once, then every newer one
                while not sink.closed:
                    jpeg, seq = sink.wait_jpeg(after=seq, timeout=1.0)
                    if jpeg is None:
                        continue
                    head = f"--{MJPEG_BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n"
                    self.wfile.write(head.encode("ascii") + jpeg + b"\r\n")
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            pass  # the viewer closed the tab, or stopped reading for `timeout` seconds


class PreviewSink:
    """A local page at http://127.0.0.1:PORT/ with the live output (MJPEG) and the live stats.

    JPEGs are encoded on a separate thread, at most at the output fps and only while a viewer
    is connected (or a snapshot is asked for): with nobody watching, `send()` costs nothing.
    """

    name = "preview"
    HOST = "127.0.0.1"

    def __init__(
        self,
        cfg: PreviewConfig,
        width: int,
        height: int,
        fps: float,
        *,
        jpeg_quality: int | None = None,
        snapshot_wait_s: float = 2.0,
    ) -> None:
        self._port_wanted = cfg.port
        self._snapshot_wait_s = snapshot_wait_s
        self._width, self._height = width, height
        self._min_interval_s = 1.0 / fps
        self._quality = jpeg_quality if jpeg_quality is not None else cfg.jpeg_quality
        self._server: _PreviewServer | None = None
        self._threads: list[threading.Thread] = []
        self._jpegs: NewestSlot[bytes] = NewestSlot()  # viewers wait here for a newer JPEG
        self._work = threading.Condition()  # guards the fields below
        self._pending: Frame | None = None  # a frame waiting for the encoder (a private copy)
        self._clients = 0
        self._snapshot_waiters = 0
        self._next_encode_t = 0.0  # time.monotonic() from which the next JPEG may be encoded
        self._stats: dict[str, Any] | None = None
        self._state = "new"
        self.frames_sent = 0
        self.jpegs_encoded = 0
        self.port = 0

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def url(self) -> str:
        """The page's address once open, e.g. http://127.0.0.1:8765/."""
        if self._state != "open":
            raise RuntimeError("PreviewSink.url before open()")
        return f"http://{self.HOST}:{self.port}/"

    def open(self) -> None:
        if self._state == "open":
            return
        if self._state == "closed":
            raise RuntimeError("PreviewSink cannot be reopened after close(); build a new one")
        try:
            server = _PreviewServer((self.HOST, self._port_wanted), _PreviewHandler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise VcamdError(
                    f"preview port {self._port_wanted} on {self.HOST} is already in use",
                    fix="set [preview] port to a free port, or to 0 to pick any free port",
                ) from None
            raise VcamdError(
                f"cannot listen on {self.HOST}:{self._port_wanted} for the preview ({exc.strerror or exc})",
                fix="set [preview] port to a port above 1024, or to 0 to pick any free port",
            ) from None
        server.sink = self
        self._server = server
        self.port = server.server_address[1]
        self._state = "open"
        self._threads = [
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="preview-http", daemon=True),
            threading.Thread(target=self._encode_loop, name="preview-jpeg", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        log.info("preview page: %s", self.url)

    def host_allowed(self, host: str) -> bool:
        return host in (f"{self.HOST}:{self.port}", f"localhost:{self.port}")

    # -- publisher side -----------------------------------------------------------------------

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None:
        if self._state == "new":
            raise RuntimeError("PreviewSink.send() before open()")
        if self._state == "closed":
            return
        self.frames_sent += 1
        with self._work:
            if stats is not None:
                self._stats = stats
            now = time.monotonic()
            wanted = self._snapshot_waiters > 0 or (self._clients > 0 and now >= self._next_encode_t)
            if not wanted or self._pending is not None:
                return  # nobody watching, too soon, or the encoder is still busy: skip this frame
            fitted = fit_to_size(frame, self._width, self._height)
            self._pending = fitted if fitted is not frame else frame.copy()
            # A grid of slots one frame interval apart, not "interval since the last encode": frames
            # arriving at exactly the output fps with a little jitter must all be encoded, yet the
            # slot advances by a full interval per JPEG, so the long-run rate never exceeds the fps.
            self._next_encode_t = max(self._next_encode_t + self._min_interval_s, now - self._min_interval_s / 2)
            self._work.notify_all()

    def _encode_loop(self) -> None:
        params = [cv2.IMWRITE_JPEG_QUALITY, int(self._quality)]
        while True:
            with self._work:
                self._work.wait_for(lambda: self._pending is not None or self.closed)
                if self.closed:
                    return
                frame, self._pending = self._pending, None
            ok, buf = cv2.imencode(".jpg", frame, params)
            if ok:
                self.jpegs_encoded += 1
                self._jpegs.put(buf.tobytes())

    # -- server side --------------------------------------------------------------------------

    @contextmanager
    def viewer(self) -> Iterator[None]:
        """Counts a stream viewer while the block runs: JPEGs are only encoded while one watches."""
        with self._work:
            self._clients += 1
        try:
            yield
        finally:
            with self._work:
                self._clients -= 1

    def wait_jpeg(self, after: int, timeout: float) -> tuple[bytes | None, int]:
        """The newest JPEG numbered above `after` and its number; (None, after) on timeout or close."""
        return self._jpegs.wait_newer(after, timeout)

    @property
    def clients(self) -> int:
        with self._work:
            return self._clients

    def stats_json(self) -> bytes:
        with self._work:
            stats = self._stats
        return json.dumps(_plain(stats or {})).encode("utf-8")

    def snapshot_jpeg(self) -> bytes | None:
        """A JPEG of the next published frame (or the last one if none comes within snapshot_wait_s)."""
        _, seq = self._jpegs.latest()
        with self._work:
            self._snapshot_waiters += 1
        try:
            jpeg, _ = self._jpegs.wait_newer(seq, timeout=self._snapshot_wait_s)
        finally:
            with self._work:
                self._snapshot_waiters -= 1
        return jpeg if jpeg is not None else self._jpegs.latest()[0]

    def close(self) -> None:
        with self._work:
            if self._state == "closed":
                return
            was_open = self._state == "open"
            self._state = "closed"
            self._work.notify_all()
        self._jpegs.close()
        if was_open and self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=2.0)

    def describe(self) -> str:
        where = self.url if self._state == "open" else f"http://{self.HOST}:{self._port_wanted or '(any free port)'}/"
        return f"preview page {where}"

    def counters(self) -> dict[str, int]:
        return {"frames_sent": self.frames_sent, "jpegs_encoded": self.jpegs_encoded, "clients": self.clients}


def _plain(value: Any) -> Any:
    """Stats may hold numpy numbers, enums (Level) or paths: turn them into plain JSON values.

    Enums go first because an IntEnum would otherwise be written as its bare number.
    """
    if isinstance(value, Enum):
        return value.name if isinstance(value.value, int) else value.value
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (Path, os.PathLike)):
        return os.fspath(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
