"""`--sink preview`: a local page at http://127.0.0.1:PORT/ with the live output (MJPEG) and the live stats.

The page itself is `preview_page.html` beside this module (packaged data). It shows the camera
(the raw face while swapping is off), so it is kept like the control page (`vcamd.pages.security`):
every request needs the per-start token, as `Authorization: Bearer TOKEN` or the HttpOnly cookie a
browser gets by opening `login_url()` (a one-time code, never the token), handed to it in a private
file (`vcamd.panel.login.login_page`), never on a command line.
"""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import cv2

from vcamd.common.errors import VcamdError
from vcamd.common.jsonable import to_jsonable
from vcamd.common.newest import NewestSlot
from vcamd.common.types import Frame
from vcamd.config.schema import Config, PreviewConfig
from vcamd.pages.gate import GUEST, OWNER, GatedHandler, GatedHTTPServer
from vcamd.pages.security import LOGGED_IN_PAGE, SECURITY_HEADERS, PageAccess, check_fetch_site, session_cookie
from vcamd.sinks.base import fit_to_size

log = logging.getLogger(__name__)


@cache
def preview_page() -> bytes:
    """The page's HTML/JS (vcamd/sinks/preview_page.html), read once."""
    resource = resources.files("vcamd.sinks").joinpath("preview_page.html")
    try:
        return resource.read_bytes()
    except FileNotFoundError:
        raise VcamdError(
            "the preview page vcamd/sinks/preview_page.html is missing",
            fix="reinstall vcamd (pip install --force-reinstall vcamd)",
        ) from None


MJPEG_BOUNDARY = "facelive-frame"
PAGE_HEADERS = {**SECURITY_HEADERS, "Content-Security-Policy": "frame-ancestors 'none'; base-uri 'none'"}
"""The control page's headers, but the preview page has inline code of its own."""


class _PreviewServer(GatedHTTPServer):
    """Owners (the token) and guests in pools of their own, as the control page's (`vcamd.pages.gate`)."""

    def __init__(self, address: tuple[str, int], sink: "PreviewSink") -> None:
        self.sink = sink

        def classify(method: str, target: str, headers: dict[str, str]) -> str:
            return OWNER if sink.access.allows(headers, sink.port) else GUEST

        # A viewer that stops reading is dropped after 10 s instead of pinning a thread.
        super().__init__(address, _PreviewHandler, classify=classify, limits={OWNER: 16, GUEST: 4},
                         read_timeouts={OWNER: 10.0, GUEST: 5.0})


