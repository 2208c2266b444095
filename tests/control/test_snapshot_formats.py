"""`vcamd snapshot OUT`: the file's bytes are in the format its extension names (issue 12, item 4).

Before, every snapshot was PNG bytes whatever the name, so `shot.jpg` was a PNG that some viewers
and upload forms refuse. Run as a real subprocess against a control server started in the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.control.server import ControlServer


def vcamd(runtime: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(runtime), "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "vcamd", *args], env=env, capture_output=True, text=True, timeout=60)

SIGNATURES = {
    "png": lambda data: data.startswith(b"\x89PNG\r\n\x1a\n"),
    "jpeg": lambda data: data.startswith(b"\xff\xd8\xff"),
    "webp": lambda data: data[:4] == b"RIFF" and data[8:12] == b"WEBP",
}


@pytest.mark.parametrize(
    ("name", "kind"),
    [("shot.png", "png"), ("shot.jpg", "jpeg"), ("shot.JPEG", "jpeg"), ("shot.webp", "webp")],
)
def test_snapshot_is_encoded_by_its_extension(engine, runtime, short_dir, newton, name, kind):
    out = short_dir / name
    with ControlServer(engine, runtime):
        result = vcamd(runtime, "snapshot", str(out))
    assert result.returncode == 0, result.stderr
    height, width = newton.shape[:2]
    assert result.stdout == f"Saved {out} ({width}×{height})\n"
    data = out.read_bytes()
    assert SIGNATURES[kind](data), data[:16]
    assert [k for k, looks_like in SIGNATURES.items() if looks_like(data)] == [kind]
    picture = cv2.imread(str(out))
    assert picture.shape == newton.shape
    # Lossless for PNG; JPEG/WebP at quality 95 stay close to the frame.
    error = np.abs(picture.astype(np.int16) - newton).mean()
    assert error == 0 if kind == "png" else error < 3


@pytest.mark.parametrize("name", ["shot.gif", "shot"])
def test_unknown_extension_is_refused_before_asking_the_daemon(runtime, short_dir, name):
    out = short_dir / name
    result = vcamd(runtime, "snapshot", str(out))  # no daemon: the name is checked first (exit 2, not 3)
    assert result.returncode == 2
    assert result.stderr.startswith(f"vcamd: error: cannot tell the image format of {out}")
    assert ".png, .jpg, .jpeg, .webp" in result.stderr and result.stderr.count("\n") == 1
    assert not out.exists()
