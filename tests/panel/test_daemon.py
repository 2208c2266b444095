"""End to end: `vcamd run` serves the control page whatever the sink, and hands out its URL.

The daemon plays a video file like a camera into the null sink, with the real SCRFD detector and
the stand-in swapper/recognizer (vcamd.bench.standins), without a tray.
"""

from __future__ import annotations

import http.client as httpclient
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import cv2
import numpy as np
import pytest
import tomli_w

from vcamd.bench.daemon import DaemonRun

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 60.0  # imports + model sessions on a busy 2-core machine


def vcamd(runtime: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vcamd", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "VCAMD_RUNTIME_DIR": str(runtime)})


def request(port: int, method: str, path: str, token: str, body: bytes | None = None) -> httpclient.HTTPResponse:
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=body, headers={"Authorization": f"Bearer {token}"})
    return conn.getresponse()


@pytest.fixture
def daemon(assets: Path, tmp_path: Path, newton):
    from vcamd.bench.clips import write_sliding_clip
    from vcamd.bench.standins import build_recognizer, build_swapper

    config = tmp_path / "config.toml"
    settings = {
        "models": {"detector": str(assets / "models" / "scrfd_500m_kps.onnx"),
                   "swapper": str(build_swapper(tmp_path / "swapper.onnx")),
                   "recognizer": str(build_recognizer(tmp_path / "recognizer.onnx")), "providers": ["cpu"], "threads": 1},
        "detection": {"size": 320, "track_size": 160},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True},
    }
    config.write_text(tomli_w.dumps(settings))
    clip = write_sliding_clip(tmp_path / "camera.avi", newton, size=(480, 360), fps=15.0, frames=30, face_scale=0.7)
    runtime = Path(tempfile.mkdtemp(prefix="vp-", dir="/tmp")) / "rt"  # short: a Unix socket path must fit
    try:
        with DaemonRun(config, clip, "null", runtime, log=tmp_path / "daemon.log") as run:
            run.wait_for(lambda status: True, "the daemon's status", timeout_s=START_TIMEOUT_S, poll_s=0.3)
            yield run, runtime, config, settings
    finally:
        shutil.rmtree(runtime.parent, ignore_errors=True)


def test_vcamd_run_serves_the_control_page(daemon, wait):
    run, runtime, config, settings = daemon
    # The daemon answers while its models still load in the background (cold start); an upload
    # then is refused as "still loading" — what this test checks needs them loaded.
    status = wait(lambda: (s := json.loads(vcamd(runtime, "status", "--json").stdout))["providers"] and s,
                  "the face models loaded (providers known)")
    url = urlsplit(status["panel_url"])
    assert url.scheme == "http" and url.hostname == "127.0.0.1" and url.path == "/" and not url.query
    token = status["panel_token"]
    assert len(token) >= 40
    login = vcamd(runtime, "panel", "--print").stdout.strip()
    assert login.startswith(status["panel_url"] + "?code=") and token not in login

    refused = request(url.port, "GET", "/api/status", "wrong")
    assert refused.status == 401
    state = json.loads(request(url.port, "GET", "/api/status", token).read())
    assert state["status"]["enabled"] is True and "providers" in state["status"]

    def a_frame() -> np.ndarray | None:
        # The live video: the first JPEG of the stream, once the engine has published.
        response = request(url.port, "GET", "/stream.mjpg", token)
        assert response.status == 200
        head = b""
        while not head.endswith(b"\r\n\r\n") or b"Content-Length" not in head:
            head += response.read(1)
        length = int(head.split(b"Content-Length:")[1].split(b"\r\n")[0])
        jpeg = response.read(length)
        response.close()
        return cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)

    frame = a_frame()
    assert frame is not None and frame.shape[:2] == (360, 480) and frame.std() > 10

    answer = request(url.port, "POST", "/api/off", token)
    assert answer.status == 200 and json.loads(answer.read())["status"]["enabled"] is False
    wait(lambda: json.loads(vcamd(runtime, "status", "--json").stdout)["enabled"] is False,
         "the daemon's socket reporting swapping off (one engine behind both)")

    # Uploads go to the real engine: a photo without a face is refused with its reason and not kept.
    ok, grey = cv2.imencode(".png", np.full((240, 240, 3), 128, np.uint8))
    answer = request(url.port, "POST", "/api/face?consent=yes&name=wall.png", token, grey.tobytes())
    assert answer.status == 400
    assert "no face" in json.loads(answer.read())["error"].lower()
    faces_dir = Path(os.environ["XDG_DATA_HOME"]) / "facelive" / "faces"
    assert not faces_dir.exists() or not list(faces_dir.iterdir())
    photo = Path(status["source_face"]).read_bytes()
    answer = request(url.port, "POST", "/api/face?consent=yes&name=me.png", token, photo)
    assert answer.status == 200, answer.read()
    kept = [p for p in faces_dir.iterdir()]
    assert len(kept) == 1 and kept[0].read_bytes() == photo
    wait(lambda: json.loads(vcamd(runtime, "status", "--json").stdout)["source_face"] == str(kept[0]),
         "the uploaded face in use by the daemon")

    # An edit of [panel] while running changes nothing until the next start: the page carries on.
    config.write_text(tomli_w.dumps({**settings, "panel": {"video_fps": 5.0}}))
    wait(lambda: any(("reloaded" in line or "applied" in line) and "panel" in line for line in run.output().splitlines()),
         "the daemon noticing the [panel] edit", timeout_s=30, poll_s=0.2)
    assert request(url.port, "GET", "/api/status", token).status == 200
    assert run.returncode is None

    assert vcamd(runtime, "quit").returncode == 0
    run.wait(30)
    with pytest.raises(OSError):  # the page stops with the daemon
        socket.create_connection(("127.0.0.1", url.port), timeout=5).close()
