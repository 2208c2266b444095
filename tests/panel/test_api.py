"""The control page's JSON API, live video and status history, and how the daemon hands out its URL."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.users import read_as_another_user

from vcamd.common.quality import Level
from vcamd.config.reading import config_from_dict
from vcamd.config.schema import PanelConfig
from vcamd.control.client import ControlClient
from vcamd.control.server import ControlServer
from vcamd.panel import WithPanelUrl, open_panel
from vcamd.panel.history import StatusHistory
from vcamd.tray import RecentFaces


def post(http, panel, path: str, payload: dict | None = None):
    body = json.dumps(payload).encode() if payload is not None else None
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    return http(panel, "POST", path, body=body, headers=headers, origin=f"http://127.0.0.1:{panel.port}", auth="cookie")


def test_status_carries_everything_the_page_shows(start_panel, engine, http, wait):
    engine.transitions = [{"time": 1.5, "from": "full", "to": "no_enhancer", "reason": "over_budget",
                           "trigger": {"frames": 15, "p50_ms": 61.0, "p95_ms": 80.5, "over_budget_share": 0.8},
                           "after": None}]
    engine.config_error = "/home/me/.config/facelive/config.toml: [swap] on_mis: unknown key"
    panel = start_panel(history_period_s=0.02)
    wait(lambda: len(panel.history.samples()) >= 5, "five status samples")
    asked = time.monotonic()
    state = http(panel, "GET", "/api/status").json()
    answered = time.monotonic()
    status = state["status"]
    assert status["enabled"] is True and status["level"] == "full" and status["quality"] == "auto"
    assert status["config_error"] == engine.config_error
    assert status["providers"]["scrfd_500m_kps.onnx"] == "CPUExecutionProvider"
    assert state["transitions"] == engine.transitions
    assert state["badge"] is True
    assert state["qualities"] == ["auto", "full", "no_boost", "no_enhancer", "low_res", "frame_skip"]
    history = state["history"]
    assert len(history) >= 5
    ages = [p["age_s"] for p in history]
    assert ages == sorted(ages, reverse=True)  # oldest first, "now" last
    # Each point's age is the seconds from its sample to the moment of the answer (rounded to 0.01 s).
    taken = [s.t for s in panel.history.samples()[: len(history)]]
    for age, t in zip(ages, taken, strict=True):
        assert asked - t - 0.006 <= age <= answered - t + 0.006, (age, asked - t, answered - t)
    assert all(20 < p["fps"] < 35 and p["latency_p95_ms"] > p["latency_p50_ms"] > 0 for p in history)


def test_on_off_toggle(panel, engine, http):
    assert post(http, panel, "/api/off").json()["status"]["enabled"] is False
    assert engine.enabled is False
    assert post(http, panel, "/api/on").json()["status"]["enabled"] is True
    assert post(http, panel, "/api/toggle").json()["status"]["enabled"] is False
    assert post(http, panel, "/api/toggle").json()["status"]["enabled"] is True


def test_quality_pinned_and_auto(panel, engine, http):
    answer = post(http, panel, "/api/quality", {"level": "low_res"})
    assert answer.status == 200 and engine.quality is Level.low_res
    assert answer.json()["status"]["quality"] == "low_res"
    assert post(http, panel, "/api/quality", {"level": "auto"}).status == 200
    assert engine.quality is None
    answer = post(http, panel, "/api/quality", {"level": "potato"})
    assert answer.status == 400
    assert answer.error == "unknown quality level 'potato' — use one of: auto, full, no_boost, no_enhancer, low_res, frame_skip"
    assert post(http, panel, "/api/quality", {}).status == 400
    assert engine.quality is None


def test_badge(panel, engine, http):
    answer = post(http, panel, "/api/badge", {"on": False})
    assert answer.status == 200 and engine.badge is False and answer.json()["badge"] is False
    assert http(panel, "GET", "/api/status").json()["badge"] is False
    assert post(http, panel, "/api/badge", {"on": "yes"}).status == 400
    assert engine.badge is False
    assert post(http, panel, "/api/badge", {"on": True}).json()["badge"] is True


def test_json_changes_need_json(panel, engine, http):
    answer = http(panel, "POST", "/api/badge", body=b"on=false", origin=f"http://127.0.0.1:{panel.port}",
                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status == 415 and engine.badge is True
    answer = http(panel, "POST", "/api/quality", body=b"{not json", headers={"Content-Type": "application/json"})
    assert answer.status == 400 and answer.error.startswith("the request body is not valid JSON (")


def test_an_engine_failure_is_a_500_with_its_reason_not_a_dead_page(panel, engine, http, monkeypatch):
    def broken(on: bool) -> None:
        raise RuntimeError("switch is stuck")

    monkeypatch.setattr(engine, "set_enabled", broken)
    answer = post(http, panel, "/api/off")
    assert answer.status == 500 and answer.error == "internal error in /api/off: RuntimeError: switch is stuck"
    assert http(panel, "GET", "/api/status").status == 200


# ---- live video ---------------------------------------------------------------------------------


class MjpegReader:
    """Reads JPEG parts from /stream.mjpg on a raw socket."""

    def __init__(self, panel) -> None:
        self.sock = socket.create_connection(("127.0.0.1", panel.port), timeout=30)
        self.sock.sendall(f"GET /stream.mjpg HTTP/1.0\r\nHost: 127.0.0.1:{panel.port}\r\n"
                          f"Authorization: Bearer {panel.token}\r\n\r\n".encode())
        self.file = self.sock.makefile("rb")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += self.file.read(1)
        assert head.startswith(b"HTTP/1.0 200"), head
        assert b"multipart/x-mixed-replace" in head

    def next_jpeg(self) -> bytes:
        length = None
        while True:
            line = self.file.readline()
            assert line, "the stream ended"
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            if line == b"\r\n" and length is not None:
                return self.file.read(length)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def test_the_video_is_the_engines_frame_as_jpeg(panel, newton):
    reader = MjpegReader(panel)
    try:
        image = cv2.imdecode(np.frombuffer(reader.next_jpeg(), np.uint8), cv2.IMREAD_COLOR)
    finally:
        reader.close()
    assert image.shape == newton.shape
    assert np.abs(image.astype(int) - newton.astype(int)).mean() < 4  # JPEG at quality 80


def test_each_frame_is_encoded_once_whoever_watches(start_panel, engine, newton, wait):
    panel = start_panel(cfg=PanelConfig(video_fps=30))
    assert panel.feed.encoded == 0  # nobody watches: nothing is encoded
    viewers = [MjpegReader(panel) for _ in range(3)]
    try:
        for reader in viewers:
            reader.next_jpeg()
        assert panel.feed.encoded == 1  # one JPEG of the first frame, for three viewers
        for n in range(2, 6):
            frame = newton.copy()
            cv2.putText(frame, str(n), (40, 200), cv2.FONT_HERSHEY_SIMPLEX, 6, (0, 0, 255), 12)
            engine.publish(frame)
            wait(lambda n=n: panel.feed.encoded >= n, f"frame {n} encoded")
            for reader in viewers:
                # Each viewer gets the new picture (after repeats of the old one, if it stalled).
                while True:
                    got = cv2.imdecode(np.frombuffer(reader.next_jpeg(), np.uint8), cv2.IMREAD_COLOR)
                    if np.abs(got.astype(int) - frame.astype(int)).mean() < 4:
                        break
        assert panel.feed.encoded == 5  # five frames, three viewers, five encodes; repeats cost none
    finally:
        for reader in viewers:
            reader.close()


def test_wide_frames_are_scaled_down_for_the_page(panel, engine, newton, wait):
    engine.publish(cv2.resize(newton, (3840, 2160)))  # a 4K camera
    reader = MjpegReader(panel)
    try:
        image = cv2.imdecode(np.frombuffer(reader.next_jpeg(), np.uint8), cv2.IMREAD_COLOR)
    finally:
        reader.close()
    assert image.shape == (540, 960, 3)
    assert np.abs(image.astype(int) - cv2.resize(newton, (960, 540), interpolation=cv2.INTER_AREA).astype(int)).mean() < 5


def test_too_many_viewers_get_a_503(start_panel, http):
    panel = start_panel(max_streams=2)
    viewers = [MjpegReader(panel) for _ in range(2)]
    try:
        answer = http(panel, "GET", "/stream.mjpg")
        assert answer.status == 503 and b"too many live video viewers" in answer.body
    finally:
        for reader in viewers:
            reader.close()


def test_a_viewer_is_admitted_and_counted_in_one_step():
    """The limit was checked before the viewer was counted, and the counting came after the
    answer's headers: a third viewer arriving while the first two were between the two was let in
    (and the test waiting for its 503 read an endless stream). Now admission and counting are one
    step under the feed's lock."""
    from vcamd.panel.video import JpegFeed

    feed = JpegFeed(lambda: None, fps=10.0)
    with feed.viewer(2) as first, feed.viewer(2) as second:
        with feed.viewer(2) as third:
            assert (first, second, third) == (True, True, False)
            assert feed.viewers == 2  # the refused one is not counted
    assert feed.viewers == 0
    with feed.viewer(2) as again:
        assert again and feed.viewers == 1


