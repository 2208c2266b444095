"""`--sink file:PATH.mp4`: the output recorded to an mp4 file."""

from __future__ import annotations

import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any

import cv2

from vcamd.config import Config
from vcamd.errors import VcamdError
from vcamd.private_files import private_temporary
from vcamd.sinks.base import fit_to_size
from vcamd.types import Frame

log = logging.getLogger(__name__)


class FileSink:
    """An .mp4 file (MPEG-4 Part 2, 'mp4v') written at the output fps, 0600, appearing at its path
    when the sink closes (until then `.NAME.partial-…` beside it).

    Encoding costs ≈ 10 ms per 720p frame, so it runs on a writer thread and the publisher only
    pays for one frame copy. Every frame is kept: when the writer falls `QUEUE_FRAMES` behind,
    send() waits for it — back-pressure the watchdog can see beats a recording with holes.
    """

    url = None  # no page to watch it on
    SUFFIXES = (".mp4", ".m4v", ".mov")
    QUEUE_FRAMES = 8

    @classmethod
    def from_spec(cls, argument: str, cfg: Config, width: int, height: int, fps: float) -> FileSink:
        """`file:PATH` → the file sink writing PATH (~ expanded)."""
        path = argument.strip()
        if not path:
            raise VcamdError("--sink file: needs a path", fix="write it as file:PATH.mp4, e.g. --sink file:out.mp4")
        return cls(Path(path).expanduser(), width, height, fps)

    def __init__(self, path: Path, width: int, height: int, fps: float) -> None:
        self.path = Path(path)
        self._width, self._height, self._fps = width, height, fps
        self._writer: cv2.VideoWriter | None = None
        self._partial: Path | None = None  # what the writer fills; renamed over `path` by close()
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
            # OpenCV opens files by name: it writes a fresh 0600 temporary that close() renames over
            # PATH, so a symlink planted at PATH is replaced, never written through, whatever the umask.
            try:
                partial = private_temporary(self.path)
            except OSError as exc:
                raise VcamdError(f"--sink file:{self.path}: cannot create the video file: {exc.strerror}",
                                 fix="check that the folder is writable and the disk has space") from None
            writer = cv2.VideoWriter(str(partial), cv2.VideoWriter_fourcc(*"mp4v"), self._fps, (self._width, self._height))
            if not writer.isOpened():
                writer.release()
                partial.unlink(missing_ok=True)
                raise VcamdError(
                    f"--sink file:{self.path}: cannot create the video file",
                    fix="check that the path is writable and the disk has space",
                )
            self._writer, self._partial = writer, partial
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
        partial, self._partial = self._partial, None
        if partial is not None:
            try:
                os.replace(partial, self.path)
            except OSError as exc:
                log.error("file sink: cannot move the recording into place at %s (%s); it is kept as %s", self.path, exc.strerror, partial)

    def describe(self) -> str:
        return f"file {self.path} ({self._width}×{self._height} mp4 at {self._fps:g} fps)"
