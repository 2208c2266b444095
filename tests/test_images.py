"""read_image: real photos decode; every kind of bad file is refused with a message naming it."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vcamd.common.errors import FaceError
from vcamd.files.images import read_image


def test_reads_real_photo(assets: Path) -> None:
    frame = read_image(assets / "images" / "newton.png")
    assert frame.shape == (432, 768, 3) and frame.dtype == np.uint8
    assert frame.std() > 10  # real picture content, not a blank decode


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p, "does not exist"),
        (lambda p: (p.mkdir(), p)[1], "is a folder"),
        (lambda p: (p.write_bytes(b""), p)[1], "is empty"),
        (lambda p: (p.write_text("just some text, not pixels"), p)[1], "not a readable image"),
        (lambda p: (p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64), p)[1], "not a readable image"),
    ],
    ids=["missing", "folder", "zero-size", "text", "truncated-png"],
)
def test_bad_files_are_refused_by_name(tmp_path: Path, make, expected: str) -> None:
    path = make(tmp_path / "face.png")
    with pytest.raises(FaceError, match=expected) as info:
        read_image(path, what="source face")
    assert str(path) in str(info.value) and "source face" in str(info.value)


def test_animated_gif_refused(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (32, 32), c) for c in ("red", "green", "blue")]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    with pytest.raises(FaceError, match=r"animated \(3 frames\)"):
        read_image(path)


def test_huge_dimensions_refused_before_decoding(tmp_path: Path) -> None:
    # A tiny PNG file whose header claims 20000×20000 pixels (a decompression bomb).
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    body = zlib.compress(b"\0" * 1000)
    path = tmp_path / "bomb.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b""))
    with pytest.raises(FaceError, match="MP|too large"):
        read_image(path)