# ---- the one-minute history ---------------------------------------------------------------------


def test_the_history_keeps_one_minute_of_samples():
    now = [100.0]
    calls = []

    def status():
        calls.append(now[0])
        return {"fps": 30.0 - len(calls) % 3, "latency_ms": {"p50": 20.0, "p95": 31.0}, "enabled": True, "level": Level.low_res}

    history = StatusHistory(status, period_s=1.0, span_s=60.0, clock=lambda: now[0])
    for _ in range(75):  # 75 s of sampling, driven by hand instead of the thread
        history.take_sample()
        now[0] += 1.0
    samples = history.to_json()
    assert len(samples) == 60  # the oldest 15 fell out of the ring
    assert samples[0]["age_s"] == 60.0 and samples[-1]["age_s"] == 1.0
    assert samples[-1] == {"age_s": 1.0, "fps": 30.0 - 75 % 3, "latency_p50_ms": 20.0, "latency_p95_ms": 31.0,
                           "enabled": True, "level": "low_res"}


def test_a_failing_status_leaves_a_gap_not_a_dead_sampler():
    answers = iter([{"fps": 1.0}, RuntimeError("boom"), {"fps": 3.0, "latency_ms": 12.5}])

    def status():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    history = StatusHistory(status, period_s=1.0)
    for _ in range(3):
        history.take_sample()
    samples = history.samples()
    assert [s.fps for s in samples] == [1.0, 3.0]
    assert samples[1].latency_p50_ms == samples[1].latency_p95_ms == 12.5  # a plain number is both


