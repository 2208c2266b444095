"""`--sink file:PATH.mp4`: the output recorded to an mp4 file."""

from __future__ import annotations

import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any

from vcamd.common.errors import VcamdError
from vcamd.common.types import Frame
from vcamd.config.schema import Config
from vcamd.files.videofile import VideoFile, VideoWriteError
from vcamd.sinks.base import fit_to_size

log = logging.getLogger(__name__)


class FileSink:
    """An .mp4 file (MPEG-4 Part 2, 'mp4v') written at the output fps, 0600, appearing at its path
    when the sink closes — only if it really holds every frame (`vcamd.files.videofile.VideoFile`: until
    then `.NAME.partial-…` beside it, checked by reading it back).

    Encoding costs ≈ 10 ms per 720p frame, so it runs on a writer thread and the publisher only
    pays for one frame copy. Every frame is kept: when the writer falls `QUEUE_FRAMES` behind,
    send() waits for it — back-pressure the watchdog can see beats a recording with holes.

    A recording that cannot be written (its disk filled up) is lost as a whole (an mp4 without its
    index plays nowhere): it is logged at once, the frames after it are dropped (send() never
    blocks), and `failure` holds the one-line error after close(), which `vcamd run` exits with.
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
        self._video: VideoFile | None = None
        self._queue: queue.Queue[Frame | None] = queue.Queue(maxsize=self.QUEUE_FRAMES)
        self._thread: threading.Thread | None = None
        self._state = "new"
        self._lock = threading.Lock()
        self.frames_sent = 0
        """Frames accepted by send()."""
        self.frames_written = 0
        """Frames handed to the encoder; equals frames_sent once close() has returned (unless it failed)."""
        self.failure: VideoWriteError | None = None
        """Why the recording was not kept (its disk filled up, it did not read back whole); None while fine."""

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
            video = VideoFile(self.path, fourcc="mp4v", fps=self._fps, size=(self._width, self._height),
                              what="--sink file:")
            video.open()
            self._video = video
            self._thread = threading.Thread(target=self._write_loop, args=(video,), name="file-sink", daemon=True)
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

    def _write_loop(self, video: VideoFile) -> None:
        while (frame := self._queue.get()) is not None:
            if self.failure is not None:
                continue  # the recording is lost: keep draining, so send() never blocks for good
            try:
                video.write(frame)
            except VideoWriteError as err:
                self.failure = err
                log.error("file sink: %s", err)
                continue
            except Exception as exc:  # noqa: BLE001 — an encoder fault: the recording cannot be trusted
                video.discard()
                self.failure = VideoWriteError(f"--sink file:{self.path}: the encoder failed ({type(exc).__name__}: {exc}); "
                                               "nothing was put under its name")
                log.error("file sink: %s", self.failure)
                continue
            self.frames_written += 1

    def close(self) -> None:
        """Waits until every queued frame is written, then finishes the file: checked, then moved
        into place; a recording that is not whole is removed and said so in `failure` (and the log)."""
        with self._lock:
            was_open = self._state == "open"
            self._state = "closed"
            if not was_open:
                return
            self._queue.put(None)
        if self._thread is not None:
            self._thread.join()
        video, self._video = self._video, None
        if video is None:
            return
        if self.failure is not None:
            video.discard()
            return
        try:
            video.finish()
            video.commit()
        except VideoWriteError as err:
            self.failure = err
            log.error("file sink: %s", err)

    def describe(self) -> str:
        return f"file {self.path} ({self._width}×{self._height} mp4 at {self._fps:g} fps)"
