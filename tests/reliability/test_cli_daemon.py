"""The real `vcamd` CLI as a subprocess: bad videos and bad source faces refused in one line;
the running daemon listens on loopback only; a full disk under the log file does not stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.configs import daemon_config


@pytest.fixture
def not_a_video(tmp_path: Path) -> Path:
    path = tmp_path / "notavideo.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"this is not really a video " * 200)
    return path


def test_swap_refuses_a_file_that_is_not_a_video(tmp_path, assets, standin_dir, vcamd_cli, refused, not_a_video) -> None:
    config = daemon_config(tmp_path, assets, standin_dir)
    result = vcamd_cli("swap", "--config", config, "--input", not_a_video, "--output", tmp_path / "out.mp4", "--i-have-consent")
    refused(result, "notavideo.mp4")
    assert not (tmp_path / "out.mp4").exists() or (tmp_path / "out.mp4").stat().st_size == 0


def test_run_refuses_a_file_that_is_not_a_video(tmp_path, assets, standin_dir, vcamd_cli, refused, not_a_video) -> None:
    config = daemon_config(tmp_path, assets, standin_dir)
    result = vcamd_cli("run", "--config", config, "--source", not_a_video, "--sink", "null", "--frames", "5", "--no-tray", timeout=90)
    refused(result, "notavideo.mp4")


@pytest.mark.parametrize("kind", ["zero-size", "not-an-image", "huge-header", "animated", "missing"])
def test_swap_refuses_bad_source_faces(tmp_path, assets, standin_dir, vcamd_cli, refused, bad_images, kind: str) -> None:
    config = daemon_config(tmp_path, assets, standin_dir)
    face = bad_images[kind]
    result = vcamd_cli(
        "swap", "--config", config, "--face", face, "--input", assets / "images" / "newton.png",
        "--output", tmp_path / "out.png", "--i-have-consent",
    )
    refused(result, face.name)


@pytest.mark.parametrize("kind", ["zero-size", "animated"])
def test_run_refuses_bad_source_faces(tmp_path, assets, standin_dir, face_video, vcamd_cli, refused, bad_images, kind: str) -> None:
    face = bad_images[kind]
    config = daemon_config(tmp_path, assets, standin_dir, source_face=face)
    result = vcamd_cli("run", "--config", config, "--source", face_video.path, "--sink", "null", "--frames", "5", "--no-tray", timeout=90)
    refused(result, face.name)


# ---- tiny camera frames ------------------------------------------------------------------------------


def tiny_video(folder: Path, width: int, height: int, frames: int = 10) -> Path:
    """A real MJPEG video of `width`×`height` frames (MJPEG can store even 1×1)."""
    import cv2
    import numpy as np

    path = folder / f"tiny_{width}x{height}.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (width, height))
    assert writer.isOpened()
    for k in range(frames):
        writer.write(np.full((height, width, 3), 20 * k, np.uint8))
    writer.release()
    return path


@pytest.mark.parametrize(("width", "height"), [(1, 1), (8, 8), (30, 480)])
def test_run_refuses_a_camera_with_tiny_frames_in_one_line(tmp_path, assets, standin_dir, vcamd_cli, refused, width, height) -> None:
    # Before: a traceback from the offline placeholder (exit 1) once the tiny video ended.
    config = daemon_config(tmp_path, assets, standin_dir)
    video = tiny_video(tmp_path, width, height)
    result = vcamd_cli("run", "--config", config, "--source", video, "--sink", "null", "--frames", "30", "--no-tray", timeout=90)
    line = refused(result, video.name, f"{width}×{height}", "32×32")
    assert result.returncode == 2, line


@pytest.mark.slow
def test_run_plays_the_smallest_accepted_camera_and_its_offline_frames(tmp_path, assets, standin_dir, vcamd_cli) -> None:
    # 32×32 is accepted: it plays, and when the video ends (no --loop) the offline card is published at 32×32.
    config = daemon_config(tmp_path, assets, standin_dir)
    video = tiny_video(tmp_path, 32, 32)
    stats = tmp_path / "stats.json"
    result = vcamd_cli("run", "--config", config, "--source", video, "--sink", f"file:{tmp_path / 'out.mp4'}", "--frames", "30",
                       "--no-tray", "--stats-json", stats, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    import json

    frames = json.loads(stats.read_text())["frames"]
    assert frames["published"] == 30 and frames["offline"] >= 1, frames


def test_run_with_a_camera_index_that_does_not_exist_says_one_line_and_lists_the_cameras(tmp_path, assets, standin_dir, vcamd_cli, refused) -> None:
    # Before: a dozen lines of OpenCV warnings (V4L2, FFmpeg, obsensor) above the error, and no hint
    # which cameras exist.
    from vcamd.live.capture.sources import cameras_here

    config = daemon_config(tmp_path, assets, standin_dir)
    result = vcamd_cli("run", "--config", config, "--source", "7", "--sink", "null", "--frames", "5", "--no-tray", timeout=90)
    line = refused(result, "cannot open camera 7", cameras_here())
    assert result.returncode == 2, line
    assert "--source synthetic" in line  # the way on without a webcam (issue 42)
    opencv_noise = [ln for ln in result.stderr.splitlines() if "WARN" in ln or "VIDEOIO" in ln or ln.startswith(("[", ">"))]
    assert not opencv_noise, result.stderr


# ---- who can reach it -------------------------------------------------------------------------------


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _decode_address(hex_addr: str) -> str:
    """/proc/net/{tcp,udp}[6] local address → 'ip:port' (the kernel prints 32-bit words in host order)."""
    import ipaddress
    import struct

    ip_hex, port_hex = hex_addr.split(":")
    raw = bytes.fromhex(ip_hex)
    words = b"".join(struct.pack("=I", struct.unpack(">I", raw[i : i + 4])[0]) for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    return f"{ip}:{int(port_hex, 16)}" if ip.version == 4 else f"[{ip}]:{int(port_hex, 16)}"


def listening_sockets(pid: int) -> list[tuple[str, str, bool]]:
    """(proto, address, is_loopback) of every TCP socket in LISTEN and every bound UDP socket of `pid`."""
    import ipaddress

    inodes = _socket_inodes(pid)
    found = []
    for proto, listen_state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        table = Path(f"/proc/{pid}/net/{proto}")
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if inode in inodes and state == listen_state:
                address = _decode_address(local)
                host = address.rsplit(":", 1)[0].strip("[]")
                found.append((proto, address, ipaddress.ip_address(host).is_loopback))
    return found


def test_address_decoding() -> None:
    assert _decode_address("0100007F:1F90") == "127.0.0.1:8080"
    assert _decode_address("00000000:0050") == "0.0.0.0:80"
    assert _decode_address("00000000000000000000000001000000:1F90") == "[::1]:8080"
    assert _decode_address("00000000000000000000000000000000:0016") == "[::]:22"


@pytest.mark.slow
def test_running_daemon_listens_on_loopback_only(tmp_path, assets, standin_dir, face_video, vcamd_cli) -> None:
    config = daemon_config(tmp_path, assets, standin_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(face_video.path), "--loop",
         "--sink", "preview", "--no-tray"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=vcamd_cli.env, cwd=tmp_path,
    )
    try:
        from vcamd.control.client import ControlClient
        from vcamd.control.protocol import ControlError, DaemonNotRunning

        # Every listener is up once the daemon publishes frames: the preview sink opens before the
        # first frame and the control endpoint before the loop starts. A condition, not a clock.
        client = ControlClient(Path(vcamd_cli.env["VCAMD_RUNTIME_DIR"]), timeout_s=5)
        sockets: list = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                publishing = client.status()["frames"]["published"] > 0
            except (DaemonNotRunning, ControlError):
                publishing = False
            if publishing:
                sockets = listening_sockets(proc.pid)
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"the daemon exited early: {proc.communicate(timeout=5)[1][-3000:]}"
        assert sockets, "the preview sink should listen on a TCP port"
        exposed = [(proto, addr) for proto, addr, loopback in sockets if not loopback]
        assert not exposed, f"listening on non-loopback addresses: {exposed}"
        print("listening:", sockets)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert "Traceback" not in err, err[-3000:]


# ---- a full disk under the log file ----------------------------------------------------------------


@pytest.mark.slow
def test_full_disk_under_the_log_file_does_not_stop_the_daemon(tmp_path, assets, standin_dir, face_video, vcamd_cli) -> None:
    # /dev/full fails every write with ENOSPC, exactly like a full disk. The daemon's own logging
    # setup (vcamd.system.logs) points the file handler at it; then `vcamd run` publishes 60 frames.
    config = daemon_config(tmp_path, assets, standin_dir)
    script = (
        "import sys, logging\n"
        "from pathlib import Path\n"
        "from vcamd.system.logs import setup_logging\n"
        "setup_logging('debug', Path('/dev/full'))\n"
        "logging.getLogger('vcamd.test').info('first record goes to a full disk')\n"
        "from vcamd.cli import main\n"
        f"sys.exit(main(['run', '--config', {str(config)!r}, '--source', {str(face_video.path)!r}, '--loop', "
        "'--sink', 'null', '--frames', '60', '--no-tray']))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=vcamd_cli.env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "published 60 frames" in result.stdout
    failures = [line for line in result.stderr.splitlines() if "/dev/full" in line]
    assert 1 <= len(failures) <= 2, "the full disk is reported once, not per record:\n" + "\n".join(failures[:5])


@pytest.mark.slow
def test_full_disk_under_the_user_log_folder(tmp_path, assets, standin_dir, face_video, vcamd_cli) -> None:
    # The default log file (user state dir / vcamd.log) replaced by a link to /dev/full: whatever
    # `vcamd run` logs there, it must still publish and exit cleanly.
    state = Path(vcamd_cli.env["XDG_STATE_HOME"]) / "facelive"
    state.mkdir(parents=True)
    (state / "vcamd.log").symlink_to("/dev/full")
    config = daemon_config(tmp_path, assets, standin_dir)
    result = vcamd_cli("run", "--config", config, "--source", face_video.path, "--loop", "--sink", "null", "--frames", "60", "--no-tray", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "published 60 frames" in result.stdout


# ---- no XDG_RUNTIME_DIR: one runtime folder, one daemon ---------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the runtime folder's rule for Linux")
def test_without_xdg_runtime_dir_the_cli_finds_the_daemon_and_a_second_one_is_refused(
        tmp_path, assets, standin_dir, face_video, vcamd_cli) -> None:
    """A daemon started without XDG_RUNTIME_DIR (a cron job, `su`) and the CLI run from a desktop
    session (with it) use the same folder. Before: the daemon went to platformdirs' fallback, every
    verb with XDG_RUNTIME_DIR said "not running", and a second daemon started beside the first.
    Uses the user's real runtime folder (no override): skipped when a daemon of theirs runs there."""
    import json

    from vcamd.config.folders import user_runtime_dir

    config = daemon_config(tmp_path, assets, standin_dir)
    cron = {k: v for k, v in vcamd_cli.env.items() if k not in ("XDG_RUNTIME_DIR", "VCAMD_RUNTIME_DIR")}
    session_dir = tmp_path / "session-run"
    session_dir.mkdir(mode=0o700)
    desktop = {**cron, "XDG_RUNTIME_DIR": str(session_dir)}

    def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "vcamd", *args], capture_output=True, text=True, env=env, timeout=60)

    if cli(cron, "status").returncode != 3:
        pytest.skip(f"a daemon already answers in {user_runtime_dir()}")
    argv = [sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(face_video.path), "--loop",
            "--sink", "null", "--no-tray"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cron, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 90
        status = cli(desktop, "status", "--json")
        while status.returncode != 0 or json.loads(status.stdout)["frames"]["published"] == 0:
            assert first.poll() is None, f"the daemon exited early: {first.communicate(timeout=5)[1][-3000:]}"
            assert time.monotonic() < deadline, f"the desktop session's CLI never found the daemon: {status.stderr}"
            time.sleep(0.2)
            status = cli(desktop, "status", "--json")
        folder = user_runtime_dir()
        assert oct(folder.stat().st_mode & 0o777) == oct(0o700) and folder.stat().st_uid == os.geteuid()
        second = subprocess.run(argv, capture_output=True, text=True, env=desktop, timeout=90, cwd=tmp_path)
        assert second.returncode == 2 and "already running" in second.stderr, second.stderr[-3000:]
        assert cli(desktop, "quit").returncode == 0
        assert first.wait(20) == 0
    finally:
        if first.poll() is None:
            first.kill()
        _, err = first.communicate()
    assert "Traceback" not in err, err[-3000:]