# ---- how users get the URL ----------------------------------------------------------------------


def test_the_control_socket_status_carries_the_panel_url_and_token(panel, engine, runtime_dir):
    with ControlServer(WithPanelUrl(engine, panel), runtime_dir):
        status = ControlClient(runtime_dir).status()
        assert status["panel_url"] == panel.base_url == f"http://127.0.0.1:{panel.port}/"  # no secret in it
        assert status["panel_token"] == panel.token  # for Bearer scripts, over the private socket
        ControlClient(runtime_dir).set_enabled(False)
        assert engine.enabled is False  # the wrapper drives the same engine


def run_vcamd(runtime: Path, *args: str, env: dict[str, str] | None = None):
    import subprocess

    return subprocess.run([sys.executable, "-m", "vcamd", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "VCAMD_RUNTIME_DIR": str(runtime), **(env or {})})


def address_in_login_page(page: Path) -> str:
    """The one-time address a login page (`vcamd.panel.login.login_page`) moves the browser on to."""
    import html
    import re

    found = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', page.read_text())
    assert found, page.read_text()
    return html.unescape(found.group(1))


def check_private_login_page(page: Path, folder: Path) -> None:
    """0600, the user's, in the private runtime folder; another local user cannot read it."""
    info = page.stat()
    assert page.parent == folder and page.name.startswith("login-") and page.suffix == ".html"
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    if os.geteuid() == 0:
        assert read_as_another_user(str(page)).startswith(b"EXC PermissionError")


