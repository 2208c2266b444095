"""A face photo sliding across a frame, written as a video file: the camera for `vcamd bench`, the
soak benchmark and the live tests (a video file played in real time stands in for a webcam); the
bench's one-face and still cameras (`sliding_clip`, `still_clip`)."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from vcamd.common.errors import VcamdError
from vcamd.common.types import Frame

if TYPE_CHECKING:
    from vcamd.bench.settings import BenchSettings

BACKGROUND = 110
"""Flat grey around the face: a test can tell raw background from anything drawn on it."""


def fitted_frame(image: Frame, size: tuple[int, int]) -> Frame:
    """`image` scaled to fit a `size` (width, height) frame, centred on BACKGROUND grey bars: how
    the groups scenario shows its photo to the camera."""
    width, height = size
    scale = min(width / image.shape[1], height / image.shape[0])
    fitted = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)), interpolation=cv2.INTER_AREA)
    frame = np.full((height, width, 3), BACKGROUND, np.uint8)
    y0, x0 = (height - fitted.shape[0]) // 2, (width - fitted.shape[1]) // 2
    frame[y0 : y0 + fitted.shape[0], x0 : x0 + fitted.shape[1]] = fitted
    return frame


def tiled_group(image: Frame, count: int, size: tuple[int, int]) -> Frame:
    """`count` copies of a one-face photo in a grid on a `size` (width, height) frame, every other
    one mirrored: the groups scenario's crowd when the user has no group photo (`--group-photo`)."""
    width, height = size
    cols = max(1, int(np.ceil(np.sqrt(count * width / height))))
    rows = int(np.ceil(count / cols))
    cell_w, cell_h = width // cols, height // rows
    frame = np.full((height, width, 3), BACKGROUND, np.uint8)
    scale = min(cell_w / image.shape[1], cell_h / image.shape[0]) * 0.95
    face = cv2.resize(image, (max(1, int(image.shape[1] * scale)), max(1, int(image.shape[0] * scale))), interpolation=cv2.INTER_AREA)
    fh, fw = face.shape[:2]
    for n in range(count):
        row, col = divmod(n, cols)
        y, x = row * cell_h + (cell_h - fh) // 2, col * cell_w + (cell_w - fw) // 2
        frame[y : y + fh, x : x + fw] = face if n % 2 == 0 else face[:, ::-1]
    return frame


def write_sliding_clip(
    path: Path,
    image: Frame,
    *,
    size: tuple[int, int],
    fps: float,
    frames: int,
    face_scale: float = 0.75,
    step_px: int = 2,
    bob_px: int = 0,
    fourcc: str = "MJPG",
) -> Path:
    """Write `sliding_frames` (`image` moving on grey) as a video file, MJPG by default, like a webcam."""
    width, height = size
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*fourcc), fps, (width, height))
    if not writer.isOpened():
        raise VcamdError(f"cannot write the clip {path}", fix=f"OpenCV needs its {fourcc} encoder (opencv-python has it)")
    try:
        for frame in sliding_frames(image, size=size, frames=frames, face_scale=face_scale, step_px=step_px, bob_px=bob_px):
            writer.write(frame)
    finally:
        writer.release()
    return path


def sliding_frames(image: Frame, *, size: tuple[int, int], frames: int, face_scale: float = 0.75, step_px: int = 2,
                   bob_px: int = 0) -> Iterator[Frame]:
    """`frames` frames of `image` (scaled to `face_scale` of the frame) moving `step_px` a frame
    left and right on grey, bouncing at the edges so a looped clip has no jump; `bob_px` adds a
    slow vertical sway. (What a clip of them decodes to is compared with these: decode_cost.py.)"""
    width, height = size
    scale = face_scale * min(height / image.shape[0], width / image.shape[1])
    face = cv2.resize(image, (int(image.shape[1] * scale), int(image.shape[0] * scale)), interpolation=cv2.INTER_AREA)
    fh, fw = face.shape[:2]
    travel = max(1, width - fw)
    for i in range(frames):
        frame = np.full((height, width, 3), BACKGROUND, np.uint8)
        x = (step_px * i) % (2 * travel)
        x = x if x < travel else 2 * travel - x
        y = (height - fh) // 2 + (int(bob_px * np.sin(i / 7.0)) if bob_px else 0)
        frame[y : y + fh, x : x + fw] = face
        yield frame


