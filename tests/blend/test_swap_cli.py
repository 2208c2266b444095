"""`vcamd swap` end to end, as a subprocess, with stand-in models in a temp dir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.badge import badge_box


def _write_config(folder: Path, standins, *, consent: bool = True, badge: bool = True) -> Path:  # type: ignore[no-untyped-def]
    path = folder / "config.toml"
    path.write_text(
        f"""
[models]
detector = "{standins.detector}"
recognizer = "{standins.recognizer}"
swapper = "{standins.swapper}"
enhancer = "{standins.enhancer}"
providers = ["cpu"]
threads = 1

[swap]
source_consent = {str(consent).lower()}

[disclosure]
badge = {str(badge).lower()}
corner = "bottom-right"
""",
        encoding="utf-8",
    )
    return path


def _vcamd(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vcamd", *map(str, args)], capture_output=True, text=True, timeout=120)


def _make_video(path: Path, image: np.ndarray, frames: int = 20, fps: float = 12.0) -> None:
    """Newton sliding right and down, ~3 px per frame."""
    height, width = image.shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    assert writer.isOpened()
    for i in range(frames):
        shift = np.float32([[1, 0, 3 * i - 30], [0, 1, i - 10]])
        writer.write(cv2.warpAffine(image, shift, (width, height), borderMode=cv2.BORDER_REFLECT))
    writer.release()


def test_swap_a_photo(tmp_path: Path, standins, assets: Path, newton, newton_face) -> None:  # type: ignore[no-untyped-def]
    config = _write_config(tmp_path, standins)
    out = tmp_path / "out.png"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "--input", assets / "images" / "newton.png", "--output", out)
    assert done.returncode == 0, done.stderr
    assert "swapped 1 face(s)" in done.stdout
    result = cv2.imread(str(out))
    assert result.shape == newton.shape
    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    assert np.abs(result[y1:y2, x1:x2].astype(np.int16) - newton[y1:y2, x1:x2]).mean() > 20
    badge = badge_box(newton.shape, "AI-altered", "bottom-right")
    assert (result[badge.y0 : badge.y1, badge.x0 : badge.x1] != newton[badge.y0 : badge.y1, badge.x0 : badge.x1]).any()
    assert np.array_equal(result[:50, :200], newton[:50, :200])  # far from the face and the badge


def test_swap_a_video_keeps_frames_fps_and_size(tmp_path: Path, standins, assets: Path, newton) -> None:  # type: ignore[no-untyped-def]
    config = _write_config(tmp_path, standins, badge=False)
    source = tmp_path / "in.mp4"
    _make_video(source, newton)
    out = tmp_path / "out.mp4"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", out)
    assert done.returncode == 0, done.stderr
    assert "in 20 of 20 frame(s)" in done.stdout
    original, swapped = cv2.VideoCapture(str(source)), cv2.VideoCapture(str(out))
    assert swapped.get(cv2.CAP_PROP_FPS) == pytest.approx(12.0)
    count = 0
    while True:
        ok_a, a = original.read()
        ok_b, b = swapped.read()
        assert ok_a == ok_b
        if not ok_a:
            break
        count += 1
        assert a.shape == b.shape
        assert np.abs(a.astype(np.int16) - b).mean() > 1  # the face changed in every frame
    assert count == 20
    assert not list(tmp_path.glob(".out.partial-*")), "the temporary file is renamed into place"


def test_refuses_without_consent(tmp_path: Path, standins, assets: Path) -> None:  # type: ignore[no-untyped-def]
    config = _write_config(tmp_path, standins, consent=False)
    out = tmp_path / "out.png"
    args = ("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", assets / "images" / "newton.png", "-o", out)
    done = _vcamd(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "consent" in done.stderr and "--i-have-consent" in done.stderr
    assert not out.exists()
    assert _vcamd(*args, "--i-have-consent").returncode == 0
    assert out.exists()


@pytest.mark.parametrize(
    ("make_input", "output_name", "expected"),
    [
        (lambda d: d / "missing.png", "out.png", "does not exist"),
        (lambda d: (d / "notes.txt").write_text("hello") and d / "notes.txt", "out.png", "not a photo or video file"),
        (lambda d: (d / "fake.png").write_text("not a png") and d / "fake.png", "out.png", "not a readable image"),
        (lambda d: (d / "fake.mp4").write_bytes(b"\0" * 4096) and d / "fake.mp4", "out.mp4", "not a readable video"),
        (lambda d: d, "out.png", "not a file"),
        (lambda d: Path("NEWTON"), "missing_dir/out.png", "folder"),
        (lambda d: Path("NEWTON"), "out.mp4", "a photo is written as a photo"),
    ],
    ids=["missing", "text-file", "corrupt-png", "corrupt-mp4", "folder", "no-output-dir", "photo-to-video"],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, standins, assets: Path, make_input, output_name: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    config = _write_config(tmp_path, standins)
    source = make_input(tmp_path)
    if source == Path("NEWTON"):
        source = assets / "images" / "newton.png"
    done = _vcamd("swap", "--config", config, "--face", assets / "images" / "newton.png", "-i", source, "-o", tmp_path / output_name)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("vcamd: error:") and done.stderr.count("\n") == 1, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