class _PreviewHandler(GatedHandler, BaseHTTPRequestHandler):
    server: _PreviewServer
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class names it so)
        log.debug("preview %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        sink = self.server.sink
        if not sink.host_allowed(self.headers.get("Host", "")):
            # Another site's page resolving its name to 127.0.0.1 (DNS rebinding) must not see the camera.
            self._reply(HTTPStatus.FORBIDDEN, "text/plain; charset=utf-8", b"forbidden host\n")
            return
        route, _, query = self.path.partition("?")
        headers = {key.lower(): value for key, value in self.headers.items()}
        refusal = check_fetch_site(headers, "GET")  # another web page may not read the camera either
        if refusal is not None:
            self._reply(refusal.status, "text/plain; charset=utf-8", (refusal.message + "\n").encode("utf-8"))
            return
        code = parse_qs(query).get("code")
        if route == "/" and code:
            self._log_in(sink, code[-1])
            return
        if not sink.access.allows(headers, sink.port):
            log.info("preview refused GET %s (401): no access token", route)
            self._reply(HTTPStatus.UNAUTHORIZED, "text/plain; charset=utf-8",
                        b"the preview needs its access token: open it from the tray (Open control page), "
                        b"or send Authorization: Bearer TOKEN\n")
            return
        if route == "/":
            self._reply(HTTPStatus.OK, "text/html; charset=utf-8", preview_page())
        elif route == "/stats.json":
            self._reply(HTTPStatus.OK, "application/json", sink.stats_json())
        elif route == "/snapshot.jpg":
            jpeg = sink.snapshot_jpeg()
            if jpeg is None:
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", b"no frame published yet\n")
            else:
                self._reply(HTTPStatus.OK, "image/jpeg", jpeg)
        elif route == "/stream.mjpg":
            self._stream(sink)
        else:
            self._reply(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

    def _log_in(self, sink: "PreviewSink", code: str) -> None:
        if not sink.access.redeem(code):
            log.info("preview refused a used or expired login code (401)")
            self._reply(HTTPStatus.UNAUTHORIZED, "text/plain; charset=utf-8",
                        b"this preview link was used already or is out of date (each one logs in once): "
                        b"open the preview again from the tray\n")
            return
        # The cookie holds the token; the address bar keeps only the used code (see LOGGED_IN_PAGE).
        self._reply(HTTPStatus.OK, "text/html; charset=utf-8", LOGGED_IN_PAGE,
                    {"Set-Cookie": session_cookie(sink.access.token, sink.port)})

    def _reply(self, status: HTTPStatus, content_type: str, body: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {**PAGE_HEADERS, "Content-Type": content_type, "Content-Length": str(len(body)),
                           **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, sink: "PreviewSink") -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            with sink.viewer():
                seq = -1  # a new viewer gets the latest frame at once, then every newer one
                while not sink.closed:
                    jpeg, seq = sink.wait_jpeg(after=seq, timeout=1.0)
                    if jpeg is None:
                        continue
                    head = f"--{MJPEG_BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n"
                    self.wfile.write(head.encode("ascii") + jpeg + b"\r\n")
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            pass  # the viewer closed the tab, or stopped reading for `timeout` seconds


class PreviewSink:
    """A local page at http://127.0.0.1:PORT/ with the live output (MJPEG) and the live stats.

    JPEGs are encoded on a separate thread, at most at the output fps and only while a viewer
    is connected (or a snapshot is asked for): with nobody watching, `send()` costs nothing.
    """

    HOST = "127.0.0.1"

    @classmethod
    def from_spec(cls, argument: str, cfg: Config, width: int, height: int, fps: float) -> PreviewSink:
        return cls(cfg.preview, width, height, fps)

    def __init__(
        self,
        cfg: PreviewConfig,
        width: int,
        height: int,
        fps: float,
        *,
        jpeg_quality: int | None = None,
        snapshot_wait_s: float = 2.0,
    ) -> None:
        self._port_wanted = cfg.port
        self.access = PageAccess()  # the token: new at every start
        self._snapshot_wait_s = snapshot_wait_s
        self._width, self._height = width, height
        self._min_interval_s = 1.0 / fps
        self._quality = jpeg_quality if jpeg_quality is not None else cfg.jpeg_quality
        self._server: _PreviewServer | None = None
        self._threads: list[threading.Thread] = []
        self._jpegs: NewestSlot[bytes] = NewestSlot()  # viewers wait here for a newer JPEG
        self._work = threading.Condition()  # guards the fields below
        self._pending: Frame | None = None  # a frame waiting for the encoder (a private copy)
        self._clients = 0
        self._snapshot_waiters = 0
        self._next_encode_t = 0.0  # time.monotonic() from which the next JPEG may be encoded
        self._stats: dict[str, Any] | None = None
        self._state = "new"
        self.frames_sent = 0
        self.jpegs_encoded = 0
        self.port = 0

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def url(self) -> str | None:
        """The page's address once open, e.g. http://127.0.0.1:8765/; None before open() and after close()."""
        return f"http://{self.HOST}:{self.port}/" if self._state == "open" else None

    def open(self) -> None:
        if self._state == "open":
            return
        if self._state == "closed":
            raise RuntimeError("PreviewSink cannot be reopened after close(); build a new one")
        try:
            server = _PreviewServer((self.HOST, self._port_wanted), self)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise VcamdError(
                    f"preview port {self._port_wanted} on {self.HOST} is already in use",
                    fix="set [preview] port to a free port, or to 0 to pick any free port",
                ) from None
            raise VcamdError(
                f"cannot listen on {self.HOST}:{self._port_wanted} for the preview ({exc.strerror or exc})",
                fix="set [preview] port to a port above 1024, or to 0 to pick any free port",
            ) from None
        self._server = server
        self.port = server.server_address[1]
        self._state = "open"
        self._threads = [
            threading.Thread(target=server.serve_forever, name="preview-http", daemon=True),
            threading.Thread(target=self._encode_loop, name="preview-jpeg", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        log.info("preview page: %s (it needs a login: the tray's \"Open control page\" opens it with a one-time code)", self.url)

    def login_url(self) -> str | None:
        """An address that logs a browser in once (a one-time code: safe on a command line); None unless open."""
        base = self.url
        return f"{base}?code={self.access.one_time_code()}" if base is not None else None

    def host_allowed(self, host: str) -> bool:
        return host in (f"{self.HOST}:{self.port}", f"localhost:{self.port}")

    # -- publisher side -----------------------------------------------------------------------

    def send(self, frame: Frame, stats: dict[str, Any] | None = None) -> None:
        if self._state == "new":
            raise RuntimeError("PreviewSink.send() before open()")
        if self._state == "closed":
            return
        self.frames_sent += 1
        with self._work:
            if stats is not None:
                self._stats = stats
            now = time.monotonic()
            wanted = self._snapshot_waiters > 0 or (self._clients > 0 and now >= self._next_encode_t)
            if not wanted or self._pending is not None:
                return  # nobody watching, too soon, or the encoder is still busy: skip this frame
            fitted = fit_to_size(frame, self._width, self._height)
            self._pending = fitted if fitted is not frame else frame.copy()
            # A grid of slots one frame interval apart, not "interval since the last encode": frames
            # arriving at exactly the output fps with a little jitter must all be encoded, yet the
            # slot advances by a full interval per JPEG, so the long-run rate never exceeds the fps.
            self._next_encode_t = max(self._next_encode_t + self._min_interval_s, now - self._min_interval_s / 2)
            self._work.notify_all()

    def _encode_loop(self) -> None:
        params = [cv2.IMWRITE_JPEG_QUALITY, int(self._quality)]
        while True:
            with self._work:
                self._work.wait_for(lambda: self._pending is not None or self.closed)
                if self.closed:
                    return
                frame, self._pending = self._pending, None
            if frame is None:  # cannot be: only `closed` ends the wait without a frame, and it returned
                continue
            ok, buf = cv2.imencode(".jpg", frame, params)
            if ok:
                self.jpegs_encoded += 1
                self._jpegs.put(buf.tobytes())

    # -- server side --------------------------------------------------------------------------

    @contextmanager
    def viewer(self) -> Iterator[None]:
        """Counts a stream viewer while the block runs: JPEGs are only encoded while one watches."""
        with self._work:
            self._clients += 1
        try:
            yield
        finally:
            with self._work:
                self._clients -= 1

    def wait_jpeg(self, after: int, timeout: float) -> tuple[bytes | None, int]:
        """The newest JPEG numbered above `after` and its number; (None, after) on timeout or close."""
        return self._jpegs.wait_newer(after, timeout)

    @property
    def clients(self) -> int:
        with self._work:
            return self._clients

    def stats_json(self) -> bytes:
        with self._work:
            stats = self._stats
        return json.dumps(to_jsonable(stats or {})).encode("utf-8")

    def snapshot_jpeg(self) -> bytes | None:
        """A JPEG of the next published frame (or the last one if none comes within snapshot_wait_s)."""
        _, seq = self._jpegs.latest()
        with self._work:
            self._snapshot_waiters += 1
        try:
            jpeg, _ = self._jpegs.wait_newer(seq, timeout=self._snapshot_wait_s)
        finally:
            with self._work:
                self._snapshot_waiters -= 1
        return jpeg if jpeg is not None else self._jpegs.latest()[0]

    def close(self) -> None:
        with self._work:
            if self._state == "closed":
                return
            was_open = self._state == "open"
            self._state = "closed"
            self._work.notify_all()
        self._jpegs.close()
        if was_open and self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=2.0)

    def describe(self) -> str:
        where = self.url if self._state == "open" else f"http://{self.HOST}:{self._port_wanted or '(any free port)'}/"
        return f"preview page {where}"
