"""Fixtures for the control-page tests: an in-test engine, a started page, raw HTTP, a real Chromium.

The browser is Debian's chromium, driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: fd 3 in, fd 4 out, NUL-separated JSON), so no extra package is needed.
"""

from __future__ import annotations

import base64
import fcntl
import functools
import http.client as httpclient
import json
import math
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from support.fakes import FakeEngine
from support.waiting import wait_for

from vcamd.common.errors import VcamdError
from vcamd.common.quality import Level
from vcamd.config.schema import PanelConfig, WatchdogConfig
from vcamd.live.measures.watchdog import Watchdog
from vcamd.panel import PanelServer
from vcamd.tray import RecentFaces

WAIT_S = 45.0  # generous: the suite must pass on a busy 2-core machine


@pytest.fixture
def wait() -> Callable[..., Any]:
    """`wait(predicate, what, timeout_s=...)`: `support.waiting.wait_for` with this folder's bound."""
    return functools.partial(wait_for, timeout_s=WAIT_S, poll_s=0.05)


@pytest.fixture
def watchdog_history() -> list[dict[str, Any]]:
    """Transitions made by the real watchdog: 60 frames over budget, fast frames until it is back
    at full, then fast frames whose two faces are 4 s old (the enhancer off, then one face swapped
    per round)."""
    now = [0.0]
    watchdog = Watchdog(WatchdogConfig(), lambda: now[0])
    for i in range(420):
        now[0] += 0.04
        old = i >= 360
        watchdog.observe(90.0 if i < 60 else 12.0, swap_age_ms=4000.0 if old else None, faces_to_swap=2 if old else 1)
    return watchdog.history()


class PanelEngine(FakeEngine):
    """The control page tests' `Controllable` (tests/support/fakes.py, thread-safe): records what
    the page asks, serves a real frame.

    `set_source_face` really reads the photo (read_image) and counts the faces taken, `latest_frame`
    hands out the frame the test publishes (a new array object per new frame, as the live engine
    does), and its fps and latency move a little with every status() call, so the chart has
    something to draw.
    """

    def __init__(self, frame: np.ndarray) -> None:
        super().__init__(frame)
        self.status_calls = 0
        self.face_calls = 0
        self.source_face_pick: str | None = None  # a group photo: which face the engine took

    def publish(self, frame: np.ndarray) -> None:
        with self._lock:
            self.frame = frame

    def status(self) -> dict[str, Any]:
        with self._lock:
            self.status_calls += 1
            n = self.status_calls
            return {
                "enabled": self.enabled,
                "state": "running",
                "camera": "ok",
                "level": Level.full if self.quality is None else self.quality,
                "quality": "auto" if self.quality is None else self.quality.name,
                "fps": round(27.0 + 2.5 * math.sin(n / 4), 2),
                "latency_ms": {"p50": round(24 + 6 * math.sin(n / 5), 1), "p95": round(36 + 9 * math.sin(n / 5), 1),
                               "p99": 52.0},
                "source_face": self.source_face,
                "source_face_pick": self.source_face_pick,
                "providers": {"scrfd_500m_kps.onnx": "CPUExecutionProvider", "inswapper_128.onnx": "CPUExecutionProvider"},
                "precision": {"detector": "float", "swapper": "int8"},
                "precision_why": {"swapper": "int8 copy checked against float: 8 faces: PSNR ≥ 41.2 dB (needs 35)"},
                "config_error": self.config_error,
                "server": {"url": "grpc://gpu-box:8001", "state": "up", "tls": True, "rtt_ms": 21.5, "call_ms": 27.25,
                           "serves": ["inswapper_128", "inswapper_128.emap"], "error": None, "fallback": None},
                "frames": {"published": 100 * n, "swapped": 97 * n, "held": 3 * n, "blurred": 0, "passthrough": 0},
            }

    def set_source_face(self, path: Path) -> None:
        super().set_source_face(path)  # the engine reads the photo itself (and refuses a bad one)
        with self._lock:
            self.face_calls += 1

    def reload_config(self) -> None:
        raise VcamdError("reload is not part of these tests")


@pytest.fixture
def engine(newton: np.ndarray) -> PanelEngine:
    return PanelEngine(newton)


@pytest.fixture
def recent(tmp_path: Path) -> RecentFaces:
    return RecentFaces(tmp_path / "state" / "recent_faces.json")


@pytest.fixture
def start_panel(engine: PanelEngine, recent: RecentFaces, tmp_path: Path) -> Iterator[Callable[..., PanelServer]]:
    """`start_panel(**kwargs)` → a started PanelServer for `engine` (closed after the test)."""
    started: list[PanelServer] = []

    def start(**kwargs: Any) -> PanelServer:
        options: dict[str, Any] = {"faces_dir": tmp_path / "faces", "recent_faces": recent, **kwargs}
        cfg = options.pop("cfg", PanelConfig())
        panel = PanelServer(engine, cfg, **options).start()
        started.append(panel)
        return panel

    yield start
    for panel in started:
        panel.close()


@pytest.fixture
def panel(start_panel: Callable[..., PanelServer]) -> PanelServer:
    return start_panel()


class Answer:
    def __init__(self, response: httpclient.HTTPResponse) -> None:
        self.status = response.status
        self.headers = response.headers
        self.body = response.read()

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        return self.json()["error"]


