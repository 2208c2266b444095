"""The page's live video: the engine's latest frame as JPEG, encoded once per frame for all viewers.

One encoder thread looks at `latest_frame()` at most `fps` times a second, and only while a viewer
watches: with the page closed the daemon pays nothing. A frame already encoded (the same array
object) is not encoded again, so a paused or stalled engine costs nothing either. Viewers wait on
one shared slot for a newer JPEG; ten tabs cost one encode per frame, not ten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import cv2

log = logging.getLogger(__name__)

JPEG_QUALITY = 80
MAX_WIDTH = 960
"""Wider frames are scaled down before encoding: a 4K JPEG would cost the daemon several times the
CPU for detail the page's video column cannot show."""


class JpegFeed:
    """`latest_frame` → the newest JPEG, numbered; start() / close() own one encoder thread."""

    def __init__(self, latest_frame: Callable[[], Any], fps: float, *, quality: int = JPEG_QUALITY) -> None:
        self._latest_frame = latest_frame
        self._interval_s = 1.0 / fps
        self._params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
        self._cond = threading.Condition()  # guards every field below
        self._jpeg: bytes | None = None
        self._seq = 0
        self._viewers = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.encoded = 0  # JPEGs encoded so far (tests and the status page read it)

    def start(self) -> "JpegFeed":
        self._thread = threading.Thread(target=self._encode_loop, name="panel-jpeg", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def viewers(self) -> int:
        with self._cond:
            return self._viewers

    @contextmanager
    def viewer(self, limit: int | None = None) -> Iterator[bool]:
        """Counts a viewer while the block runs (frames are only encoded while someone watches) and
        yields True; yields False, counting nothing, when `limit` viewers already watch. Checked and
        counted under one lock: two viewers arriving together cannot both take the last place."""
        with self._cond:
            admitted = limit is None or self._viewers < limit
            if admitted:
                self._viewers += 1
                self._cond.notify_all()
        try:
            yield admitted
        finally:
            if admitted:
                with self._cond:
                    self._viewers -= 1

    def wait_newer(self, seq: int, timeout: float) -> tuple[bytes | None, int]:
        """The newest JPEG once its number exceeds `seq`; (None, seq) on timeout or close."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._seq > seq, timeout)
            if self._closed or self._jpeg is None or self._seq <= seq:
                return None, seq
            return self._jpeg, self._seq

    def latest(self) -> tuple[bytes | None, int]:
        with self._cond:
            return self._jpeg, self._seq

    def _encode_loop(self) -> None:
        last_frame: Any = None
        next_t = time.monotonic()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._viewers > 0)
                if self._closed:
                    return
            now = time.monotonic()
            if now < next_t:
                with self._cond:  # sleep until the next slot, but wake at once on close
                    self._cond.wait_for(lambda: self._closed, next_t - now)
                continue
            next_t = max(next_t + self._interval_s, now - self._interval_s / 2)
            try:
                frame = self._latest_frame()
            except Exception:  # an engine bug must not end the page's video for good
                log.exception("latest_frame() failed")
                continue
            if frame is None or frame is last_frame:
                continue  # nothing published yet, or nothing new since the last JPEG
            last_frame = frame
            height, width = frame.shape[:2]
            if width > MAX_WIDTH:
                frame = cv2.resize(frame, (MAX_WIDTH, max(1, round(height * MAX_WIDTH / width))), interpolation=cv2.INTER_AREA)
            ok, buf = cv2.imencode(".jpg", frame, self._params)
            if not ok:
                continue
            with self._cond:
                self._jpeg = buf.tobytes()
                self._seq += 1
                self.encoded += 1
                self._cond.notify_all()
