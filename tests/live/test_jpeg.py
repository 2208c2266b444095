"""An MJPG camera's frames: decoded to OpenCV's pixels, bit for bit, with less CPU; a webcam on
V4L2 hands over its JPEGs undecoded (a stand-in driver with OpenCV's V4L2 behaviour: no webcam here)."""

from __future__ import annotations

import logging

import cv2
import numpy as np
import pytest

from vcamd.config.schema import CameraConfig
from vcamd.live.capture.jpeg import NOT_AN_IMAGE, decode_jpeg, is_jpeg_packet
from vcamd.live.capture.webcam import OpenCVCamera


def encoded(image: np.ndarray, *params: int) -> np.ndarray:
    ok, data = cv2.imencode(".jpg", image, list(params))
    assert ok
    return data.reshape(-1)


@pytest.fixture(scope="module")
def photos(assets) -> dict[str, np.ndarray]:
    images = {p.stem: cv2.imread(str(p)) for p in sorted((assets / "images").iterdir())}
    return {name: image for name, image in images.items() if image is not None}


SAMPLINGS = {
    "4:2:0": (cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420),
    "4:2:2 (most USB webcams)": (cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422),
    "4:4:4": (cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444),
    "progressive": (cv2.IMWRITE_JPEG_PROGRESSIVE, 1),
    "restart markers": (cv2.IMWRITE_JPEG_RST_INTERVAL, 4),
}


@pytest.mark.parametrize("sampling", list(SAMPLINGS))
def test_every_photo_decodes_to_opencvs_pixels_bit_for_bit(photos, sampling):
    assert len(photos) >= 3
    for name, image in photos.items():
        for quality in (60, 95):
            data = encoded(image, cv2.IMWRITE_JPEG_QUALITY, quality, *SAMPLINGS[sampling])
            ours, opencv = decode_jpeg(data), cv2.imdecode(data, cv2.IMREAD_COLOR)
            assert ours.shape == opencv.shape == image.shape, name
            assert ours.dtype == np.uint8 and ours.flags["C_CONTIGUOUS"]
            assert np.array_equal(ours, opencv), f"{name} at quality {quality}: {np.abs(ours.astype(int) - opencv).max()} levels off"


def test_a_grey_jpeg_becomes_a_three_channel_frame_as_in_opencv(photos):
    grey = cv2.cvtColor(photos["newton"], cv2.COLOR_BGR2GRAY)
    data = encoded(grey)
    assert np.array_equal(decode_jpeg(data), cv2.imdecode(data, cv2.IMREAD_COLOR))


def without_huffman_tables(data: np.ndarray) -> np.ndarray:
    """`data` with its DHT segments left out, as many USB webcams send Motion-JPEG frames."""
    raw, kept, at = data.tobytes(), bytearray(data[:2].tobytes()), 2
    while raw[at + 1] != 0xDA:  # up to the start of scan: marker segments with their lengths
        length = int.from_bytes(raw[at + 2 : at + 4], "big")
        if raw[at + 1] != 0xC4:
            kept += raw[at : at + 2 + length]
        at += 2 + length
    kept += raw[at:]
    return np.frombuffer(bytes(kept), np.uint8)


def test_a_webcam_frame_without_huffman_tables_decodes_with_the_standard_ones(photos):
    """Motion-JPEG leaves the Huffman tables out (the standard ones apply); a frame decoded as
    a bad one would be a covered or frozen picture on those webcams."""
    for quality in (60, 95):
        data = encoded(photos["newton"], cv2.IMWRITE_JPEG_QUALITY, quality, *SAMPLINGS["4:2:2 (most USB webcams)"])
        bare = without_huffman_tables(data)
        assert bare.size < data.size and b"\xff\xc4" not in bare.tobytes()
        assert is_jpeg_packet(bare)
        assert np.array_equal(decode_jpeg(bare), cv2.imdecode(data, cv2.IMREAD_COLOR))


def test_a_camera_clips_packets_decode_as_opencv_decodes_them(make_clip):
    """The packets an MJPG file holds (what the bench's camera plays), 1×N rows as V4L2 hands them."""
    clip = make_clip("packets.avi", fps=30.0, frames=5, size=(1280, 720))
    cap = cv2.VideoCapture(str(clip))
    assert cap.set(cv2.CAP_PROP_FORMAT, -1)
    packets = [cap.read()[1] for _ in range(5)]
    cap.release()
    for packet in packets:
        row = packet.reshape(1, -1)
        assert is_jpeg_packet(row) and is_jpeg_packet(packet)
        frame = decode_jpeg(row)
        assert frame.shape == (720, 1280, 3)
        assert np.array_equal(frame, cv2.imdecode(packet, cv2.IMREAD_COLOR))


