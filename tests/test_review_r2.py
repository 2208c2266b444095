"""Review R2: user-facing paths that gave a traceback (or broke the daemon) on a bad file or folder.

Each test runs the real CLI as a subprocess (or the real class) against real files in tmp dirs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from vcamd.tray import RecentFaces


def vcamd(*args: object, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcamd", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def one_clear_line(proc: subprocess.CompletedProcess, *names: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("vcamd: error:")]
    assert len(errors) == 1, proc.stderr
    for name in names:
        assert name in errors[0], errors[0]


def test_service_install_into_an_unwritable_config_dir_is_one_line(tmp_path):
    # XDG_CONFIG_HOME is a file: the unit's folder cannot be created.
    blocker = tmp_path / "config-is-a-file"
    blocker.write_text("")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(blocker),
           "XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/no-bus"}
    one_clear_line(vcamd("service", "install", env=env), str(blocker))
    one_clear_line(vcamd("service", "install", "--tray", env=env), str(blocker))


def test_models_pull_into_a_models_dir_that_is_a_file_is_one_line(tmp_path):
    not_a_folder = tmp_path / "models"
    not_a_folder.write_text("I am a file")
    config = tmp_path / "config.toml"
    config.write_text('[models]\ndir = "models"\n')
    for command in (("models", "pull", "buffalo_l"), ("models", "list"), ("models", "verify")):
        proc = vcamd(*command, "--config", config)
        one_clear_line(proc, str(not_a_folder), "[models] dir")
    assert not_a_folder.read_text() == "I am a file"


def test_run_with_a_folder_as_stats_json_fails_before_the_run(tmp_path):
    # Found out only after the run (a traceback, the stats lost) before the fix.
    folder = tmp_path / "stats"
    folder.mkdir()
    proc = vcamd("run", "--stats-json", folder, "--sink", "null", "--source", "synthetic", "--no-tray",
                 "--frames", "1", "--i-have-consent")
    one_clear_line(proc, str(folder), "--stats-json")


def test_recent_faces_never_breaks_on_a_bad_history_file(tmp_path):
    photo = tmp_path / "face.png"
    photo.write_bytes(b"png")
    # The history path is a folder: reading gives an empty list, adding is skipped with a warning.
    blocked = tmp_path / "state" / "recent_faces.json"
    blocked.mkdir(parents=True)
    recent = RecentFaces(blocked)
    assert recent.list() == []
    recent.add(photo)  # must not raise: the recent-faces shortcut list must not stop the daemon
    # The state folder cannot be created (a file in its place).
    (tmp_path / "file").write_text("")
    recent = RecentFaces(tmp_path / "file" / "state" / "recent_faces.json")
    recent.add(photo)
    assert recent.list() == []


def test_recent_faces_file_is_private(tmp_path):
    # It lists which photos of which people the user swapped in: only the user may read it.
    photo = tmp_path / "face.png"
    photo.write_bytes(b"png")
    recent = RecentFaces(tmp_path / "state" / "recent_faces.json")
    recent.add(photo)
    assert recent.list() == [photo.resolve()]
    assert stat.S_IMODE((tmp_path / "state" / "recent_faces.json").stat().st_mode) == 0o600



def service_env(tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_RUNTIME_DIR": str(runtime), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/no-bus"}


def test_service_install_says_the_started_daemon_needs_consent_in_the_config(tmp_path):
    # The installed entry runs `vcamd run` without --i-have-consent: with no consent in the user
    # config it stops at once (exit 2, no restart) — install must say so instead of looking done.
    env = service_env(tmp_path)
    proc = vcamd("service", "install", env=env)
    assert proc.returncode == 0, proc.stderr
    config = tmp_path / "config" / "facelive" / "config.toml"
    assert "source_consent = true" in proc.stdout and str(config) in proc.stdout
    config.parent.mkdir(parents=True)
    config.write_text("[swap]\nsource_consent = true\n")
    proc = vcamd("service", "install", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "source_consent" not in proc.stdout
    config.write_text("[swap]\nsource_consent = maybe\n")
    proc = vcamd("service", "install", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"fix {config}" in proc.stdout and "invalid TOML" in proc.stdout


def test_doctor_fails_a_source_face_that_is_not_a_photo(tmp_path, assets):
    from vcamd import doctor
    from vcamd.config import Config
    from vcamd.doctor import Status

    not_a_photo = tmp_path / "face.jpg"
    not_a_photo.write_text("this is not a JPEG")
    cfg = Config.model_validate({"swap": {"source_face": str(not_a_photo), "source_consent": True}})
    result = doctor.check_source_face(cfg)
    assert result.status is Status.fail, result
    assert str(not_a_photo) in result.detail and "not a readable image" in result.detail
    good = Config.model_validate({"swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True}})
    assert doctor.check_source_face(good).status is Status.ok


def test_doctor_says_a_virtual_camera_device_that_exists_is_not_a_video_device(tmp_path):
    from vcamd import doctor
    from vcamd.config import VirtualCameraConfig
    from vcamd.doctor import Status

    sysfs, module, dev = tmp_path / "class" / "video4linux", tmp_path / "module" / "v4l2loopback", tmp_path / "dev"
    for path in (sysfs / "video10", module, dev):
        path.mkdir(parents=True)
    (sysfs / "video10" / "name").write_text("FaceLive Camera\n")
    (dev / "video10").write_bytes(b"")
    (dev / "null").write_bytes(b"")
    result = doctor.check_virtual_camera(VirtualCameraConfig(device="/dev/null"), tmp_path, dev, platform="linux")
    assert result.status is Status.fail
    assert "does not exist" not in result.detail and "not a video device" in result.detail, result.detail
    assert "/dev/video10" in result.fix and "[virtual_camera] device" in result.fix


def test_control_verbs_with_a_socket_path_too_long_for_af_unix_are_one_line(tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    (deep / "control.sock").write_bytes(b"")
    env = {**os.environ, "VCAMD_RUNTIME_DIR": str(deep)}
    proc = vcamd("status", env=env)
    one_clear_line(proc, str(deep / "control.sock"), "VCAMD_RUNTIME_DIR")


def test_run_applies_an_edited_log_level_while_running(tmp_path, assets):
    # README: edits to the config are applied while the daemon runs, section by section;
    # [runtime] log_level was read once at start.
    import tempfile
    import time

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


def test_bench_refuses_frame_rates_and_counts_it_cannot_measure(assets):
    face = assets / "images" / "newton.png"
    base = ("bench", "--face", face, "--scenarios", "light", "--frames", "30")
    for bad, flag in ((("--fps", "0"), "--fps"), (("--fps", "nan"), "--fps"), (("--fps", "1e9"), "--fps"),
                      (("--scenarios", "inswapper", "--inswapper-frames", "0"), "--inswapper-frames"),
                      (("--threads", "-2"), "--threads")):
        one_clear_line(vcamd(*base, *bad, timeout=30), flag)


def test_bench_refuses_a_json_path_it_could_only_fail_to_write_at_the_end(tmp_path, assets):
    folder = tmp_path / "results"
    folder.mkdir()
    proc = vcamd("bench", "--face", assets / "images" / "newton.png", "--scenarios", "light", "--json", folder, timeout=30)
    one_clear_line(proc, str(folder), "--json")


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


def test_doctor_names_a_camera_video_file_that_does_not_play_as_such(tmp_path):
    from vcamd import doctor
    from vcamd.config import CameraConfig
    from vcamd.doctor import Status

    broken = tmp_path / "clip.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"not really a video " * 100)
    result = doctor.check_camera(CameraConfig(device=str(broken)))
    assert result.status is Status.fail
    assert "not a playable video file" in result.detail and "plug in the webcam" not in result.fix, result


def test_set_face_with_a_folder_says_it_is_a_folder(tmp_path):
    proc = vcamd("set-face", tmp_path)
    one_clear_line(proc, str(tmp_path), "is a folder")


def test_log_file_is_private(tmp_path):
    # The daemon log names the source-face photos and every control request: only the user may read it.
    import logging

    from vcamd.logs import SafeRotatingFileHandler

    path = tmp_path / "vcamd.log"
    handler = SafeRotatingFileHandler(path, maxBytes=200, backupCount=2, encoding="utf-8", delay=True)
    try:
        for i in range(10):  # past maxBytes: the rotated and the new file both stay private
            handler.emit(logging.LogRecord("vcamd", logging.INFO, __file__, 1, "source face /home/u/p%d.jpg" % i, None, None))
    finally:
        handler.close()
    files = sorted(tmp_path.glob("vcamd.log*"))
    assert len(files) >= 2, files
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file


def test_doctor_warns_that_run_refuses_without_consent(assets):
    from vcamd import doctor
    from vcamd.config import Config
    from vcamd.doctor import Status

    cfg = Config.model_validate({"swap": {"source_face": str(assets / "images" / "newton.png")}})
    result = doctor.check_source_face(cfg)
    assert result.status is Status.warn and "source_consent" in result.detail and "source_consent = true" in result.fix
