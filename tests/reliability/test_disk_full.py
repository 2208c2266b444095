"""A disk that fills up: a model pull (a clear ModelError, no half file under the final name, a
later pull completes once there is room), a recording, `vcamd swap`'s output, an upload to the
control page (issue 36 item 3: each one clear error naming the file and the disk, nothing
incomplete under the final name). The disk is a real 256 KiB tmpfs (needs root and mount
permission; skipped cleanly otherwise)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.configs import daemon_config, swap_config
from support.video import read_video

from vcamd.common.errors import ModelError
from vcamd.modelstore.store import ModelStore

PAYLOAD = os.urandom(1_000_000)


def test_pull_onto_a_full_disk_fails_clearly_and_resumes_later(tiny_disk: Path, file_server) -> None:
    manifest = {
        "models": {
            "big": {
                "role": "swapper", "file": "big.onnx", "size": len(PAYLOAD),
                "sha256": hashlib.sha256(PAYLOAD).hexdigest(), "license": "test",
                "url": "https://models.example.invalid/big.onnx",
            }
        }
    }
    file_server.files["/big.onnx"] = PAYLOAD
    models = tiny_disk / "models"
    store = ModelStore(models, mirror=file_server.url, manifest=manifest)
    with pytest.raises(ModelError) as info:
        store.pull(["big"], progress=False)
    message = str(info.value)
    assert "big" in message and ("space" in message or "No space" in message), message
    assert not (models / "big.onnx").exists(), "a partial download must never sit under the final name"

    # The fault clears: the disk grows. The next pull completes and verifies.
    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_disk)], check=True)
    [result] = store.pull(["big"], progress=False)
    assert result.action == "downloaded"
    assert (models / "big.onnx").read_bytes() == PAYLOAD
    assert [r.status for r in store.verify(["big"])] == ["ok"]


def test_verify_on_a_full_disk_reports_instead_of_crashing(tiny_disk: Path) -> None:
    # verify() records what it checked in vcamd-models.json; on a full disk that write fails.
    # The hash results are still good to report: only a ModelError (or the results) may come out.
    data = b"model" * 1000
    models = tiny_disk / "models"
    models.mkdir()
    (models / "m.onnx").write_bytes(data)
    manifest = {"models": {"m": {"role": "swapper", "file": "m.onnx", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                 "license": "test", "url": "https://models.example.invalid/m.onnx"}}}
    filler = tiny_disk / "filler"
    with filler.open("wb") as out:  # fill the disk to the last byte
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    store = ModelStore(models, manifest=manifest)
    try:
        results = store.verify(["m"])
    except ModelError as err:
        assert "vcamd-models.json" in str(err) or "space" in str(err), str(err)
    else:
        assert [r.status for r in results] == ["ok"]


# ---- video outputs and the data folder on a full disk (issue 36 item 3) ----------------------------


def noise_frames(count: int, size: tuple[int, int] = (320, 240)):
    """Frames that do not compress: a 256 KiB disk fills within a few of them."""
    rng = np.random.default_rng(36)
    for _ in range(count):
        yield rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "lost+found")


def test_a_recording_onto_a_full_disk_is_an_error_and_leaves_nothing(tiny_disk: Path, caplog) -> None:
    """`--sink file:` on a full disk left an unplayable out.mp4 and said nothing (OpenCV only warns).
    Now: no file under the name, no temporary, and `failure` (what `vcamd run` exits with) names the
    file and the disk; the frames after it are dropped without blocking."""
    from vcamd.sinks.file import FileSink

    caplog.set_level("ERROR", logger="vcamd.sinks.file")
    out = tiny_disk / "out.mp4"
    sink = FileSink(out, 320, 240, 30.0)
    sink.open()
    for frame in noise_frames(90):
        sink.send(frame)
    sink.close()
    assert not out.exists() and leftovers(tiny_disk) == []
    message = str(sink.failure)
    assert f"--sink file:{out}" in message and f"the disk at {tiny_disk}" in message and "is full" in message, message
    assert sink.frames_sent == 90
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 1  # said once, when it happened


def test_a_recording_that_fits_is_kept_whole(tiny_disk: Path) -> None:
    from vcamd.sinks.file import FileSink

    out = tiny_disk / "small.mp4"
    sink = FileSink(out, 64, 48, 30.0)
    sink.open()
    for frame in noise_frames(3, (64, 48)):
        sink.send(frame)
    sink.close()
    assert sink.failure is None and leftovers(tiny_disk) == ["small.mp4"]
    assert len(read_video(out)) == 3


def noise_video(path: Path, frames: int = 60) -> Path:
    """A camera clip whose frames do not compress (FFV1: the input itself is lossless and small enough)."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"FFV1"), 15.0, (320, 240))
    assert writer.isOpened()
    for frame in noise_frames(frames):
        writer.write(frame)
    writer.release()
    return path


