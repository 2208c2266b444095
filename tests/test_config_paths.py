"""Paths in a config file are taken relative to that file, whoever starts the daemon from wherever."""

from __future__ import annotations

from pathlib import Path

import pytest

from vcamd.config import load_config
from vcamd.errors import ConfigError


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "config.toml").write_text(
        '[models]\ndir = "weights"\ndetector = "det/scrfd.onnx"\nswapper = "inswapper_128_fp16"\nrecognizer = "/abs/rec.onnx"\n'
        '[swap]\nsource_face = "faces/me.jpg"\n'
    )
    cfg, path = load_config(folder / "config.toml")
    assert path == folder / "config.toml"
    assert cfg.models.dir == folder / "weights"
    assert cfg.models.detector == str(folder / "det" / "scrfd.onnx")
    assert cfg.models.swapper == "inswapper_128_fp16"  # a manifest name stays a name
    assert cfg.models.recognizer == "/abs/rec.onnx"
    assert cfg.swap.source_face == folder / "faces" / "me.jpg"


def test_unknown_section_and_key_are_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("[cmaera]\nfps = 30\n[camera]\nfsp = 30\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.toml")
    problems = info.value.problems
    assert any(p.startswith("[cmaera]: unknown section") for p in problems), problems
    assert any(p.startswith("[camera] fsp: unknown key") for p in problems), problems


def test_a_relative_video_file_as_camera_device_is_taken_from_the_config_folder(tmp_path):
    # config.example.toml: "Relative paths are relative to this file" — [camera] device can be a
    # video file; a daemon started by systemd (working dir: home) would look elsewhere.
    from vcamd.config import load_config

    folder = tmp_path / "cfg"
    folder.mkdir()
    config = folder / "config.toml"
    config.write_text('[camera]\ndevice = "clips/cam.avi"\n')
    cfg, _ = load_config(config)
    assert cfg.camera.device == str(folder / "clips" / "cam.avi")
    for kept in ("0", "12", "synthetic", "/dev/video0", "/abs/clip.mp4"):
        config.write_text(f'[camera]\ndevice = "{kept}"\n')
        assert load_config(config)[0].camera.device == kept
