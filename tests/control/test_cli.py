"""`vcamd status/on/off/...` as real subprocesses against a control server started in the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.cli import one_clear_line, run_vcamd

from vcamd.common.quality import Level
from vcamd.control.server import ControlServer


def vcamd(runtime: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(runtime), "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "vcamd", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def test_no_daemon_is_one_line_and_exit_3(runtime):
    result = vcamd(runtime, "status")
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr == (f"vcamd: error: FaceLive Camera is not running (no control socket at "
                             f"{runtime}/control.sock) — start it with `vcamd run`\n")
    assert vcamd(runtime, "off").returncode == 3


def test_status_json_without_a_daemon_answers_in_json(runtime):
    """A script piping `status --json` into jq got an empty stdout (issue 42): now a JSON answer
    saying the daemon is not running, still exit 3, the one-line error on stderr."""
    result = vcamd(runtime, "status", "--json")
    assert result.returncode == 3
    assert json.loads(result.stdout) == {
        "running": False,
        "error": f"FaceLive Camera is not running (no control socket at {runtime}/control.sock)",
        "fix": "start it with `vcamd run`",
    }
    assert result.stderr.startswith("vcamd: error: FaceLive Camera is not running")


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_status_json(engine, runtime, transport):
    with ControlServer(engine, runtime, transport=transport):
        result = vcamd(runtime, "status", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "running": True,
        "enabled": True,
        "state": "running",
        "level": "full",
        "quality": "auto",
        "fps": 29.97,
        "latency_ms": 41.5,
        "source_face": None,
        "providers": {"scrfd_500m_kps.onnx": "CPUExecutionProvider"},
        "config_error": None,
    }


def test_status_table_is_readable(engine, runtime):
    engine.config_error = "config.toml: [camera] fps = -1: Input should be greater than 0"
    engine.quality = Level.low_res
    engine.latency_ms = {"p50": 41.5, "p95": 80.25}
    engine.extra = {"camera": "live", "frames": {"published": 120, "swapped": 100}}
    with ControlServer(engine, runtime):
        result = vcamd(runtime, "status")
    assert result.returncode == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert "Latency p50 42 ms, p95 80 ms" in lines
    assert "Camera live" in lines
    assert "Frames published 120, swapped 100" in lines
    assert "Face swap on" in lines
    assert "State running" in lines
    assert "Quality low_res (locked by you)" in lines
    assert "Frame rate 30.0 fps" in lines
    assert "Source face (none set)" in lines
    assert "Providers scrfd_500m_kps.onnx: CPUExecutionProvider" in lines
    assert ("Config config.toml: [camera] fps = -1: Input should be greater than 0 "
            "(running on the last good config)") in lines


def test_switch_face_quality_and_reload_verbs(engine, runtime, assets):
    with ControlServer(engine, runtime):
        off = vcamd(runtime, "off")
        assert (off.returncode, off.stdout, engine.enabled) == (0, "Face swap off (camera passes through)\n", False)
        on = vcamd(runtime, "on")
        assert (on.returncode, on.stdout, engine.enabled) == (0, "Face swap on\n", True)
        toggled = vcamd(runtime, "toggle")
        assert (toggled.returncode, engine.enabled) == (0, False)

        # A relative path is the caller's: it reaches the daemon made absolute.
        face = vcamd(runtime, "set-face", "newton.png", cwd=assets / "images")
        assert face.returncode == 0, face.stderr
        assert engine.source_face == assets / "images" / "newton.png"
        assert face.stdout == f"Source face: {assets / 'images' / 'newton.png'}\n"

        missing = vcamd(runtime, "set-face", "/nonexistent/face.png")
        assert missing.returncode == 2
        assert "source face /nonexistent/face.png does not exist" in missing.stderr

        not_image = vcamd(runtime, "set-face", str(Path(__file__)))
        assert not_image.returncode == 2
        assert not_image.stderr.startswith("vcamd: error: source face ")
        assert "is not a readable image — use a PNG or JPEG photo" in not_image.stderr
        assert engine.source_face == assets / "images" / "newton.png"  # unchanged

        locked = vcamd(runtime, "quality", "frame_skip")
        assert (locked.returncode, locked.stdout, engine.quality) == (0, "Quality locked at frame_skip\n",
                                                                      Level.frame_skip)
        auto = vcamd(runtime, "quality", "auto")
        assert (auto.returncode, engine.quality) == (0, None)
        bad = vcamd(runtime, "quality", "ultra")
        assert bad.returncode == 2 and "invalid choice: 'ultra'" in bad.stderr

        reload = vcamd(runtime, "reload")
        assert (reload.returncode, reload.stdout, engine.reloads) == (0, "Config reloaded\n", 1)
        engine.reload_problem = "[swap] face_selection = 'everyone': Input should be 'largest', 'all' or 'reference'"
        broken = vcamd(runtime, "reload")
        assert broken.returncode == 2
        assert broken.stderr == ("vcamd: error: /tmp/config.toml: [swap] face_selection = 'everyone': "
                                 "Input should be 'largest', 'all' or 'reference'\n")


def test_snapshot_writes_the_current_output(engine, runtime, short_dir, newton):
    out = short_dir / "shot.png"
    with ControlServer(engine, runtime):
        result = vcamd(runtime, "snapshot", str(out))
    assert result.returncode == 0, result.stderr
    height, width = newton.shape[:2]
    assert result.stdout == f"Saved {out} ({width}×{height})\n"
    assert np.array_equal(cv2.imread(str(out)), newton)
    assert sorted(p.name for p in short_dir.iterdir()) == ["rt", "shot.png"]  # no temporary left


def test_quit_waits_until_the_daemon_is_gone(engine, runtime):
    srv = ControlServer(engine, runtime)

    class StoppingEngine(type(engine)):
        def request_quit(self) -> None:
            super().request_quit()
            # Like the daemon: stop a moment later, on another thread.
            threading.Timer(0.3, srv.close).start()

    engine.__class__ = StoppingEngine
    srv.start()
    result = vcamd(runtime, "quit")
    assert (result.returncode, result.stdout) == (0, "FaceLive Camera stopped\n"), result.stderr
    assert engine.quit_requested.is_set()
    assert not (runtime / "control.sock").exists()


def test_set_face_prints_which_face_of_a_group_photo_was_taken(runtime, assets):
    from support.fakes import FakeEngine

    class GroupPhotoEngine(FakeEngine):
        def set_source_face(self, path: Path) -> dict:  # the pick as LiveEngine answers it
            super().set_source_face(path)
            return {**self.status(), "source_face": str(path), "source_face_pick": "the largest of the 29 faces in the photo"}

    group = assets / "images" / "solvay_conference_1927.png"
    with ControlServer(GroupPhotoEngine(), runtime):
        done = vcamd(runtime, "set-face", str(group))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Source face: {group}\n  the largest of the 29 faces in the photo\n"


def test_status_table_with_a_plain_latency_and_no_quality_key(capsys):
    from vcamd.commands.control import print_status

    print_status({"enabled": False, "state": "camera offline", "level": "frame_skip", "fps": 0.0,
                  "latency_ms": 12.4, "source_face": "/faces/[me].png", "providers": ["CPUExecutionProvider"],
                  "config_error": None})
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        "Face swap off",
        "State camera offline",
        "Quality frame_skip",
        "Frame rate 0.0 fps",
        "Latency 12 ms",
        "Source face /faces/[me].png",  # brackets are text, not rich markup
        "Providers CPUExecutionProvider",
        "Config ok",
    ]


def test_status_table_says_what_swapping_needs_each_with_its_fix(capsys, monkeypatch):
    from vcamd.commands.control import print_status

    monkeypatch.setenv("COLUMNS", "400")  # one row per need, not wrapped
    needs = [
        {"topic": "models", "label": "the face models", "what": "1 model file missing: /m/det_10g.onnx (buffalo_l)",
         "fix": "run `vcamd models pull buffalo_l`, or copy it in by hand: `vcamd models list` says where each file comes from and where it goes"},
        {"topic": "face", "label": "a source face", "what": "no source face is set", "fix": "`vcamd set-face PHOTO`"},
    ]
    print_status({"enabled": False, "state": "running", "level": "full", "fps": 30.0, "latency_ms": 1.0, "source_face": None,
                  "providers": {}, "config_error": None, "swap_needs": needs})
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert lines[:3] == [
        "Face swap off (it needs the face models, a source face)",
        "needs 1 model file missing: /m/det_10g.onnx (buffalo_l) — run `vcamd models pull buffalo_l`, or copy it in by hand: "
        "`vcamd models list` says where each file comes from and where it goes",
        "needs no source face is set — `vcamd set-face PHOTO`",
    ]
    assert not any("Swap needs" in line for line in lines)  # shown once, not again as a raw key


def test_status_table_names_no_gpu_and_keeps_the_control_page_address_whole(capsys, monkeypatch):
    from vcamd.commands.control import print_status

    monkeypatch.setenv("COLUMNS", "80")
    url = "http://127.0.0.1:8765/?token=" + "k" * 43
    print_status({"enabled": True, "state": "running", "level": "full", "fps": 30.0, "latency_ms": 20.0,
                  "source_face": "/faces/me.png", "providers": {}, "config_error": None, "gpu": None,
                  "queue_depth": 0, "panel_url": url})
    out = capsys.readouterr().out
    assert "None" not in out and "Gpu" not in out
    assert f"Control page: {url}\n" in out  # whole, on one line, even past 80 columns
    assert "Queue depth 0" in [" ".join(line.split()) for line in out.splitlines()]
    print_status({"enabled": True, "state": "running", "gpu": {"util": 40}})
    assert "GPU util 40" in [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]


def test_without_the_override_the_user_runtime_dir_is_used(short_dir):
    """The same folder with and without XDG_RUNTIME_DIR (`config.folders.user_runtime_dir`), in one line."""
    from vcamd.config.folders import user_runtime_dir

    env = {k: v for k, v in os.environ.items() if k not in ("VCAMD_RUNTIME_DIR", "XDG_RUNTIME_DIR")}
    with_xdg = subprocess.run([sys.executable, "-m", "vcamd", "status"], env={**env, "XDG_RUNTIME_DIR": str(short_dir)},
                              capture_output=True, text=True, timeout=60)
    without = subprocess.run([sys.executable, "-m", "vcamd", "status"], env=env, capture_output=True, text=True,
                             timeout=60)
    for proc in (with_xdg, without):
        assert proc.returncode == 3
        assert proc.stderr.splitlines() == [
            f"vcamd: error: FaceLive Camera is not running (no control socket at {user_runtime_dir() / 'control.sock'}) "
            "— start it with `vcamd run`"], proc.stderr


def test_control_verbs_with_a_socket_path_too_long_for_af_unix_are_one_line(tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    (deep / "control.sock").write_bytes(b"")
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(deep)}
    proc = run_vcamd("status", env=env)
    one_clear_line(proc, str(deep / "control.sock"), "VCAMD_RUNTIME_DIR")


def test_set_face_with_a_folder_says_it_is_a_folder(tmp_path):
    proc = run_vcamd("set-face", tmp_path)
    one_clear_line(proc, str(tmp_path), "is a folder")


def test_control_verbs_read_like_the_other_commands():
    """`vcamd --help` lists every command in lower case; each verb's own --help opens with a
    sentence (it read "turn face swapping on. Talks to …", issue 42)."""
    from vcamd.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    listed = {choice.dest: choice.help for choice in commands._choices_actions}
    for name in ("status", "on", "off", "toggle", "reload", "set-face", "quality", "snapshot", "quit"):
        description = commands.choices[name].description
        assert description[0].isupper() and description.endswith("Exit 3 when no daemon is running."), (name, description)
        assert listed[name][0].islower(), (name, listed[name])
    assert all(text[0].islower() for text in listed.values() if text), listed


def test_status_table_says_which_face_of_a_group_photo_was_taken(capsys):
    """Issue 36 item 5: only set-face's own answer said it; `vcamd status` showed the path alone."""
    from vcamd.commands.control import print_status

    pick = "the largest of the 29 faces in the photo (61×80 px at x=1107, y=190); crop the photo to one face to choose another"
    print_status({"enabled": True, "state": "running", "level": "full", "fps": 30.0, "latency_ms": 20.0,
                  "source_face": "/faces/solvay.png", "source_face_pick": pick, "providers": {}, "config_error": None})
    out = " ".join(capsys.readouterr().out.split())
    assert "Source face /faces/solvay.png the largest of the 29 faces in the photo (61×80 px at x=1107, y=190)" in out
    assert "Source face pick" not in out  # one row, not a raw key


