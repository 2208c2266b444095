"""Fuzz read_image, the one door user photos come through: only FaceError may come out.

Random bytes, real PNG/JPEG files cut short or with flipped bytes, and valid headers (PNG, JPEG,
GIF, BMP, TIFF, WebP) with random sizes and garbage bodies. Whatever read_image returns must be a
plain H×W×3 uint8 frame under the pixel cap.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vcamd.common.errors import FaceError
from vcamd.files.images import MAX_PIXELS, read_image


@pytest.fixture(autouse=True, scope="module")
def quiet_opencv():
    """OpenCV prints a line per undecodable buffer; thousands of them hide the test output."""
    from cv2.utils import logging as cv_logging

    previous = cv_logging.getLogLevel()
    cv_logging.setLogLevel(cv_logging.LOG_LEVEL_SILENT)
    yield
    cv_logging.setLogLevel(previous)


FUZZ = settings(deadline=None, max_examples=500, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def real_images(assets: Path) -> dict[str, bytes]:
    """Small real PNG and JPEG files (a crop of a real photo), so each decode in the fuzz is cheap."""
    photo = cv2.imread(str(assets / "images" / "newton.png"))
    crop = photo[40:200, 300:460]
    ok_png, png = cv2.imencode(".png", crop)
    ok_jpg, jpg = cv2.imencode(".jpg", crop, [cv2.IMWRITE_JPEG_QUALITY, 85])
    assert ok_png and ok_jpg
    return {
        "png": png.tobytes(),
        "jpg": jpg.tobytes(),
        # The real JPEG photo's first 64 KB: its real header, segments and start of scan.
        "crowd.jpg": (assets / "images" / "crowd_selfie.jpg").read_bytes()[:65536],
    }


def _check_read(path: Path) -> None:
    try:
        frame = read_image(path, what="source face")
    except FaceError as err:
        assert str(path) in str(err), f"FaceError does not name the file: {err}"
        return
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
    assert frame.shape[0] * frame.shape[1] <= MAX_PIXELS


@FUZZ
@given(raw=st.binary(max_size=4096), ext=st.sampled_from([".png", ".jpg", ".gif", ".bmp", ".webp", ""]))
def test_random_bytes(tmp_path: Path, raw: bytes, ext: str) -> None:
    path = tmp_path / f"face{ext}"
    path.write_bytes(raw)
    _check_read(path)


@FUZZ
@given(kind=st.sampled_from(["png", "jpg", "crowd.jpg"]), cut=st.floats(min_value=0.0, max_value=1.0))
def test_truncated_real_files(tmp_path: Path, real_images: dict[str, bytes], kind: str, cut: float) -> None:
    data = real_images[kind]
    path = tmp_path / f"face.{kind.split('.')[-1]}"
    path.write_bytes(data[: int(len(data) * cut)])
    _check_read(path)


@FUZZ
@given(
    kind=st.sampled_from(["png", "jpg"]),
    flips=st.lists(st.tuples(st.floats(min_value=0.0, max_value=0.999), st.integers(0, 255)), min_size=1, max_size=12),
)
def test_real_files_with_flipped_bytes(tmp_path: Path, real_images: dict[str, bytes], kind: str, flips) -> None:
    data = bytearray(real_images[kind])
    for where, value in flips:
        data[int(len(data) * where)] = value
    path = tmp_path / f"face.{kind}"
    path.write_bytes(bytes(data))
    _check_read(path)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _header(kind: str, width: int, height: int) -> bytes:
    """A structurally valid header of the given format claiming width × height pixels."""
    if kind == "png":
        ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + b"\0\0\x10\0IDAT"
    if kind == "jpg":
        sof = struct.pack(">BHHB", 8, height & 0xFFFF, width & 0xFFFF, 3) + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00"
        return b"\xff\xd8\xff\xc0" + struct.pack(">H", len(sof) + 2) + sof + b"\xff\xda\x00\x0c\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00"
    if kind == "gif":
        return b"GIF89a" + struct.pack("<HH", width & 0xFFFF, height & 0xFFFF) + b"\xf0\x00\x00" + b"\0" * 6 + b","
    if kind == "bmp":
        info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
        return b"BM" + struct.pack("<IHHI", 54 + 3 * width * height & 0xFFFFFFFF, 0, 0, 54) + info
    if kind == "tiff":
        entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (262, 3, 1, 1), (273, 4, 1, 8)]
        ifd = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *e) for e in entries) + b"\0\0\0\0"
        return b"II*\x00" + struct.pack("<I", 8) + ifd
    if kind == "webp":
        vp8 = b"\x9d\x01\x2a" + struct.pack("<HH", width & 0x3FFF, height & 0x3FFF)
        return b"RIFF" + struct.pack("<I", 1000) + b"WEBPVP8 " + struct.pack("<I", 990) + b"\x00\x00\x00" + vp8
    raise AssertionError(kind)


@FUZZ
@given(
    kind=st.sampled_from(["png", "jpg", "gif", "bmp", "tiff", "webp"]),
    width=st.one_of(st.integers(0, 4096), st.integers(0, 2**31 - 1)),
    height=st.one_of(st.integers(0, 4096), st.integers(0, 2**31 - 1)),
    body=st.binary(max_size=2048),
)
def test_valid_headers_with_garbage_bodies(tmp_path: Path, kind: str, width: int, height: int, body: bytes) -> None:
    path = tmp_path / f"face.{kind}"
    path.write_bytes(_header(kind, width, height) + body)
    _check_read(path)


def test_fuzz_inputs_can_succeed(tmp_path: Path, real_images: dict[str, bytes]) -> None:
    # The checks above accept a decode as well as a FaceError; make sure the untouched inputs do
    # decode, so "everything is refused" would not pass silently.
    for kind in ("png", "jpg"):
        path = tmp_path / f"ok.{kind}"
        path.write_bytes(real_images[kind])
        assert read_image(path).shape == (160, 160, 3)


def test_header_claimed_huge_image_in_a_format_pillow_cannot_identify(tmp_path: Path) -> None:
    # A 4 KB Radiance HDR file whose header claims 40000×26000 pixels (1.04 GP, just under
    # OpenCV's own 1 GP cap). Pillow cannot identify HDR, so read_image skips its pixel cap and
    # hands the bytes to cv2.imdecode, which reserves the claimed size (3.1 GB of float pixels and
    # more) before finding the body is junk. With a real RLE body (~70 MB, under the 200 MB file
    # cap) that memory would be filled. read_image must refuse it *before* decoding: the child's
    # peak virtual memory (VmPeak) must not jump by gigabytes. Reserved-but-untouched memory costs
    # this machine nothing, so the child runs without a limit.
    bomb = tmp_path / "face.hdr"
    bomb.write_bytes(b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 26000 +X 40000\n" + b"\x80" * 4000)
    child = textwrap.dedent(
        f"""
        def peak_mb():
            for line in open("/proc/self/status"):
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) // 1024
        from vcamd.common.errors import FaceError
        from vcamd.files.images import read_image
        before = peak_mb()
        try:
            read_image({str(bomb)!r}, what="source face")
        except FaceError as err:
            print("FaceError:", err)
        else:
            print("decoded")
        print("VmPeak growth MB:", peak_mb() - before)
        """
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stdout.startswith("FaceError:") and str(bomb) in result.stdout
    growth = int(result.stdout.rsplit(":", 1)[1])
    assert growth < 1024, f"read_image let OpenCV reserve {growth} MB for a 4 KB file"


def test_header_taller_than_opencv_allows_is_a_face_error(tmp_path: Path) -> None:
    # Found by the fuzzer: a 54-byte BMP claiming 1×1048577 pixels (1 MP, under our 64 MP cap)
    # passes the Pillow probe; cv2.imdecode then *raises* cv2.error (height > 2^20) instead of
    # returning None, and the error escapes read_image.
    path = tmp_path / "face.bmp"
    path.write_bytes(_header("bmp", 1, 1048577))
    with pytest.raises(FaceError) as info:
        read_image(path, what="source face")
    assert str(path) in str(info.value)
