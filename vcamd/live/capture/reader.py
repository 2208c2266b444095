"""The camera-reader thread and the newest-frame slot it fills: the first stage of a frame.

A `CameraReader` reads a source as fast as it delivers and puts each frame, stamped with its capture
time, into a `LatestFrame` (newest wins: one frame at most, an untaken one replaced and counted as
dropped). A source that stops delivering is reported offline and reopened every `reopen_interval_s`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum

import numpy as np

from vcamd.common.newest import NewestSlot
from vcamd.common.types import Captured, Frame, as_frame
from vcamd.live.capture.sources import FrameSource

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class SourceState(StrEnum):
    starting = "starting"
    live = "live"
    offline = "offline"
    stopped = "stopped"


# ---------------------------------------------------------------------------------------------
# The newest-frame slot
# ---------------------------------------------------------------------------------------------


class LatestFrame(NewestSlot[Captured]):
    """A one-frame hand-off (`vcamd.common.newest.NewestSlot`): `put` replaces whatever is there,
    `take` waits for a frame newer than the last one taken. A frame that is replaced before anyone
    took it is counted as dropped."""


def as_bgr(frame: object) -> Frame | None:
    """The frame as H×W×3 uint8 BGR (gray and BGRA converted), or None when it is not an image.

    Cameras and drivers deliver odd things now and then (a gray or BGRA frame after a mode switch,
    an empty buffer); the pipeline behind the slot only ever sees BGR.
    """
    import cv2

    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or frame.size == 0:
        return None
    if frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] == 1):
        return as_frame(cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR))
    if frame.ndim != 3 or min(frame.shape[:2]) < 2:
        return None
    if frame.shape[2] == 3:
        return frame
    if frame.shape[2] == 4:
        return as_frame(cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR))
    return None


# ---------------------------------------------------------------------------------------------
# The reader thread
# ---------------------------------------------------------------------------------------------


class CameraReader:
    """Reads a source on its own thread into a `LatestFrame`; reopens it when it is lost."""

    def __init__(
        self,
        source: FrameSource,
        slot: LatestFrame,
        *,
        reopen_interval_s: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self.source = source
        self.slot = slot
        self.reopen_interval_s = reopen_interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = SourceState.starting
        self._seq = 0
        self.captured = 0
        self.reopen_attempts = 0
        self.times_lost = 0
        self.bad_frames = 0
        """Frames the source delivered that are not images (empty, wrong type): skipped."""
        self.cpu_s = 0.0
        """CPU time of the reader thread: reading the camera and decoding its frames (an MJPG
        webcam's JPEG decode, done by OpenCV on this thread) — the per-pixel cost of the camera
        itself, which every app reading it pays (`--stats-json` camera_cpu_ms_per_frame)."""

    # -- lifecycle ----------------------------------------------------------------------------
    def open_first(self) -> None:
        """Open the source on the caller's thread, so a bad source fails `run` with its message."""
        self.source.open()
        self._state = SourceState.live

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="camera-reader", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is None:
            self.source.close()
        else:
            # The thread releases the source as it exits: closing it from here while a read is
            # blocked in the driver (a stalled camera outlasting `timeout`) can crash the backend.
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("camera reader still blocked in a read after %.1f s; it releases the camera when the read returns", timeout)
        self._state = SourceState.stopped

    # -- reporting ----------------------------------------------------------------------------
    @property
    def state(self) -> SourceState:
        return self._state

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._read_until_stopped()
        finally:
            try:
                self.source.close()
            except Exception as exc:  # shutting down: nothing more to do about it
                log.warning("closing the camera failed: %s", exc)

    def _read_until_stopped(self) -> None:
        started_cpu = time.thread_time()
        while not self._stop.is_set():
            self.cpu_s = time.thread_time() - started_cpu
            if self._state is not SourceState.live:
                self._reopen()
                continue
            try:
                frame = self.source.read()
            except Exception as exc:  # a driver error is a lost camera, not a crash
                log.warning("camera read failed: %s", exc)
                frame = None
            if frame is None:
                self._lost()
                continue
            frame = as_bgr(frame)
            if frame is None:
                self.bad_frames += 1  # a driver hiccup: skip it; the stall timeout covers a run of them
                continue
            now = self._clock()
            self.captured += 1
            self._seq += 1
            self.slot.put(Captured(frame=frame, t_capture=now, seq=self._seq))

    def _lost(self) -> None:
        self.times_lost += 1
        self._state = SourceState.offline
        try:
            self.source.close()
        except Exception as exc:  # a driver that fails to release must not end the reader (no reopen then)
            log.warning("closing the lost camera failed: %s", exc)
        log.warning("camera offline: %s stopped delivering; reopening every %.1f s", self.source.description, self.reopen_interval_s)

    def _reopen(self) -> None:
        if self._stop.wait(self.reopen_interval_s):
            return
        self.reopen_attempts += 1
        try:
            self.source.open()
        except Exception as exc:  # keep trying: the camera may be plugged back in later
            log.info("camera still offline (%s)", exc)
            return
        self._state = SourceState.live
        log.info("camera back: %s", self.source.description)