def test_vcamd_panel_puts_nothing_secret_on_the_browsers_command_line(panel, engine, runtime_dir, tmp_path, http):
    """Issue 27 item 1, issue 36 item 1: the browser's command line (and xdg-open's) is readable by
    every local user in /proc/PID/cmdline, and so is its environment to root. Neither the token nor
    a one-time code (another user could redeem it first) goes there: the browser is handed a file
    only the user can read, which carries the one-time address."""
    opened, environment = tmp_path / "opened.txt", tmp_path / "environ.txt"
    fake_browser = tmp_path / "browser.sh"
    fake_browser.write_text(f'#!/bin/sh\nprintf "%s" "$*" > {opened}\nenv > {environment}\n')
    fake_browser.chmod(0o755)
    with ControlServer(WithPanelUrl(engine, panel), runtime_dir):
        printed = run_vcamd(runtime_dir, "panel", "--print")
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.strip().startswith(f"{panel.base_url}?code=")
        shown = run_vcamd(runtime_dir, "panel", env={"BROWSER": f"{fake_browser} %s"})
        assert shown.returncode == 0, shown.stderr
        argv = opened.read_text()
    assert argv.startswith("file:///") and "code=" not in argv and panel.token not in argv
    page = Path(argv.removeprefix("file://"))
    check_private_login_page(page, runtime_dir)
    url = address_in_login_page(page)
    assert url.startswith(f"{panel.base_url}?code=") and url != printed.stdout.strip()  # a new code each time
    assert panel.token not in page.read_text() and panel.token not in environment.read_text()
    assert panel.token not in printed.stdout + shown.stdout + shown.stderr
    # The address in the file really opens the page — once.
    path = url.split(str(panel.port), 1)[1]
    assert http(panel, "GET", path, auth=None).status == 200
    assert http(panel, "GET", path, auth=None).status == 401


def test_the_trays_open_control_page_opens_a_private_login_page(panel, engine, http, runtime_dir, monkeypatch):
    from vcamd.tray import TrayApp

    monkeypatch.setenv("VCAMD_RUNTIME_DIR", str(runtime_dir))
    opened: list[Path] = []
    app = TrayApp(WithPanelUrl(engine, panel), open_url=opened.append, notify=lambda *a: None,
                  run_in_background=lambda fn: fn())
    app.open_panel()
    [page] = opened
    check_private_login_page(page, runtime_dir)
    url = address_in_login_page(page)
    assert url.startswith(f"{panel.base_url}?code=") and panel.token not in page.read_text()
    assert http(panel, "GET", url.split(str(panel.port), 1)[1], auth=None).status == 200


def test_old_login_pages_are_removed_as_new_ones_are_written(runtime_dir):
    from vcamd.pages.security import CODE_TTL_S
    from vcamd.panel.login import login_page

    first = login_page("http://127.0.0.1:1/?code=a", runtime_dir)
    second = login_page("http://127.0.0.1:1/?code=b", runtime_dir)
    assert first != second and first.exists()
    old = time.time() - CODE_TTL_S - 5  # the code inside is worthless by now
    os.utime(first, (old, old))
    third = login_page("http://127.0.0.1:1/?code=c", runtime_dir)
    assert not first.exists() and second.exists() and third.exists()


def test_vcamd_panel_without_a_page_or_a_daemon_says_so(engine, runtime_dir):
    with ControlServer(engine, runtime_dir):  # a daemon started with [panel] enabled = false
        answer = run_vcamd(runtime_dir, "panel")
        assert answer.returncode == 2
        assert answer.stderr.strip() == ("vcamd: error: the running daemon serves no control page ([panel] enabled = false)"
                                         " — set [panel] enabled = true in config.toml and restart `vcamd run`")
    answer = run_vcamd(runtime_dir, "panel")
    assert answer.returncode == 3 and "not running" in answer.stderr


def test_open_panel_follows_the_config(engine, tmp_path, http):
    recent = RecentFaces(tmp_path / "recent_faces.json")
    with open_panel(engine, config_from_dict({"panel": {"enabled": False}}), recent) as served:
        assert served is engine and "panel_url" not in served.status()
    with open_panel(engine, config_from_dict({}), recent) as served:
        url = served.status()["panel_url"]
        assert url.startswith("http://127.0.0.1:") and "?" not in url and served.status()["panel_token"]
    with pytest.raises(OSError):  # closed with the block
        socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0])), timeout=5).close()


