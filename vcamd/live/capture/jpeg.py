"""Decoding a camera's JPEG frames: what an MJPG webcam costs per pixel, whatever the faces do.

An MJPG webcam (what USB cameras send at 720p and 1080p) and the MJPG files the bench and the
tests play as a camera both hand over one JPEG per frame. At 1080p its decode is the largest
per-pixel cost left on the frame's path, so it has one home, here.

The decoder is libjpeg-turbo through its TurboJPEG interface (`simplejpeg`): the same library,
the same accurate IDCT and the same smooth ("fancy") chroma upsampling that OpenCV's `imdecode`
uses — the pixels are bit for bit `imdecode`'s (`tests/live/test_jpeg.py`) — with 6–16 % less
CPU (0.2–0.4 ms a 1080p frame on this project's 2-core VM: benchmarks/decode_cost.py,
docs/performance.md). Its faster settings (the fast IDCT, no fancy upsampling) save 5–18 % of a
1080p decode but lose up to 8.5 and 3.5 dB against the source picture on the photos at JPEG
quality 75–95 (`benchmarks/decode_cost.py --settings`), more than the 0.1 dB a decode setting may
lose: not used. A packet TurboJPEG refuses (a truncated or corrupt frame, which
it will not decode partially; a colour space it does not convert) goes to `imdecode`, which
decodes what it can as before; what neither decodes is NOT_AN_IMAGE, a bad frame the reader skips.
So is a frame whose header claims more pixels than any photo vcamd reads (`images.MAX_PIXELS`).
"""

from __future__ import annotations

import numpy as np

from vcamd.common.types import Frame, as_frame
from vcamd.files.images import MAX_PIXELS

NOT_AN_IMAGE = np.empty(0, np.uint8)
"""What a source delivers for a frame it could not decode: the reader skips it as a bad frame."""

JPEG_START = b"\xff\xd8"
"""Every JPEG begins with the start-of-image marker."""


def is_jpeg_packet(data: object) -> bool:
    """Whether a camera handed over one undecoded JPEG (a 1-D or 1×N byte buffer starting with
    the start-of-image marker) rather than a decoded picture."""
    return (
        isinstance(data, np.ndarray)
        and data.dtype == np.uint8
        and (data.ndim == 1 or (data.ndim == 2 and data.shape[0] == 1))
        and data.size >= 2
        and bytes(data.reshape(-1)[:2]) == JPEG_START
    )


def decode_jpeg(packet: np.ndarray) -> Frame:
    """One JPEG packet → BGR frame; NOT_AN_IMAGE when it does not decode (a corrupt packet is a bad
    frame to skip, not a lost camera) or its header claims more than MAX_PIXELS (a crafted video
    file: its frame would be allocated before a single pixel is read)."""
    import simplejpeg

    data = np.ascontiguousarray(packet).reshape(-1)
    if not data.size:
        return NOT_AN_IMAGE
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return _decode_leniently(data)
    if width * height > MAX_PIXELS:
        return NOT_AN_IMAGE
    try:
        decoded: Frame = simplejpeg.decode_jpeg(data, colorspace="BGR")  # simplejpeg is untyped
        return decoded
    except ValueError:
        return _decode_leniently(data)


def _decode_leniently(data: np.ndarray) -> Frame:
    """OpenCV's decode, which keeps what a truncated or damaged frame still holds (libjpeg fills
    the rest) and knows CMYK; None from it means nothing could be decoded."""
    import cv2

    frame = cv2.imdecode(data, cv2.IMREAD_COLOR)
    return NOT_AN_IMAGE if frame is None else as_frame(frame)
