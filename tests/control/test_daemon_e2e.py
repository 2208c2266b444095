"""End to end: the real `vcamd run` daemon driven only through the CLI and its control socket.

The daemon plays a video file like a camera, publishes to the null sink, runs the real SCRFD
detector and the stand-in swapper/recognizer (vcamd.bench.standins), without a tray.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import tomli_w
from support.waiting import wait_for

from vcamd.control.client import ControlClient
from vcamd.control.protocol import DaemonNotRunning

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 30.0  # imports + model sessions on a busy 2-core machine
RELOAD_WITHIN_S = 30.0  # a bound for a hung watcher, not a speed check (the ~2 s the watcher takes is its poll and debounce)


@pytest.fixture(scope="module")
def daemon_files(tmp_path_factory, assets: Path, newton) -> dict[str, Path]:
    from vcamd.bench.clips import write_sliding_clip
    from vcamd.bench.standins import build_recognizer, build_swapper

    d = tmp_path_factory.mktemp("e2e")
    other_face = d / "other_face.png"
    cv2.imwrite(str(other_face), cv2.flip(newton, 1))
    no_face = d / "grey.png"
    cv2.imwrite(str(no_face), np.full((200, 200, 3), 128, np.uint8))
    return {
        "clip": write_sliding_clip(d / "camera.avi", newton, size=(480, 360), fps=15.0, frames=30, face_scale=0.7),
        "swapper": build_swapper(d / "swapper.onnx"),
        "recognizer": build_recognizer(d / "recognizer.onnx"),
        "detector": assets / "models" / "scrfd_500m_kps.onnx",
        "source_face": assets / "images" / "newton.png",
        "other_face": other_face,
        "no_face": no_face,
    }


def config_text(files: dict[str, Path], **overrides: dict) -> str:
    data = {
        "models": {"detector": str(files["detector"]), "swapper": str(files["swapper"]),
                   "recognizer": str(files["recognizer"]), "providers": ["cpu"], "threads": 1},
        "detection": {"size": 320, "track_size": 160},
        "swap": {"source_face": str(files["source_face"]), "source_consent": True},
    }
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    return tomli_w.dumps(data)


def cli(runtime: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(runtime)}
    return subprocess.run([sys.executable, "-m", "vcamd", *args], env=env, capture_output=True, text=True, timeout=60)


def status(runtime: Path) -> dict:
    result = cli(runtime, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def daemon(daemon_files, runtime: Path, short_dir: Path):
    config = short_dir / "config.toml"
    config.write_text(config_text(daemon_files))
    log = (short_dir / "daemon.log").open("w+")
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(runtime)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(daemon_files["clip"]),
         "--loop", "--sink", "null", "--no-tray"],
        env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    client = ControlClient(runtime, timeout_s=5)

    def up() -> bool:
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"the daemon exited with {proc.returncode}:\n{log.read()[-3000:]}")
        return client.is_running()

    try:
        wait_for(up, f"the daemon's control socket in {runtime} (is the ControlServer started by `vcamd run`?)", timeout_s=START_TIMEOUT_S, poll_s=0.2)
        yield proc, config, runtime
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def test_the_daemon_is_driven_through_the_cli(daemon, daemon_files, short_dir):
    proc, config, runtime = daemon

    # Only the user can reach it.
    sock = runtime / "control.sock"
    assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700

    # Frames go out while the models still load in the background (cold start): wait until they
    # are loaded (the providers in use are known) and camera frames flow.
    first = wait_for(lambda: (s := status(runtime))["fps"] > 0 and s["providers"] and s["state"] == "running" and s,
                     "camera frames published with the models loaded", timeout_s=60, poll_s=0.2)
    assert first["enabled"] is True and first["state"] == "running"
    assert first["config_error"] is None
    assert first["source_face"] == str(daemon_files["source_face"])
    assert first["providers"]

    human = cli(runtime, "status")
    assert human.returncode == 0 and "Face swap" in human.stdout and "running" in human.stdout

    assert cli(runtime, "toggle").stdout == "Face swap off (camera passes through)\n"
    assert status(runtime)["enabled"] is False
    assert cli(runtime, "on").returncode == 0
    assert status(runtime)["enabled"] is True

    face = cli(runtime, "set-face", str(daemon_files["other_face"]))
    assert face.returncode == 0, face.stderr
    assert face.stdout == f"Source face: {daemon_files['other_face']}\n"  # the new face, once it is in use
    assert status(runtime)["source_face"] == str(daemon_files["other_face"])
    no_face = cli(runtime, "set-face", str(daemon_files["no_face"]))
    assert no_face.returncode == 2 and "grey.png" in no_face.stderr, no_face.stderr
    assert status(runtime)["source_face"] == str(daemon_files["other_face"])

    assert cli(runtime, "quality", "low_res").returncode == 0
    wait_for(lambda: status(runtime)["level"] == "low_res", "quality locked at low_res", timeout_s=30, poll_s=0.2)
    assert status(runtime)["quality"] == "low_res"
    assert cli(runtime, "quality", "auto").returncode == 0
    wait_for(lambda: status(runtime)["quality"] == "auto", "quality back to automatic", timeout_s=30, poll_s=0.2)

    out = short_dir / "snap.png"
    snap = cli(runtime, "snapshot", str(out))
    assert snap.returncode == 0, snap.stderr
    assert cv2.imread(str(out)).shape == (360, 480, 3)

    # Hot reload: an edit applies by itself; a broken edit keeps the daemon on the last good config.
    config.write_text(config_text(daemon_files, swap={"enabled": False}))
    wait_for(lambda: status(runtime)["enabled"] is False, "the edit [swap] enabled = false applied", timeout_s=RELOAD_WITHIN_S, poll_s=0.2)

    config.write_text(config_text(daemon_files, swap={"enabled": True}, disclosure={"corner": "middle"}))
    broken = wait_for(lambda: status(runtime)["config_error"], "the broken edit reported", timeout_s=RELOAD_WITHIN_S, poll_s=0.2)
    assert "[disclosure] corner = 'middle'" in broken
    assert status(runtime)["enabled"] is False  # still the last good config
    assert proc.poll() is None
    reload = cli(runtime, "reload")
    assert reload.returncode == 2 and "[disclosure] corner = 'middle'" in reload.stderr
    assert "reloaded" not in reload.stdout.lower()

    config.write_text(config_text(daemon_files, swap={"enabled": True}))
    wait_for(lambda: status(runtime)["config_error"] is None, "the fix clears the error", timeout_s=RELOAD_WITHIN_S, poll_s=0.2)
    assert status(runtime)["enabled"] is True

    done = cli(runtime, "quit")
    assert (done.returncode, done.stdout) == (0, "FaceLive Camera stopped\n"), done.stderr
    assert proc.wait(15) == 0
    assert not sock.exists()
    with pytest.raises(DaemonNotRunning):
        ControlClient(runtime).status()


def test_sighup_reloads_the_config_and_the_daemon_runs_on(daemon, daemon_files, short_dir):
    """SIGHUP (`systemctl reload`, `kill -HUP`) used to kill the daemon; now it re-reads the file."""
    import signal

    proc, config, runtime = daemon
    wait_for(lambda: status(runtime)["fps"] > 0, "frames being published", timeout_s=60, poll_s=0.2)
    config.write_text(config_text(daemon_files, swap={"source_face": str(daemon_files["other_face"])}))
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: status(runtime)["source_face"] == str(daemon_files["other_face"]), "the edit applied", timeout_s=RELOAD_WITHIN_S, poll_s=0.2)
    assert proc.poll() is None
    log_text = (short_dir / "daemon.log").read_text()
    assert "reloading the config (SIGHUP)" in log_text
    done = cli(runtime, "quit")
    assert done.returncode == 0, done.stderr
    assert proc.wait(15) == 0


def test_run_applies_an_edited_log_level_while_running(tmp_path, assets):
    # README: edits to the config are applied while the daemon runs, section by section;
    # [runtime] log_level was read once at start.
    import tempfile

    from vcamd.bench.standins import build_recognizer, build_swapper
    from vcamd.control.client import ControlClient

    runtime = Path(tempfile.mkdtemp(prefix="r2-", dir="/tmp"))
    config = tmp_path / "config.toml"
    body = f"""
[models]
detector = "{assets / 'models' / 'scrfd_500m_kps.onnx'}"
recognizer = "{build_recognizer(tmp_path / 'recognizer.onnx')}"
swapper = "{build_swapper(tmp_path / 'swapper.onnx')}"
providers = ["cpu"]
threads = 1
[detection]
size = 320
[swap]
source_face = "{assets / 'images' / 'newton.png'}"
source_consent = true
[camera]
width = 320
height = 240
fps = 10.0
[runtime]
"""
    config.write_text(body + 'log_level = "warning"\n')
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(runtime)}
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", "synthetic",
                                 "--sink", "null", "--no-tray"], stderr=stderr, stdout=subprocess.DEVNULL, env=env)
    client = ControlClient(runtime)
    try:
        deadline = time.monotonic() + 40
        while not client.is_running():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert "config applied" not in log.read_text()
        config.write_text(body + 'log_level = "info"\n')
        deadline = time.monotonic() + 10
        while "config applied: changed runtime" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        client.quit()
        assert proc.wait(timeout=20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