def test_the_bench_clip_decodes_to_the_frames_it_was_drawn_from(tmp_path, newton):
    """`sliding_frames` are the pictures `write_sliding_clip` encodes, frame by frame: the source the
    decode settings are weighed against (benchmarks/decode_cost.py --settings)."""
    from vcamd.bench.clips import sliding_frames, write_sliding_clip

    motion = {"frames": 8, "face_scale": 0.66, "step_px": 5, "bob_px": 6}
    clip = write_sliding_clip(tmp_path / "sliding.avi", newton, size=(320, 240), fps=30.0, **motion)
    cap = cv2.VideoCapture(str(clip))
    assert cap.set(cv2.CAP_PROP_FORMAT, -1)
    sources = list(sliding_frames(newton, size=(320, 240), **motion))
    for k, source in enumerate(sources):
        frame = decode_jpeg(cap.read()[1])
        errors = {j: float(np.mean((other.astype(np.float64) - frame) ** 2)) for j, other in enumerate(sources)}
        assert min(errors, key=errors.__getitem__) == k  # its own picture, not a neighbour's
        assert 10 * np.log10(255.0**2 / errors[k]) > 35.0  # only the JPEG's loss between them
    cap.release()


def test_a_damaged_frame_keeps_what_opencv_keeps_and_garbage_is_a_bad_frame(photos):
    data = encoded(photos["newton"], cv2.IMWRITE_JPEG_QUALITY, 90)
    for cut in (0.5, 0.9, 0.99):
        truncated = data[: int(data.size * cut)]
        opencv = cv2.imdecode(truncated, cv2.IMREAD_COLOR)
        ours = decode_jpeg(truncated)
        if opencv is None:
            assert ours is NOT_AN_IMAGE
        else:
            assert np.array_equal(ours, opencv)
    flipped = data.copy()
    flipped[data.size // 2 : data.size // 2 + 64] ^= 0x5A  # bits flipped on the USB wire
    opencv = cv2.imdecode(flipped, cv2.IMREAD_COLOR)
    ours = decode_jpeg(flipped)
    assert (ours is NOT_AN_IMAGE) if opencv is None else np.array_equal(ours, opencv)
    assert decode_jpeg(np.frombuffer(b"not a jpeg at all", np.uint8)) is NOT_AN_IMAGE
    assert decode_jpeg(np.empty(0, np.uint8)) is NOT_AN_IMAGE
    assert decode_jpeg(np.frombuffer(b"\xff\xd8", np.uint8)) is NOT_AN_IMAGE  # a start marker and nothing else


def test_only_an_undecoded_jpeg_counts_as_a_packet(photos):
    data = encoded(photos["newton"])
    assert is_jpeg_packet(data) and is_jpeg_packet(data.reshape(1, -1))
    assert not is_jpeg_packet(photos["newton"])  # a decoded frame
    assert not is_jpeg_packet(data.reshape(-1)[2:])  # no start marker
    assert not is_jpeg_packet(np.empty(0, np.uint8))
    assert not is_jpeg_packet(data.astype(np.int16))
    assert not is_jpeg_packet(None)


# -- the webcam: OpenCV's V4L2 backend, played by a stand-in driver ----------------------------------


class StandInCapture:
    """What `cv2.VideoCapture` does for an MJPG webcam, after OpenCV's cap_v4l.cpp: converting
    (the default), read() decodes each JPEG to BGR; with CAP_PROP_CONVERT_RGB off it returns the
    JPEG as a 1×N row. `backend` is what getBackendName() says; `sends` replaces the JPEG stream
    from frame `switch_at` on (a driver that changed format)."""

    def __init__(self, jpegs: list[np.ndarray], *, backend: str = "V4L2", fourcc: str = "MJPG",
                 sends: np.ndarray | None = None, switch_at: int | None = None, ignores_convert: bool = False) -> None:
        self.jpegs = jpegs
        self.backend = backend
        self.fourcc = cv2.VideoWriter_fourcc(*fourcc)
        self.convert_rgb = True
        self.sends, self.switch_at = sends, switch_at
        self.ignores_convert = ignores_convert  # an OpenCV that says yes and decodes anyway
        self.reads = 0
        self.released = False
        height, width = cv2.imdecode(jpegs[0], cv2.IMREAD_COLOR).shape[:2]
        self.size = (width, height)

    def isOpened(self) -> bool:  # noqa: N802 (OpenCV's name)
        return True

    def getBackendName(self) -> str:  # noqa: N802
        return self.backend

    def get(self, prop: int) -> float:
        return {cv2.CAP_PROP_FOURCC: float(self.fourcc), cv2.CAP_PROP_FRAME_WIDTH: float(self.size[0]),
                cv2.CAP_PROP_FRAME_HEIGHT: float(self.size[1]), cv2.CAP_PROP_FPS: 30.0,
                cv2.CAP_PROP_CONVERT_RGB: float(self.convert_rgb)}.get(prop, 0.0)

    def set(self, prop: int, value: float) -> bool:
        if prop == cv2.CAP_PROP_CONVERT_RGB and not self.ignores_convert:
            self.convert_rgb = bool(value)
        return True

    def read(self):
        index = self.reads
        self.reads += 1
        if self.switch_at is not None and index >= self.switch_at:
            raw = self.sends
            return True, (cv2.cvtColor(raw, cv2.COLOR_YUV2BGR_YUYV) if self.convert_rgb else raw)
        jpeg = self.jpegs[index % len(self.jpegs)]
        return True, (cv2.imdecode(jpeg, cv2.IMREAD_COLOR) if self.convert_rgb else jpeg.reshape(1, -1).copy())

    def release(self) -> None:
        self.released = True


@pytest.fixture
def webcam_jpegs(photos) -> list[np.ndarray]:
    frame = cv2.resize(photos["newton"], (640, 480))
    return [encoded(np.roll(frame, 3 * i, axis=1), *SAMPLINGS["4:2:2 (most USB webcams)"]) for i in range(3)]


def camera_on(capture: StandInCapture) -> OpenCVCamera:
    cam = OpenCVCamera(0, CameraConfig(), open_capture=lambda device: capture)
    cam.open()
    return cam


def test_an_mjpg_webcam_on_v4l2_hands_over_its_jpegs_and_they_decode_to_opencvs_frames(webcam_jpegs):
    capture = StandInCapture(webcam_jpegs)
    cam = camera_on(capture)
    assert capture.convert_rgb is False  # asked for the JPEGs undecoded
    frames = [cam.read() for _ in range(4)]
    for i, frame in enumerate(frames):
        assert frame.shape == (480, 640, 3)
        assert np.array_equal(frame, cv2.imdecode(webcam_jpegs[i % 3], cv2.IMREAD_COLOR))
    cam.close()
    assert capture.released


@pytest.mark.parametrize(("backend", "fourcc"), [("MSMF", "MJPG"), ("AVFOUNDATION", "MJPG"), ("V4L2", "YUYV")])
def test_other_backends_and_raw_formats_keep_opencvs_own_decoding(webcam_jpegs, backend, fourcc):
    capture = StandInCapture(webcam_jpegs, backend=backend, fourcc=fourcc)
    cam = camera_on(capture)
    assert capture.convert_rgb is True
    assert np.array_equal(cam.read(), cv2.imdecode(webcam_jpegs[0], cv2.IMREAD_COLOR))


def test_a_driver_that_stops_sending_jpegs_costs_one_bad_frame_then_opencv_decodes(webcam_jpegs, caplog):
    yuyv = np.full((480, 640, 2), 128, np.uint8)
    capture = StandInCapture(webcam_jpegs, sends=yuyv, switch_at=2)
    cam = camera_on(capture)
    with caplog.at_level(logging.WARNING, logger="vcamd.live.capture.webcam"):
        got = [cam.read() for _ in range(4)]
    assert [g.shape for g in got[:2]] == [(480, 640, 3)] * 2
    assert got[2] is NOT_AN_IMAGE  # the reader skips it as a bad frame
    assert got[3].shape == (480, 640, 3) and capture.convert_rgb is True  # OpenCV converts again
    assert sum("not a JPEG" in r.getMessage() for r in caplog.records) == 1


def test_an_opencv_that_decodes_anyway_is_used_as_it_is(webcam_jpegs, caplog):
    capture = StandInCapture(webcam_jpegs, ignores_convert=True)
    cam = camera_on(capture)
    with caplog.at_level(logging.WARNING, logger="vcamd.live.capture.webcam"):
        frames = [cam.read() for _ in range(3)]
    assert all(np.array_equal(f, cv2.imdecode(webcam_jpegs[i], cv2.IMREAD_COLOR)) for i, f in enumerate(frames))
    assert not caplog.records


def claiming_size(data: np.ndarray, width: int, height: int) -> np.ndarray:
    """The JPEG with its frame header (SOF0/SOF2) rewritten to claim width × height."""
    raw = bytearray(data.tobytes())
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = raw.find(marker)
        if at >= 0:
            raw[at + 5 : at + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
            return np.frombuffer(bytes(raw), np.uint8)
    raise AssertionError("no frame header")


def test_a_frame_claiming_a_huge_size_is_refused_before_it_is_allocated(photos):
    """A crafted MJPG file (or a broken driver) whose packet claims 20000×20000: 1.2 GB of pixels
    reserved before the first one is read. It is a bad frame, and nothing of that size is allocated."""
    import tracemalloc

    from vcamd.files.images import MAX_PIXELS

    data = encoded(cv2.resize(photos["newton"], (64, 48)))
    assert decode_jpeg(claiming_size(data, 64, 48)).shape == (48, 64, 3)  # the rewrite itself keeps a valid JPEG
    huge = claiming_size(data, 20000, 20000)
    assert 20000 * 20000 > MAX_PIXELS
    tracemalloc.start()
    try:
        assert decode_jpeg(huge) is NOT_AN_IMAGE
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10_000_000, f"{peak / 1e6:.0f} MB allocated for a refused frame"