@pytest.mark.parametrize("name, why", [
    ("n" * 300 + ".png", "is too long for a file name"),
    ("photo.png/inside", "a part of the path is a file, not a folder"),
])
def test_set_face_with_an_impossible_path_is_one_line(tmp_path, name, why):
    """Issue 36 item 5: a name over the file-name limit ended in an OSError traceback."""
    (tmp_path / "photo.png").write_bytes(b"png")
    proc = run_vcamd("set-face", tmp_path / name)
    one_clear_line(proc, why)


def test_a_set_face_request_with_a_nul_byte_or_a_long_name_is_an_error_line_not_an_internal_error(runtime, tmp_path):
    """Over the socket (a JSON string may hold \\u0000): "internal error: ValueError: embedded null
    byte" before, and "OSError: File name too long" for a 300-byte name."""
    from support.fakes import FakeEngine

    from vcamd.control.client import ControlClient
    from vcamd.control.protocol import ControlError

    with ControlServer(FakeEngine(), runtime):
        client = ControlClient(runtime)
        for path, why in [(f"{tmp_path}/a\0b.png", "holds a NUL byte"), (f"{tmp_path}/{'n' * 300}.png", "too long for a file name")]:
            with pytest.raises(ControlError) as err:
                client.request("set_face", {"path": path})
            assert why in str(err.value) and "internal error" not in str(err.value), str(err.value)
        assert client.status()["state"] == "running"