def sliding_clip(image: Frame, settings: BenchSettings, tmpdir: Path, size: tuple[int, int]) -> Path:
    """The one-face camera clip: the face photo sliding across a `size` frame (built once per size)."""
    path = tmpdir / f"clip_{size[0]}x{size[1]}.avi"
    if path.exists():
        return path
    return write_sliding_clip(path, image, size=size, fps=settings.fps, **sliding_motion(size, settings.fps))


def sliding_motion(size: tuple[int, int], fps: float) -> dict[str, Any]:
    """How the bench's one-face clip (`sliding_clip`) moves at `size`: 4 s, the face at 0.66 of the
    frame, a step of a 400th of its width a frame, a 6-px sway (`sliding_frames`' arguments)."""
    return {"frames": int(4 * fps), "face_scale": 0.66, "step_px": max(1, size[0] // 400), "bob_px": 6}


def still_clip(image: Frame, settings: BenchSettings, tmpdir: Path, size: tuple[int, int], name: str = "still", *,
               noise: float = 0.0) -> Path:
    """A still camera: `image` fitted into a `size` frame (grey bars), 4 s, MJPG. Without `noise`
    one JPEG (quality STILL_JPEG_QUALITY) repeated, so every frame decodes to the same pixels: a
    still camera without sensor noise. (OpenCV's writer goes through FFmpeg's MJPEG encoder, whose
    rate control settles over the first 4 frames: 4.2 to 2.3 grey levels off the rest on
    crowd_selfie at 1080p, a change at every face each time the looped clip restarts, which no
    still camera makes.) `noise`: a camera's sensor noise, Gaussian, this many grey levels a pixel
    and channel, new in every frame (seeded: the same clip each time)."""
    width, height = size
    frame = fitted_frame(image, size)
    count = int(4 * settings.fps)

    def jpeg(picture: Frame) -> bytes:
        ok, encoded = cv2.imencode(".jpg", picture, [cv2.IMWRITE_JPEG_QUALITY, STILL_JPEG_QUALITY])
        if not ok:
            raise VcamdError(f"cannot encode the still clip's frame ({width}×{height})", fix="OpenCV needs its JPEG encoder (opencv-python has it)")
        return encoded.tobytes()

    if noise:
        rng = np.random.default_rng(0)
        jpegs = [jpeg(np.clip(np.rint(frame + rng.normal(0.0, noise, frame.shape)), 0, 255).astype(np.uint8)) for _ in range(count)]
    else:
        jpegs = [jpeg(frame)] * count
    suffix = f"_noise{noise:g}" if noise else ""
    return write_mjpg(tmpdir / f"{name}{suffix}_{width}x{height}.avi", jpegs, size, settings.fps)


def write_mjpg(path: Path, jpegs: list[bytes], size: tuple[int, int], fps: float) -> Path:
    """`jpegs` (one JPEG a frame) as an MJPG AVI file at `fps`, each frame as it is (PyAV muxes the
    packets; no encoder in between)."""
    import av

    rate = Fraction(fps).limit_denominator(1001)
    with av.open(str(path), "w", format="avi") as out:
        stream = out.add_stream("mjpeg", rate=rate)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuvj420p"
        for index, jpeg in enumerate(jpegs):
            packet = av.Packet(jpeg)
            packet.stream, packet.pts, packet.dts, packet.time_base = stream, index, index, 1 / rate
            out.mux(packet)
    return path


STILL_JPEG_QUALITY = 80
"""The still clip's JPEG quality: FFmpeg's MJPEG encoder settles at about this (crowd_selfie at 1080p:
38.0 dB and 439 kB a frame; OpenCV's quality 80 gives 37.9 dB and 448 kB), so a frame costs the
camera's decode what it did before."""
