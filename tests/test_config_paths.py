"""Paths in a config file are taken relative to that file, whoever starts the daemon from wherever."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from vcamd.common.errors import ConfigError
from vcamd.config.reading import load_config


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
    from vcamd.config.reading import load_config

    folder = tmp_path / "cfg"
    folder.mkdir()
    config = folder / "config.toml"
    config.write_text('[camera]\ndevice = "clips/cam.avi"\n')
    cfg, _ = load_config(config)
    assert cfg.camera.device == str(folder / "clips" / "cam.avi")
    for kept in ("0", "12", "synthetic", "/dev/video0", "/abs/clip.mp4"):
        config.write_text(f'[camera]\ndevice = "{kept}"\n')
        assert load_config(config)[0].camera.device == kept


# ---- the runtime folder: one rule, whatever the environment ----------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the rule for Linux")
def test_the_runtime_folder_depends_on_the_user_not_on_xdg_runtime_dir(tmp_path: Path, monkeypatch) -> None:
    from vcamd.config.folders import user_runtime_dir

    uid = os.geteuid()
    run_user, shared_tmp = tmp_path / "run-user", tmp_path / "tmp"
    run_user.mkdir()
    shared_tmp.mkdir()
    rule = lambda: user_runtime_dir(uid=uid, run_user=run_user, tmp=shared_tmp)  # noqa: E731
    # No session folder (cron, su, a container): the private fallback, with or without XDG_RUNTIME_DIR.
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    without = rule()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "elsewhere"))
    assert rule() == without == shared_tmp / f"vcamd-{uid}"
    # logind's folder, private: used by every environment alike.
    session = run_user / str(uid)
    session.mkdir(mode=0o755)
    assert rule() == without, "a session folder others can enter is not used"
    session.chmod(0o700)
    assert rule() == session / "facelive"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert rule() == session / "facelive"


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0, reason="chown needs root")
def test_a_planted_runtime_folder_is_refused(tmp_path: Path) -> None:
    from vcamd.common.errors import VcamdError
    from vcamd.config.folders import user_runtime_dir

    uid = os.geteuid()
    planted = tmp_path / f"vcamd-{uid}"
    planted.symlink_to(tmp_path)
    with pytest.raises(VcamdError, match="not a folder of yours") as caught:
        user_runtime_dir(uid=uid, run_user=tmp_path / "none", tmp=tmp_path)
    assert "VCAMD_RUNTIME_DIR" in caught.value.fix
    planted.unlink()
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    with pytest.raises(VcamdError, match="not a folder of yours"):
        user_runtime_dir(uid=uid, run_user=tmp_path / "none", tmp=tmp_path)
