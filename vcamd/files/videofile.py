"""A video file written with OpenCV, and proven whole before it gets its name.

OpenCV's `VideoWriter` reports nothing when writing fails: on a full disk it prints "Failed to
write frame" warnings and leaves a file without its index, which no player opens — and `vcamd run
--sink file:` and `vcamd swap` both said they had succeeded. So here (`VideoFile`):

- the frames go to a fresh 0600 temporary beside the final path (`private_files.private_temporary`);
- while writing, the free space of its disk is looked at after every frame (one `statvfs`, ~1 µs):
  with less than a block left, the encoder's next write fails (FFmpeg writes 32 KiB at a time, then
  stops writing for good), so the write stops at once with `VideoWriteError` instead of hours of
  warnings;
- at the end the file is synced and read back (`check_video`: PyAV counts its video packets, which
  must equal the frames written) before anything is renamed over the final path;
- every failure is one `VideoWriteError` naming the file, its folder and the disk (its mount point),
  and the temporary is removed: nothing incomplete ever carries the final name.
"""

from __future__ import annotations

import os
from pathlib import Path

import cv2

from vcamd.common.errors import VcamdError
from vcamd.common.stopping import held_off
from vcamd.common.types import Frame
from vcamd.files.diskspace import disk_is_full, full_disk_message
from vcamd.files.private_files import private_temporary


class VideoWriteError(VcamdError):
    """A video could not be written whole; nothing was put under its name."""


def disk_full_error(what: str, path: Path) -> VideoWriteError:
    message, fix = full_disk_message(_named(what, path), path, "the video")
    return VideoWriteError(message, fix=fix)


def check_video(path: Path, frames: int) -> str | None:
    """None when `path` opens as a video whose stream holds `frames` frames; else what is wrong."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                return "it holds no video stream"
            stream = container.streams.video[0]
            found = sum(1 for packet in container.demux(stream) if packet.size)
    except (av.FFmpegError, OSError, ValueError) as exc:
        return f"it does not open as a video ({' '.join(str(exc).split())})"
    if found != frames:
        return f"it holds {found} of the {frames} frames written"
    return None


class VideoFile:
    """One video written to `path` by OpenCV, under a temporary name until `commit()`.

    `open()`, then `write()` each frame, then `finish()` (the temporary, synced and checked) and
    `commit()` (renamed into place) — or `discard()`. Every failure is a `VideoWriteError` whose
    message starts with `what` and the path (e.g. "--sink file:" or "output")."""

    def __init__(self, path: Path, *, fourcc: str, fps: float, size: tuple[int, int], what: str) -> None:
        self.path = Path(path)
        self.what = what
        self._fourcc, self._fps, self._size = fourcc, fps, size
        self._writer: cv2.VideoWriter | None = None
        self.temporary: Path | None = None
        self.frames = 0

    def open(self) -> None:
        try:
            with held_off():  # a stop (SIGTERM) comes once `discard` knows the file
                self.temporary = private_temporary(self.path)
        except OSError as exc:
            raise self._error(f"cannot create a file in {_folder_of(self.path)} ({exc.strerror or exc})") from None
        writer = cv2.VideoWriter(str(self.temporary), cv2.VideoWriter.fourcc(*self._fourcc), self._fps, self._size)
        if not writer.isOpened():
            writer.release()
            full = disk_is_full(_folder_of(self.path))
            self.discard()
            if full:
                raise disk_full_error(self.what, self.path)
            raise self._error(f"OpenCV's video writer cannot open a {self.path.suffix} file in {_folder_of(self.path)}")
        self._writer = writer

    def write(self, frame: Frame) -> None:
        """Hand one frame to the encoder; VideoWriteError at once when its disk has filled up."""
        if self._writer is None:
            raise RuntimeError("VideoFile.write() before open() or after finish()/discard()")
        self._writer.write(frame)
        self.frames += 1
        if disk_is_full(_folder_of(self.path)):
            error = disk_full_error(self.what, self.path)
            self.discard()
            raise error

    def finish(self) -> Path:
        """Close the encoder, sync the file and check it holds every frame written; the complete
        temporary (still under its temporary name). VideoWriteError (the temporary removed) else."""
        if self._writer is None or self.temporary is None:
            raise RuntimeError("VideoFile.finish() before open() or after discard()")
        writer, self._writer = self._writer, None
        writer.release()
        folder = _folder_of(self.path)
        try:
            _sync(self.temporary)
        except OSError as exc:
            problem: str | None = f"it could not be saved to the disk ({exc.strerror or exc})"
        else:
            problem = check_video(self.temporary, self.frames)
        if problem is not None:
            full = disk_is_full(folder)
            self.discard()
            if full:
                raise disk_full_error(self.what, self.path)
            raise self._error(f"the video was not written completely: {problem}")
        return self.temporary

    def commit(self, complete: Path | None = None) -> None:
        """Rename `complete` (default: this file's checked temporary) over the final path."""
        source = complete if complete is not None else self.temporary
        if source is None:
            raise RuntimeError("VideoFile.commit() before finish()")
        try:
            os.replace(source, self.path)
        except OSError as exc:
            raise self._error(f"the finished video could not be moved into place ({exc.strerror or exc}); "
                              f"it is kept as {source}") from None
        self.temporary = None

    def discard(self) -> None:
        """Stop, and remove the temporary. Safe to call twice."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.release()
        temporary, self.temporary = self.temporary, None
        if temporary is not None:
            try:
                temporary.unlink(missing_ok=True)
            except OSError:
                pass

    def _error(self, problem: str) -> VideoWriteError:
        return VideoWriteError(f"{_named(self.what, self.path)}: {problem}; nothing was put under its name",
                               fix="check the folder is writable and its disk has space")


def _named(what: str, path: Path) -> str:
    """ "output /x.mp4", "--sink file:/x.mp4": how the user named the file."""
    return f"{what}{path}" if what.endswith(":") else f"{what} {path}"


def _folder_of(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
