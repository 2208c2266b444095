"""`--sink virtual` (the default): the virtual camera call apps list as "FaceLive Camera" (pyvirtualcam).

What the device is and how it is made (v4l2loopback, OBS, Unity Capture) is `vcamd.system.v4l2loopback`'s
knowledge; this module opens it, writes frames, retries and reopens.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from vcamd.common.errors import VcamdError
from vcamd.common.types import Frame
from vcamd.config.schema import Config, VirtualCameraConfig
from vcamd.sinks.base import fit_to_size
from vcamd.system.v4l2loopback import (
    SYSFS,
    backends_text,
    find_loopback_device,
    list_video_devices,
    missing_configured_device_error,
    missing_device_error,
    setup_fix,
)

log = logging.getLogger(__name__)

BACKENDS_BY_SYSTEM = {"Linux": ("v4l2loopback",), "Windows": ("obs", "unitycapture"), "Darwin": ("obs",)}
"""pyvirtualcam's backends per platform.system(); the sink's `system` argument is the one place the platform is chosen."""
_SYSTEM_NAMES = {"Darwin": "macOS"}


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
    camera: CameraLike = pyvirtualcam.Camera(width, height, fps, fmt=pyvirtualcam.PixelFormat.BGR, device=device, backend=backend)
    return camera


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

    url = None  # no page to watch it on

    @classmethod
    def from_spec(cls, argument: str, cfg: Config, width: int, height: int, fps: float) -> VirtualCameraSink:
        return cls(cfg.virtual_camera, width, height, fps)

    def __init__(
        self,
        cfg: VirtualCameraConfig,
        width: int,
        height: int,
        fps: float,
        *,
        camera_factory: CameraFactory = pyvirtualcam_camera,
        system: str | None = None,
        sysfs_root: Path = SYSFS,
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
                raise missing_configured_device_error(device, cfg.name)
            return device
        found = find_loopback_device(cfg.name, self._sysfs)
        if found is None:
            raise missing_device_error(cfg.name, self._sysfs)
        return found

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
                fix=setup_fix(self._system, self._cfg.name),
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
        return backends_text(self._system, name)