def call(
    panel: PanelServer,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    auth: str | None = "bearer",
    host: str | None = "default",
    origin: str | None = None,
    timeout_s: float = 30.0,
) -> Answer:
    """One raw HTTP request to `panel`. auth: "bearer", "cookie", or None; host: "default" = 127.0.0.1:PORT."""
    sent = dict(headers or {})
    if host == "default":
        sent["Host"] = f"127.0.0.1:{panel.port}"
    elif host is not None:
        sent["Host"] = host
    if auth == "bearer":
        sent["Authorization"] = f"Bearer {panel.token}"
    elif auth == "cookie":
        sent["Cookie"] = f"facelive_panel_{panel.port}={panel.token}"
    if origin is not None:
        sent["Origin"] = origin
    conn = httpclient.HTTPConnection("127.0.0.1", panel.port, timeout=timeout_s)
    try:
        if host is None:
            # http.client always adds a Host header; write the request by hand to send none.
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for key, value in sent.items():
                conn.putheader(key, value)
            conn.putheader("Content-Length", str(len(body or b"")))
            conn.endheaders(body)
        else:
            conn.request(method, path, body=body, headers=sent)
        return Answer(conn.getresponse())
    finally:
        conn.close()


@pytest.fixture
def http() -> Callable[..., Answer]:
    return call


# ---- a real browser ---------------------------------------------------------------------------


class DevToolsError(AssertionError):
    pass


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe."""

    def __init__(self, executable: str, profile: Path, extra_args: tuple[str, ...] = ()) -> None:
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # Keep the child's ends above 4, so the dup2 to 3 and 4 below cannot clobber one another.
        child_in, child_out = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)

        def give_pipe_fds() -> None:  # runs in the child before exec
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        command = [
            executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-features=Translate,MediaRouter,OptimizationHints", "--hide-scrollbars",
            "--remote-debugging-pipe", f"--user-data-dir={profile}", *extra_args, "about:blank",
        ]
        self._log = (profile.parent / f"{profile.name}-chromium.log").open("wb")
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     close_fds=False, preexec_fn=give_pipe_fds)
        os.close(child_in)
        os.close(child_out)
        self._write = os.fdopen(to_browser_w, "wb", buffering=0)
        self._read_fd = from_browser_r
        self._lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def _read_loop(self) -> None:
        buffer = b""
        with os.fdopen(self._read_fd, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while b"\0" in buffer:
                    raw, buffer = buffer.split(b"\0", 1)
                    message = json.loads(raw)
                    if "id" in message:
                        with self._arrived:
                            self._replies[message["id"]] = message
                            self._arrived.notify_all()
        with self._arrived:
            self._replies[-1] = {"closed": True}
            self._arrived.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout_s: float = WAIT_S) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
            if session is not None:
                message["sessionId"] = session
            self._write.write(json.dumps(message).encode() + b"\0")
        with self._arrived:
            ok = self._arrived.wait_for(lambda: ident in self._replies or -1 in self._replies, timeout_s)
            reply = self._replies.pop(ident, None)
        if not ok or reply is None:
            raise DevToolsError(f"{method}: no answer from chromium within {timeout_s} s")
        if "error" in reply:
            raise DevToolsError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def new_page(self, width: int = 1280, height: int = 900) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.send("Page.enable")
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout_s=10)
        except (DevToolsError, OSError):
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._write.close()
        self._log.close()


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def eval(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise DevToolsError(f"{expression}: {result['exceptionDetails'].get('text')} "
                                f"{result['exceptionDetails'].get('exception', {}).get('description', '')}")
        return result["result"].get("value")

    def wait(self, expression: str, what: str, timeout_s: float = WAIT_S) -> Any:
        def check() -> Any:
            try:
                return self.eval(expression)
            except DevToolsError:
                return None  # e.g. the page is between two documents
        return wait_for(check, what, timeout_s=timeout_s, poll_s=0.1)

    def text(self, selector: str) -> str | None:
        return self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); return e ? e.textContent : null; }})()")

    def rect(self, selector: str) -> dict[str, float]:
        return self.eval(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                         " return {x: r.x, y: r.y, width: r.width, height: r.height}; })()")

    def click(self, selector: str) -> None:
        """A real mouse click (press + release) at the middle of the element."""
        self.eval(f"document.querySelector({json.dumps(selector)}).scrollIntoView({{block: 'center'}})")
        r = self.rect(selector)
        x, y = r["x"] + r["width"] / 2, r["y"] + r["height"] / 2
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def set_files(self, selector: str, files: list[Path]) -> None:
        root = self.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        self.send("DOM.setFileInputFiles", {"nodeId": node, "files": [str(f) for f in files]})

    def screenshot(self) -> np.ndarray:
        data = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])
        shot = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert shot is not None
        return shot


@pytest.fixture
def browser(chromium: str, tmp_path: Path) -> Iterator[Callable[..., Browser]]:
    """`browser(*extra_args)` → a started headless Chromium (closed after the test)."""
    started: list[Browser] = []

    def start(*extra_args: str) -> Browser:
        b = Browser(chromium, tmp_path / f"profile{len(started)}", tuple(extra_args))
        started.append(b)
        return b

    yield start
    for b in started:
        b.close()
