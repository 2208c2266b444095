"""`vcamd faces` as a real subprocess, with a config file naming a real detector."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

VCAMD = [sys.executable, "-m", "vcamd"]


@pytest.fixture(scope="module")
def config_file(tmp_path_factory, models_dir: Path) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    path.write_text(f'[models]\ndetector = "{models_dir / "scrfd_500m_kps.onnx"}"\nproviders = ["cpu"]\n\n[detection]\nsize = 640\nthreshold = 0.5\n')
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*VCAMD, *args], capture_output=True, text=True, timeout=120)


def test_json_lists_faces_left_to_right(assets, config_file):
    result = _run("faces", str(assets / "images" / "solvay_conference_1927.png"), "--config", str(config_file), "--json")
    assert result.returncode == 0, result.stderr
    faces = json.loads(result.stdout)["faces"]
    assert len(faces) == 29
    assert [f["box"][0] for f in faces] == sorted(f["box"][0] for f in faces)
    for face in faces:
        assert len(face["box"]) == 4 and 0.5 <= face["score"] <= 1.0
        assert len(face["kps"]) == 5 and all(len(p) == 2 for p in face["kps"])


def test_table_output(assets, config_file):
    result = _run("faces", str(assets / "images" / "newton.png"), "--config", str(config_file))
    assert result.returncode == 0, result.stderr
    assert "1 face(s)" in result.stdout and "scrfd_500m_kps.onnx" in result.stdout and "left eye" in result.stdout


def test_unreadable_image_is_one_line_exit_2(tmp_path, config_file):
    bad = tmp_path / "photo.png"
    bad.write_text("not a png")
    result = _run("faces", str(bad), "--config", str(config_file), "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "photo.png" in lines[0] and "not a readable image" in lines[0]


def test_missing_detector_is_one_line_exit_2(assets, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[models]\ndetector = "{tmp_path / "nope.onnx"}"\n')
    result = _run("faces", str(assets / "images" / "newton.png"), "--config", str(cfg))
    assert result.returncode == 2
    assert "nope.onnx" in result.stderr and "Traceback" not in result.stderr


def test_an_export_with_shapes_fixed_inside_finds_the_faces_at_its_own_shape(assets, tmp_path, models_dir: Path):
    """A third-party SCRFD export whose graph fixes its 640² sizes inside (issue: "ONNX Runtime
    could not create a session … Incompatible dimensions"): the same 29 faces as the original
    export, and one warning saying it runs at its own input shape."""
    from support.scrfd_exports import fixed_inside

    export = fixed_inside(models_dir / "scrfd_2.5g_kps.onnx", tmp_path / "third_party_scrfd.onnx")
    found = {}
    for name, model in (("export", export), ("original", models_dir / "scrfd_2.5g_kps.onnx")):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f'[models]\ndetector = "{model}"\nproviders = ["cpu"]\n')
        result = _run("faces", str(assets / "images" / "solvay_conference_1927.png"), "--config", str(cfg), "--json")
        assert result.returncode == 0, result.stderr
        found[name] = json.loads(result.stdout)["faces"]
        if name == "export":
            warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
            assert len(warnings) == 1 and "third_party_scrfd.onnx: runs at its own input shape 640×640 only" in warnings[0], result.stderr
            assert "Incompatible dimensions" in warnings[0]
    assert len(found["export"]) == len(found["original"]) == 29
    for ours, original in zip(found["export"], found["original"]):
        assert max(abs(a - b) for a, b in zip(ours["box"], original["box"])) < 0.02 * (original["box"][2] - original["box"][0])