def test_a_taken_port_is_a_clear_error(engine, tmp_path):
    from vcamd.common.errors import VcamdError
    from vcamd.panel import PanelServer

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(VcamdError) as err:
            PanelServer(engine, PanelConfig(port=port), faces_dir=tmp_path).start()
    assert str(err.value) == (f"control page port {port} on 127.0.0.1 is already in use — "
                              "set [panel] port = 0 (any free port) or another port")


@pytest.fixture
def runtime_dir(tmp_path_factory) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="vp-", dir="/tmp"))  # short: a Unix socket path must fit
    yield path / "rt"
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_uploaded_faces_folder_is_private_even_if_it_existed(panel, http, assets, tmp_path):
    panel.faces_dir.mkdir(mode=0o755)
    answer = http(panel, "POST", "/api/face?consent=yes&name=n.png", body=(assets / "images" / "newton.png").read_bytes(),
                  headers={"Content-Type": "image/png"})
    assert answer.status == 200
    assert stat.S_IMODE(panel.faces_dir.stat().st_mode) == 0o700


def test_a_model_is_switched_from_the_page(panel, engine, http):
    answer = post(http, panel, "/api/model", {"role": "swapper", "name": "ghost_1_256"})
    assert answer.status == 200 and engine.calls[-1] == ("set_model", ["swapper", "ghost_1_256"])
    for bad in ({"role": "detector", "name": "buffalo_l"}, {"role": "swapper"}, {"role": "swapper", "name": 3}):
        refused = post(http, panel, "/api/model", bad)
        assert refused.status == 400 and refused.error.startswith("model needs {")
    assert engine.calls[-1] == ("set_model", ["swapper", "ghost_1_256"])


def test_a_model_the_engine_refuses_is_said_on_the_page(panel, engine, http, monkeypatch):
    from vcamd.common.errors import ModelError

    def missing(role, name):
        raise ModelError(f"1 model file missing: /m/{name}.onnx ({name})", fix=f"run `vcamd models pull {name}`")

    monkeypatch.setattr(engine, "set_model", missing)
    answer = post(http, panel, "/api/model", {"role": "swapper", "name": "simswap_256"})
    assert answer.status == 400 and "vcamd models pull simswap_256" in answer.error


@pytest.mark.parametrize("room", [0, 8 * 1024], ids=["no-room-at-all", "room-for-a-part"])
def test_an_upload_to_a_full_data_folder_answers_what_happened(start_panel, engine, http, tiny_disk, caplog, room):
    """Issue 36 item 3: an upload when the data folder's disk is full answered 500 "internal error"
    with a traceback in the log. Now 507 naming the folder and the reason, one log line, nothing
    left behind, the engine untouched — and once there is room, the same upload works."""
    import logging

    from vcamd.panel.faces import PART_PREFIX

    faces = tiny_disk / "faces"
    faces.mkdir(mode=0o700)
    filler = tiny_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:  # full
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - room))
    finally:
        os.close(fd)
    panel = start_panel(faces_dir=faces)
    photo = np.random.default_rng(3).integers(0, 256, (160, 160, 3), dtype=np.uint8)
    body = cv2.imencode(".png", photo)[1].tobytes()  # noise: ~75 KB, more than the room left
    caplog.set_level(logging.INFO, logger="vcamd.panel")
    answer = http(panel, "POST", "/api/face?consent=yes&name=me.png", body=body, headers={"Content-Type": "image/png"})
    assert answer.status == 507, (answer.status, answer.body)
    assert answer.error.startswith(f"the photo could not be stored in {faces}: its disk (at {tiny_disk}) is full — free some")
    assert [r.exc_info for r in caplog.records if r.name.startswith("vcamd.panel")] == [None]
    assert engine.face_calls == 0 and not [p for p in faces.iterdir() if p.name.startswith(PART_PREFIX)]
    filler.unlink()
    answer = http(panel, "POST", "/api/face?consent=yes&name=me.png", body=body, headers={"Content-Type": "image/png"})
    assert answer.status == 200 and engine.face_calls == 1  # stored and used this time