@pytest.mark.slow
def test_vcamd_run_recording_onto_a_full_disk_exits_with_one_line(tiny_disk: Path, tmp_path: Path, assets: Path,
                                                                   standin_dir: Path, vcamd_cli, refused) -> None:
    """Before: exit 0, "published 900 frames", and an unplayable out.mp4."""
    config = daemon_config(tmp_path, assets, standin_dir)
    out = tiny_disk / "out.mp4"
    fill(tiny_disk / "filler", leave=48 * 1024)  # what is published while the face is covered compresses well
    result = vcamd_cli("run", "--config", config, "--source", noise_video(tmp_path / "camera.avi"), "--loop",
                       "--sink", f"file:{out}", "--frames", "120", "--no-tray", timeout=180)
    line = refused(result, f"--sink file:{out}", f"the disk at {tiny_disk}", "is full")
    assert result.returncode == 2, line
    assert not out.exists() and leftovers(tiny_disk) == ["filler"]
    assert result.stderr.count("Failed to write frame") <= 3, result.stderr[-2000:]  # stopped at once, no flood


def noisy_face_video(path: Path, image: np.ndarray, frames: int = 40) -> Path:
    """The photo, with noise that does not compress, as a video: the disk fills within a few frames."""
    rng = np.random.default_rng(7)
    height, width = image.shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"FFV1"), 12.0, (width, height))
    assert writer.isOpened()
    for _ in range(frames):
        noise = rng.integers(-25, 26, image.shape, dtype=np.int16)
        writer.write(np.clip(image.astype(np.int16) + noise, 0, 255).astype(np.uint8))
    writer.release()
    return path


@pytest.mark.slow
def test_vcamd_swap_of_a_video_onto_a_full_disk_exits_with_one_line(tiny_disk: Path, tmp_path: Path, standins,
                                                                    assets: Path, newton, vcamd_cli, refused) -> None:
    """Before: exit 0 ("150 of 150"), and an unplayable output under the final name."""
    config = swap_config(tmp_path, standins)
    video = noisy_face_video(tmp_path / "in.avi", newton)
    out = tiny_disk / "out.mp4"
    result = vcamd_cli("swap", "--config", config, "--face", assets / "images" / "newton.png", "--input", video,
                       "--output", out, timeout=180)
    line = refused(result, f"output {out}", f"the disk at {tiny_disk}", "is full")
    assert result.returncode == 2, line
    assert not out.exists() and leftovers(tiny_disk) == []
    assert result.stderr.count("Failed to write frame") <= 3, result.stderr[-2000:]


def test_vcamd_swap_of_a_photo_onto_a_full_disk_exits_with_one_line(tiny_disk: Path, tmp_path: Path, standins,
                                                                    assets: Path, vcamd_cli, refused) -> None:
    fill(tiny_disk / "filler")
    out = tiny_disk / "out.png"
    result = vcamd_cli("swap", "--config", swap_config(tmp_path, standins), "--face", assets / "images" / "newton.png",
                       "--input", assets / "images" / "newton.png", "--output", out, timeout=120)
    line = refused(result, f"output {out}", f"the disk at {tiny_disk}", "is full")
    assert result.returncode == 2, line
    assert leftovers(tiny_disk) == ["filler"]


def fill(path: Path, leave: int = 0) -> None:
    """Fill the disk holding `path` to the last byte, then give back `leave` bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
        os.close(fd)
