"""`vcamd swap --face SRC --input IN --output OUT`: swap faces in a photo or a video file, offline.

Every frame goes through `FaceEngine.process_frame` (the same path the live camera uses) and gets
the disclosure badge when `[disclosure] badge = true`. Videos keep their frame rate, size and sound:
the frames are written with OpenCV's codec to a temporary file next to OUT, the input's audio
tracks are then muxed in with PyAV (`vcamd.files.audio`), and the result is renamed into place only when
complete, so an interrupted run never leaves a truncated OUT behind. Progress goes to stderr: a
bar with the time left on a terminal, a line every 10 % otherwise (logs, pipes).

A photo in which no face is found is an error (exit 2, nothing written): the user asked for a swap
and would otherwise get their photo back unchanged. A video reports how many frames had no face.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vcamd.commands import Subcommands, add_config_option
from vcamd.common.errors import VcamdError
from vcamd.common.stopping import held_off, raise_if_stopped
from vcamd.files.diskspace import full_disk_message, mount_point
from vcamd.files.private_files import private_temporary, write_private_atomic
from vcamd.files.videofile import VideoFile, check_video

if TYPE_CHECKING:
    import cv2
    from rich.console import Console

    from vcamd.common.types import Frame
    from vcamd.config.schema import Config
    from vcamd.faces.engine import FaceEngine
    from vcamd.faces.following import FollowedFace

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
VIDEO_SUFFIXES = {".mp4", ".mov", ".m4v", ".avi", ".mkv", ".webm", ".mpg", ".mpeg"}
VIDEO_OUTPUT_FOURCC = {".mp4": "mp4v", ".m4v": "mp4v", ".mov": "mp4v", ".avi": "MJPG"}
"""Containers we write, with a codec every OpenCV build has."""


def register(subparsers: Subcommands) -> None:
    parser = subparsers.add_parser(
        "swap",
        help="swap faces in a photo or video file (offline)",
        description="Put the face from --face onto the faces in --input (a photo or a video) and write --output. "
        "Uses the same models and settings as the live camera ([models], [swap], [enhancer], [disclosure]). "
        "Requires the consent of the person in the source photo: [swap] source_consent = true or --i-have-consent.",
    )
    parser.add_argument("--face", type=Path, metavar="SRC", help="photo of the face to put on (overrides [swap] source_face)")
    parser.add_argument("--input", "-i", type=Path, required=True, metavar="IN", help="photo (.jpg .png …) or video (.mp4 .mov .avi …)")
    parser.add_argument("--output", "-o", type=Path, required=True, metavar="OUT", help="where to write the result (photo for a photo, .mp4/.mov/.avi for a video)")
    add_config_option(parser)
    parser.add_argument("--i-have-consent", action="store_true", help="confirm you have the consent of the person in the source photo")
    parser.set_defaults(func=run_swap)


def run_swap(args: argparse.Namespace) -> int:
    from vcamd.config.reading import load_config
    from vcamd.faces.engine import require_consent
    from vcamd.models.pipeline import build_face_engine, has_own_identity

    cfg, _ = load_config(args.config)
    require_consent(cfg, args.i_have_consent)
    if args.face is not None:
        cfg = cfg.model_copy(update={"swap": cfg.swap.model_copy(update={"source_face": args.face})})
    if cfg.swap.source_face is None and not cfg.swap.map and not has_own_identity(cfg):  # a .dfm swaps in its own face; a map has its own
        raise VcamdError("no source face to swap in", fix="pass --face PHOTO, set [swap] source_face or [[swap.map]] entries in the config")
    kind = _input_kind(args.input)
    _check_output(args.output, args.input, kind)
    # Read the input before paying for loading the models and embedding the source face.
    if kind == "image":
        from vcamd.files.images import read_image

        frame = read_image(args.input, "input")
        return _swap_image(build_face_engine(cfg), cfg, frame, args.input, args.output)
    capture, first = _open_video(args.input)
    try:
        return _swap_video(build_face_engine(cfg), cfg, capture, first, args.input, args.output)
    finally:
        capture.release()


def _input_kind(path: Path) -> str:
    from vcamd.files.images import stat_given_path

    if not stat.S_ISREG(stat_given_path(path, "input").st_mode):  # missing, NUL, name too long: one line
        raise VcamdError(f"input {path} is not a file", fix="give --input a photo or a video file")
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return "image"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    raise VcamdError(
        f"input {path} is not a photo or video file (unknown extension {suffix or '(none)'!r})",
        fix=f"give a photo ({' '.join(sorted(IMAGE_SUFFIXES))}) or a video ({' '.join(sorted(VIDEO_SUFFIXES))})",
    )


def _check_output(output: Path, source: Path, kind: str) -> None:
    suffix = output.suffix.lower()
    if kind == "image" and suffix not in IMAGE_SUFFIXES:
        raise VcamdError(f"output {output}: a photo is written as a photo", fix=f"use one of {' '.join(sorted(IMAGE_SUFFIXES))}")
    if kind == "video" and suffix not in VIDEO_OUTPUT_FOURCC:
        raise VcamdError(f"output {output}: cannot write a video with extension {suffix or '(none)'!r}", fix=f"use one of {' '.join(sorted(VIDEO_OUTPUT_FOURCC))}")
    info = _stat_output(output)
    if info is not None and os.path.samestat(info, os.stat(source)):
        raise VcamdError(f"output {output} is the input file", fix="write the result to a different file")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise VcamdError(f"output {output} is a folder", fix="give --output a file name")
    folder = output.parent if str(output.parent) else Path(".")
    if not folder.is_dir():
        raise VcamdError(f"output folder {folder} does not exist", fix="create it first or write somewhere else")
    if not os.access(folder, os.W_OK) or (info is not None and not os.access(output, os.W_OK)):
        raise VcamdError(f"output {output} is not writable (permission denied)", fix="write to a folder you can write to")


def _stat_output(output: Path) -> os.stat_result | None:
    """What is at --output now (None: nothing yet), or one line when the path itself cannot be one."""
    from vcamd.files.images import shown_path

    try:
        return os.stat(output)
    except FileNotFoundError:
        return None
    except ValueError:  # a NUL byte
        raise VcamdError(f"output path {shown_path(output)} holds a NUL byte, which no file name can", fix="check --output") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise VcamdError(f"output folder {output.parent} is not a folder", fix="check --output") from None
        raise VcamdError(f"output {shown_path(output)} cannot be used ({exc.strerror or exc})",
                         fix="use a shorter name (at most 255 bytes a folder or file name)" if exc.errno == errno.ENAMETOOLONG
                         else "write somewhere else") from None


def _finish_frame(engine: FaceEngine, cfg: Config, frame: Frame, follow: FollowedFace | None = None, index: int = 0) -> tuple[int, int]:
    """Swap in place, badge in place; returns (faces found, faces swapped). A video's frames pass
    one `follow` (the face "largest" chose keeps the swap) and their index."""
    from vcamd.privacy.badge import draw_badge

    result = engine.process_frame(frame, follow=follow, index=index)
    if cfg.disclosure.badge:
        draw_badge(frame, cfg.disclosure.text, cfg.disclosure.corner)
    return len(result.faces), result.swapped


def no_face_error(source: Path, cfg: Config, faces_seen: int, where: str = "") -> VcamdError:
    """Nothing was swapped: either the detector found no face, or none matched the reference face."""
    if faces_seen and cfg.swap.face_selection == "reference":
        return VcamdError(
            f"no face in {where}{source} matches the reference face ([swap] reference_face)",
            fix="use a reference photo of the person in the input, or set [swap] face_selection = \"largest\"",
        )
    return VcamdError(
        f"no face found in {where}{source}",
        fix=f"give an input where a face is clearly visible; `vcamd faces {source}` shows what the detector finds, "
        f"and a lower [detection] threshold (now {cfg.detection.threshold:g}) finds fainter faces",
    )


def _swap_image(engine: FaceEngine, cfg: Config, frame: Frame, source: Path, output: Path) -> int:
    import cv2

    faces_seen, swapped = _finish_frame(engine, cfg, frame)
    if not swapped:
        raise no_face_error(source, cfg, faces_seen)
    try:
        ok, data = cv2.imencode(output.suffix.lower(), frame)
    except cv2.error:
        ok = False
    if not ok:
        raise VcamdError(f"cannot encode the result as {output.suffix}", fix="use .png or .jpg for --output")
    try:
        write_private_atomic(output, data.tobytes())  # 0600, renamed into place: never through a symlink
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            message, fix = full_disk_message(f"output {output}", output, "the photo")
            raise VcamdError(message, fix=fix) from None
        raise VcamdError(f"cannot write {output}: {exc.strerror or exc} (in {output.parent}); nothing was put under its name",
                         fix="write to a folder you can write to, with free space") from None
    print(f"swapped {swapped} face(s) in {source} → {output}")
    return 0


def _open_video(source: Path) -> tuple[cv2.VideoCapture, Frame]:
    """Open the video and decode its first frame, or say why not."""
    import cv2

    # FFmpeg prints its own complaints ("moov atom not found") straight to stderr; we report a
    # failure as one line of our own instead. Read when OpenCV first opens a file; setdefault
    # leaves a user's own OPENCV_FFMPEG_LOGLEVEL (for debugging) alone.
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    capture = cv2.VideoCapture(str(source))
    ok, frame = _next_frame(capture) if capture.isOpened() else (False, None)
    if not ok or frame is None:
        capture.release()
        raise VcamdError(
            f"input {source} is not a readable video (OpenCV could not decode a frame)",
            fix="give an .mp4/.mov/.avi file that plays, or convert it with ffmpeg",
        )
    return capture, frame


def _next_frame(capture: cv2.VideoCapture) -> tuple[bool, Frame | None]:
    """The next decoded frame, None where there is none (past the end, a damaged stretch)."""
    from vcamd.common.types import as_frame

    ok, frame = capture.read()
    return ok, as_frame(frame) if frame is not None else None


@dataclass
class VideoTally:
    """What happened to the frames of a video, for the summary line."""

    frames: int = 0
    swapped: int = 0
    """Frames in which at least one face was swapped."""
    without_face: int = 0
    """Frames in which the detector found no face."""
    unmatched: int = 0
    """Frames with faces of which none was swapped (no face matched the reference face, or the face
    "largest" follows was out of view)."""
    unreadable: int = 0
    """Reads that failed before the end the input claims (damaged or cut short)."""

    def short_of(self, claimed: int | None) -> int:
        """How many of the `claimed` frames the output lacks, beyond a container's estimate's
        slack (some containers only estimate their frame count from the duration)."""
        if not claimed:
            return 0
        missing = claimed - self.frames
        return missing if missing > max(2, claimed // 100) else 0

    def add(self, faces_seen: int, swapped: int) -> None:
        self.frames += 1
        if swapped:
            self.swapped += 1
        elif faces_seen:
            self.unmatched += 1
        else:
            self.without_face += 1


class SwapProgress:
    """Progress of a video swap on stderr: a bar with the time left on a terminal; without one
    (a log, a pipe), one plain line per tenth of the video, so a long job still shows it moves."""

    def __init__(self, total: int | None, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._total = total
        self._console = console
        self._clock = clock
        self._started = clock()
        self._done = 0
        self._bar: Progress | None = None
        if console.is_terminal:
            self._bar = Progress(
                TextColumn("swapping"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"), console=console,
            )
            self._task = self._bar.add_task("swap", total=total)
        self._every = max(1, -(-total // 10)) if total else 100

    def __enter__(self) -> SwapProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self) -> None:
        self._done += 1
        if self._bar is not None:
            self._bar.advance(self._task)
        elif self._done % self._every == 0 or self._done == self._total:
            self._console.print(self.line(), markup=False, highlight=False, soft_wrap=True)

    def line(self) -> str:
        elapsed = self._clock() - self._started
        if not self._total:
            return f"swapping: {self._done} frames, {_clock_text(elapsed)} elapsed"
        left = elapsed / self._done * max(0, self._total - self._done)
        percent = min(100, round(100 * self._done / self._total))
        return f"swapping: {percent}% ({self._done}/{self._total} frames), {_clock_text(elapsed)} elapsed, about {_clock_text(left)} left"


def _clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


def _swap_video(engine: FaceEngine, cfg: Config, capture: cv2.VideoCapture, first: Frame, source: Path, output: Path) -> int:
    import cv2
    from rich.console import Console

    fps = capture.get(cv2.CAP_PROP_FPS)
    if not fps or fps != fps or fps <= 0 or fps > 1000:  # NaN / 0 / nonsense from some containers
        fps = 30.0
    total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) or None
    height, width = first.shape[:2]
    from vcamd.faces.following import FollowedFace

    tally = VideoTally()
    follow = FollowedFace()
    ok = True
    frame: Frame | None = first
    # Written under a fresh 0600 temporary name next to OUT, checked, and renamed when complete
    # (`vcamd.files.videofile`): no truncated OUT, no write through a symlink planted at OUT, private
    # whatever the umask, and a full disk is an error at once, not a file that plays nowhere.
    video = VideoFile(output, fourcc=VIDEO_OUTPUT_FOURCC[output.suffix.lower()], fps=fps, size=(width, height), what="output")
    try:
        video.open()  # inside: a stop while it opens removes its temporary too
        with SwapProgress(total, Console(stderr=True)) as progress:
            while ok and frame is not None:
                raise_if_stopped()  # a SIGTERM whose raise was swallowed (`stopping._RaiseStopped`) ends the swap here
                if frame.shape[:2] != (height, width):
                    raise VcamdError(f"input {source}: frame {tally.frames} is {frame.shape[1]}×{frame.shape[0]}, not {width}×{height}", fix="re-encode the video at one size")
                tally.add(*_finish_frame(engine, cfg, frame, follow, tally.frames))
                video.write(frame)
                progress.advance()
                ok, frame = _next_frame(capture)
                # A damaged stretch fails reads that later ones get past (MPEG-4); a file cut short
                # fails them all. Either way no more reads than the frames the input claims.
                while not ok and total and tally.frames + tally.unreadable < total:
                    tally.unreadable += 1
                    ok, frame = _next_frame(capture)
        raise_if_stopped()  # nor does one after the last frame get a finished video
        if not tally.swapped:
            raise no_face_error(source, cfg, tally.unmatched, where="any frame of ")
        complete = video.finish()
        sound = _keep_audio(video, complete, source, tally.frames)
        missed = []
        if tally.without_face:
            missed.append(f"no face found in {tally.without_face} frame(s)")
        if tally.unmatched:
            why = "no face matched the reference face" if cfg.swap.face_selection == "reference" else "the face being swapped was out of view"
            missed.append(f"{why} in {tally.unmatched} frame(s)")
        if total and total != tally.frames:
            missed.append(f"the input claims {total} frames, {tally.frames} could be read")
        print(
            f"swapped faces in {tally.swapped} of {tally.frames} frame(s) of {source} ({fps:g} fps) → {output}; "
            + "; ".join([*missed, sound]),
            file=sys.stdout,
        )
        if missing := tally.short_of(total):
            # The frames that could be read are kept (they may have taken an hour); the exit says the
            # output is not the whole video.
            raise VcamdError(
                f"{output} is short: {missing} of the {total} frames {source} claims could not be read (damaged or cut short)",
                fix="repair or re-encode the input (e.g. ffmpeg -i IN -c:v libx264 FIXED.mp4) and swap it again",
            )
        return 0
    except BaseException:
        video.discard()  # nothing once renamed into place
        raise


def _keep_audio(video: VideoFile, complete: Path, source: Path, frames: int) -> str:
    """Move the finished, checked video into place with the input's sound; returns the summary's
    audio part. When FFmpeg cannot copy the sound (or the result does not read back whole: a disk
    that filled up meanwhile), the swapped video is still kept (it may have taken an hour) and a
    warning says why it is silent."""
    from vcamd.files.audio import audio_track_count, mux_audio

    output = video.path
    tracks = audio_track_count(source)
    if not tracks:
        video.commit(complete)
        return "the input has no audio"
    muxed: Path | None = None
    try:
        with held_off():  # a stop (SIGTERM) comes once `muxed` names the file to remove
            muxed = private_temporary(output, "partial-audio")
    except OSError as exc:
        video.commit(complete)
        print(f"vcamd: warning: cannot add the sound ({exc.strerror or exc}); {output} has no sound", file=sys.stderr)
        return "audio NOT kept (see the warning)"
    except BaseException:
        if muxed is not None:
            muxed.unlink(missing_ok=True)
        raise
    try:
        kept = mux_audio(complete, source, muxed)
        problem = check_video(muxed, frames)
        if problem is not None:
            raise VcamdError(f"the video with its sound did not read back whole ({problem})",
                             fix=f"free some space on {mount_point(output.parent if str(output.parent) else Path('.'))}")
    except VcamdError as err:
        muxed.unlink(missing_ok=True)
        video.commit(complete)
        print(f"vcamd: warning: {err.message}; {output} has no sound ({err.fix})", file=sys.stderr)
        return "audio NOT kept (see the warning)"
    except BaseException:
        muxed.unlink(missing_ok=True)
        raise
    video.commit(muxed)
    complete.unlink(missing_ok=True)
    how = f"re-encoded to {kept.reencoded_to}" if kept.reencoded_to else "copied"
    return f"{kept.tracks} audio track(s) {how}"
