"""The control page's HTTP server: static page, JSON API, MJPEG video, on 127.0.0.1 only.

Routes (every one behind the rules of `vcamd.panel.security`):

    GET  /                 the page (also /?code=ONE-TIME-CODE: sets the cookie, redirects to /)
    GET  /panel.js, /panel.css
    GET  /stream.mjpg      live video (multipart/x-mixed-replace JPEGs)
    GET  /api/status       {"status": engine status, "badge", "history", "transitions", "recent_faces", "qualities"}
    POST /api/on, /api/off, /api/toggle
    POST /api/quality      {"level": "auto" | a level name of `vcamd.quality.LADDER`}
    POST /api/badge        {"on": true | false}
    POST /api/login-code   {"url": "http://127.0.0.1:PORT/?code=…"}: a one-time address for a browser
    POST /api/face         the photo's bytes as the body, ?consent=yes[&name=FILE.jpg]
                           or {"recent": "/path/from/recent_faces", "consent": true}
    every other POST answers like GET /api/status; errors are {"error": "one line"} with a 4xx/5xx status.

HTTP/1.0, one request per connection. A connection gets a thread only once its request head has
arrived (within `head_timeout_s`), in the pool of its purpose (`vcamd.panel.gate`): at most
`max_connections` with the token, `max_guests` without (the rest get 503 at once), so neither a
forgotten tab nor a flood of idle or tokenless connections can pile up threads or starve the
owner; an owner's client that stops reading or sending is dropped after `request_timeout_s`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from importlib import resources
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs

from vcamd.config import PanelConfig
from vcamd.control.protocol import Controllable, parse_quality
from vcamd.errors import FaceError, VcamdError
from vcamd.jsonable import to_jsonable
from vcamd.panel.faces import MAX_UPLOAD_BYTES, UploadTooLarge, naming_upload, store_upload, uploads_dir
from vcamd.panel.gate import GUEST, OWNER, GatedHandler, GatedHTTPServer
from vcamd.panel.history import StatusHistory
from vcamd.panel.security import (
    LOOPBACK,
    SECURITY_HEADERS,
    PageAccess,
    Refusal,
    bearer_token,
    check_fetch_site,
    check_host,
    check_origin,
    session_cookie,
)
from vcamd.panel.video import JpegFeed
from vcamd.photo_lane import PhotoLaneBusy
from vcamd.quality import quality_names

log = logging.getLogger(__name__)

MAX_JSON_BYTES = 64 * 1024
MAX_DRAIN_BYTES = 4 * MAX_UPLOAD_BYTES
CONTENT_LENGTH = re.compile(r"[0-9]{1,12}", re.ASCII)
"""A Content-Length is ASCII digits only: `str.isdigit()` also takes "²", which int() then refuses."""
"""A refused request's body is read and dropped up to this size, so the client sees our answer
(closing on unread data resets the connection and the browser shows a network error instead)."""

TRANSITIONS_SHOWN = 50
MJPEG_BOUNDARY = "facelive-panel-frame"
REPEAT_AFTER_S = 0.5
"""With no new frame for this long, a video viewer is sent the last JPEG again (see `_stream`)."""

STATIC_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/panel.js": ("panel.js", "text/javascript; charset=utf-8"),
    "/panel.css": ("panel.css", "text/css; charset=utf-8"),
}
CHANGES = ("/api/on", "/api/off", "/api/toggle", "/api/quality", "/api/badge", "/api/face", "/api/login-code")
ROUTES: dict[str, frozenset[str]] = {
    **{path: frozenset({"GET"}) for path in (*STATIC_FILES, "/stream.mjpg", "/api/status")},
    **{path: frozenset({"POST"}) for path in CHANGES},
}


class RecentFaceList(Protocol):
    """What the panel needs of the tray's `RecentFaces` (the same file, the same rules)."""

    def list(self) -> list[Path]: ...
    def add(self, face: Path) -> None: ...


class HttpError(VcamdError):
    """A request the API refuses, with the status to answer."""

    def __init__(self, status: HTTPStatus, message: str, fix: str | None = None) -> None:
        self.status = status
        super().__init__(message, fix=fix)


def load_static() -> dict[str, bytes]:
    """The page's files, read once from the package (vcamd/panel/static)."""
    folder = resources.files("vcamd.panel") / "static"
    return {route: (folder / name).read_bytes() for route, (name, _) in STATIC_FILES.items()}


class PanelServer:
    """Serve the control page for `target` on 127.0.0.1:`cfg.port` (0 = any free port).

    `access` holds the token (new at every start) and mints the one-time codes of `login_url()`.
    `start()`/`close()` are idempotent; use it as a context manager.
    """

    def __init__(
        self,
        target: Controllable,
        cfg: PanelConfig,
        *,
        faces_dir: Path,
        recent_faces: RecentFaceList | None = None,
        badge: bool = True,
        history_period_s: float = 1.0,
        max_connections: int = 16,
        max_streams: int = 4,
        max_guests: int = 4,
        request_timeout_s: float = 10.0,
        head_timeout_s: float = 5.0,
    ) -> None:
        self.target = target
        self.cfg = cfg
        self.faces_dir = faces_dir
        self.recent_faces = recent_faces
        self.max_streams = max_streams
        self.max_connections = max_connections  # requests with the token, served at once
        self.max_guests = max_guests  # requests without it (401s, logins), in a pool of their own
        self.request_timeout_s = request_timeout_s
        self.head_timeout_s = head_timeout_s  # for the request line and headers, and for guests
        self.access = PageAccess()
        self.feed = JpegFeed(target.latest_frame, cfg.video_fps)
        # 60 samples: one minute at the default one a second (tests sample faster).
        self.history = StatusHistory(target.status, period_s=history_period_s, span_s=60.0 * history_period_s)
        self.static = load_static()
        self.refusals: Counter[int] = Counter()  # HTTP status → how many requests were turned away
        self._badge = badge  # what was last set, for engines whose status() does not say
        self._lock = threading.Lock()  # toggle = read + write, and the badge record
        self._server: _PanelHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.port = 0

    # ---- life cycle ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    @property
    def token(self) -> str:
        """Whoever has it controls the camera: only for Bearer scripts, over private channels."""
        return self.access.token

    def login_url(self) -> str:
        """An address for a browser: it logs in once (a one-time code, not the token), then is worthless.
        This is what may go on a command line (`xdg-open URL`), where every local user can read it."""
        if self._server is None:
            raise RuntimeError("the control page is not started")
        return f"{self.base_url}?code={self.access.one_time_code()}"

    def start(self) -> "PanelServer":
        if self._closed:
            raise RuntimeError("a closed control page cannot be started again; make a new one")
        if self._server is not None:
            return self
        try:
            server = _PanelHTTPServer(self)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise VcamdError(f"control page port {self.cfg.port} on {LOOPBACK} is already in use",
                                 fix="set [panel] port = 0 (any free port) or another port") from None
            raise VcamdError(f"cannot listen on {LOOPBACK}:{self.cfg.port} for the control page ({exc.strerror or exc})",
                             fix="set [panel] port = 0 (any free port), or [panel] enabled = false") from None
        self._server = server
        self.port = int(server.server_address[1])
        self.feed.start()
        self.history.start()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="panel-http", daemon=True)
        self._thread.start()
        log.info("control page on %s (`vcamd panel` opens it with a one-time login code)", self.base_url)
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.feed.close()  # ends the video streams
        self.history.close()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "PanelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what the API answers and does ----------------------------------------------------------

    def state(self) -> dict[str, Any]:
        status = to_jsonable(self.target.status())
        with self._lock:
            badge = status.get("badge") if isinstance(status.get("badge"), bool) else self._badge
        return {
            "status": status,
            "badge": badge,
            "history": self.history.to_json(),
            "history_span_s": self.history.span_s,
            "transitions": to_jsonable(self.target.recent_transitions()[-TRANSITIONS_SHOWN:]),
            "recent_faces": [{"path": str(p), "name": p.name} for p in self._recent()],
            "qualities": quality_names(),
            "video_fps": self.cfg.video_fps,
        }

    def set_enabled(self, on: bool | None) -> None:
        """on/off, or None = toggle (the engine's own: two toggles never cancel out)."""
        if on is None:
            self.target.toggle()
        else:
            self.target.set_enabled(on)

    def set_badge(self, on: bool) -> None:
        with self._lock:
            self.target.set_badge(on)
            self._badge = on

    def use_recent_face(self, raw: Any) -> None:
        recent = {str(p): p for p in self._recent()}
        if not isinstance(raw, str) or raw not in recent:
            # Only a listed photo: the page must not become a way to make the daemon open any path.
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{raw!r} is not one of the recent source faces",
                            fix="pick one from the list, or upload the photo")
        self._use_face(recent[raw])

    def use_uploaded_face(self, body: Any, length: int, name: str) -> None:
        kept, is_new = store_upload(body, length, self.faces_dir, name)  # checked from its header only
        try:
            self._use_face(kept)  # the engine decodes it, in the daemon's one photo lane (busy: PhotoLaneBusy)
        except FaceError as err:
            if is_new:
                kept.unlink(missing_ok=True)  # a photo the engine refused is not kept
            raise naming_upload(err, kept, name) from None
        except BaseException:
            if is_new:
                kept.unlink(missing_ok=True)
            raise

    def _use_face(self, path: Path) -> None:
        self.target.set_source_face(path)  # FaceError (no face, unreadable) → the user sees why
        if self.recent_faces is not None:
            self.recent_faces.add(path)

    def _recent(self) -> list[Path]:
        return list(self.recent_faces.list()) if self.recent_faces is not None else []

    def refused(self, status: HTTPStatus) -> None:
        with self._lock:
            self.refusals[int(status)] += 1


class WithPanelUrl:
    """The engine as the control socket and the tray drive it: every state it reports — `status()`
    and the state a change answers with — also carries "panel_url" (the plain address) and
    "panel_token" (for Bearer scripts: the socket is private to the user; never put it on a command
    line). `panel_login_url()` is the tray's one-time address. Everything else is the engine's own
    (one control surface, not a copy of it)."""

    STATE_ANSWERS = frozenset({"set_enabled", "toggle", "set_source_face", "set_quality", "set_badge", "reload_config"})
    """The engine's changes that answer with the state after they applied."""

    def __init__(self, engine: Controllable, panel: PanelServer) -> None:
        self._engine = engine
        self._panel = panel

    def _with_url(self, state: Any) -> Any:
        if not isinstance(state, dict):
            return state
        return {**state, "panel_url": self._panel.base_url, "panel_token": self._panel.token}

    def panel_login_url(self) -> str:
        return self._panel.login_url()

    def status(self) -> dict[str, Any]:
        return self._with_url(self._engine.status())

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if name not in self.STATE_ANSWERS:
            return attr
        return lambda *args, **kwargs: self._with_url(attr(*args, **kwargs))


@contextlib.contextmanager
def open_panel(engine: Controllable, cfg: Any) -> Iterator[Controllable]:
    """For `vcamd run`: the control page while the block runs (unless [panel] enabled = false);
    yields what the control socket should serve — the engine, with "panel_url" in its status."""
    if not cfg.panel.enabled:
        yield engine
        return
    from vcamd.config import user_state_dir
    from vcamd.tray import RecentFaces

    panel = PanelServer(engine, cfg.panel, faces_dir=uploads_dir(),
                        recent_faces=RecentFaces(user_state_dir() / "recent_faces.json"),
                        badge=cfg.disclosure.badge)
    with panel:
        yield WithPanelUrl(engine, panel)


# ---- HTTP ---------------------------------------------------------------------------------------


class _PanelHTTPServer(GatedHTTPServer):
    """Owners (the token, as Bearer or cookie) and guests (everything else) in pools of their own:
    see `vcamd.panel.gate`."""

    def __init__(self, panel: PanelServer) -> None:
        self.panel = panel

        def classify(method: str, target: str, headers: dict[str, str]) -> str:
            return OWNER if panel.access.allows(headers, panel.port) else GUEST

        super().__init__((LOOPBACK, panel.cfg.port), _Handler, classify=classify,
                         limits={OWNER: panel.max_connections, GUEST: panel.max_guests},
                         read_timeouts={OWNER: panel.request_timeout_s, GUEST: min(panel.request_timeout_s, panel.head_timeout_s)},
                         head_timeout_s=panel.head_timeout_s, on_refused=lambda status: panel.refused(HTTPStatus(status)))


class _Handler(GatedHandler, BaseHTTPRequestHandler):
    server: _PanelHTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "FaceLive-panel"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class names it so)
        log.debug("panel %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle("HEAD")

    def do_PUT(self) -> None:  # noqa: N802
        self._handle("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("PATCH")

    def do_OPTIONS(self) -> None:  # noqa: N802 (a CORS preflight gets no CORS headers: the browser gives up)
        self._handle("OPTIONS")

    # ---- the gate -------------------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        panel = self.server.panel
        headers = {key.lower(): value for key, value in self.headers.items()}
        route, _, query = self.path.partition("?")
        params = parse_qs(query, keep_blank_values=True)
        refusal = check_host(headers.get("host"), panel.port) or check_fetch_site(headers, method)
        if refusal is not None:
            return self._refuse(refusal, route)
        bearer = bearer_token(headers.get("authorization"))
        if route == "/" and method == "GET" and "code" in params:
            return self._log_in(params["code"][-1])
        if not panel.access.allows(headers, panel.port):
            return self._refuse(Refusal(HTTPStatus.UNAUTHORIZED, "the control page needs its access token: "
                                        "open it with `vcamd panel` (or send Authorization: Bearer TOKEN)"), route)
        allowed = ROUTES.get(route)
        if allowed is None:
            return self._refuse(Refusal(HTTPStatus.NOT_FOUND, f"no such page or API: {route}"), route)
        if method not in allowed:
            return self._refuse(Refusal(HTTPStatus.METHOD_NOT_ALLOWED,
                                        f"{route} takes {', '.join(sorted(allowed))}, not {method}"), route,
                                {"Allow": ", ".join(sorted(allowed))})
        if method == "POST":
            refusal = check_origin(headers.get("origin"), panel.port, bearer=bearer is not None)
            if refusal is not None:
                return self._refuse(refusal, route)
            return self._change(route, params, headers)
        if route in STATIC_FILES:
            return self._reply(HTTPStatus.OK, STATIC_FILES[route][1], panel.static[route])
        if route == "/stream.mjpg":
            return self._stream()
        try:
            return self._json(HTTPStatus.OK, panel.state())
        except Exception as exc:
            log.exception("control page: status failed")
            return self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(exc).__name__}: {exc}"})

    def _log_in(self, code: str) -> None:
        panel = self.server.panel
        if not panel.access.redeem(code):
            return self._refuse(Refusal(HTTPStatus.UNAUTHORIZED, "this control page link was used already or is "
                                        "out of date (each one logs in once): open the page again with `vcamd panel`"), "/")
        # The token goes into an HttpOnly cookie and out of the address bar (and the history).
        self._reply(HTTPStatus.SEE_OTHER, "text/plain; charset=utf-8", b"",
                    {"Location": "/", "Set-Cookie": session_cookie(panel.token, panel.port)})

    def _refuse(self, refusal: Refusal, route: str, extra: dict[str, str] | None = None) -> None:
        self.server.panel.refused(refusal.status)
        log.info("control page refused %s %s (%d): %s", self.command, route, refusal.status, refusal.message)
        self._drain_body()
        if route.startswith("/api/"):
            self._json(refusal.status, {"error": refusal.message}, extra)
        else:
            self._reply(refusal.status, "text/plain; charset=utf-8", (refusal.message + "\n").encode("utf-8"), extra)

    # ---- changes --------------------------------------------------------------------------------

    def _change(self, route: str, params: dict[str, list[str]], headers: dict[str, str]) -> None:
        panel = self.server.panel
        try:
            length = self._content_length(headers)
            match route:
                case "/api/on" | "/api/off" | "/api/toggle":
                    self._drain_body(length)
                    panel.set_enabled({"/api/on": True, "/api/off": False}.get(route))
                case "/api/quality":
                    level = self._json_body(headers, length).get("level")
                    if not isinstance(level, str):
                        raise HttpError(HTTPStatus.BAD_REQUEST, 'quality needs {"level": NAME}',
                                        fix=f"one of: {', '.join(quality_names())}")
                    panel.target.set_quality(parse_quality(level))
                case "/api/badge":
                    on = self._json_body(headers, length).get("on")
                    if not isinstance(on, bool):
                        raise HttpError(HTTPStatus.BAD_REQUEST, 'badge needs {"on": true} or {"on": false}')
                    panel.set_badge(on)
                case "/api/face":
                    self._face(params, headers, length)
                case "/api/login-code":
                    self._drain_body(length)
                    return self._json(HTTPStatus.OK, {"url": panel.login_url()})
            answer = panel.state()
        except UploadTooLarge as err:
            self._drain_body()
            return self._refuse(Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(err)), route)
        except HttpError as err:
            return self._refuse(Refusal(err.status, str(err)), route)
        except PhotoLaneBusy as err:  # another surface's photo is being read: no queue of photos in memory
            return self._refuse(Refusal(HTTPStatus.SERVICE_UNAVAILABLE, str(err)), route, {"Retry-After": "1"})
        except VcamdError as err:  # the user's problem (a photo without a face, an unknown level): say it
            log.info("control page: %s refused: %s", route, err)
            return self._json(HTTPStatus.BAD_REQUEST, {"error": str(err)})
        except Exception as exc:  # a bug in the engine must not take the page down
            log.exception("control page: %s failed", route)
            return self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error in {route}: {type(exc).__name__}: {exc}"})
        log.info("control page: %s", route)
        self._json(HTTPStatus.OK, answer)

    def _face(self, params: dict[str, list[str]], headers: dict[str, str], length: int) -> None:
        panel = self.server.panel
        if headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            body = self._json_body(headers, length)
            _require_consent(body.get("consent") is True)
            panel.use_recent_face(body.get("recent"))
            return
        _require_consent(params.get("consent", [""])[-1].lower() in ("yes", "true", "1", "on"))
        if length <= 0:
            raise HttpError(HTTPStatus.BAD_REQUEST, "no photo in the upload", fix="send the photo's bytes as the request body")
        name = params.get("name", ["photo"])[-1]
        panel.use_uploaded_face(self.rfile, length, name)
        self._body_left = 0

    def _content_length(self, headers: dict[str, str]) -> int:
        if "transfer-encoding" in headers:
            raise HttpError(HTTPStatus.LENGTH_REQUIRED, "chunked uploads are not accepted", fix="send Content-Length")
        length = _content_length(headers.get("content-length", "0"))
        if length is None:
            self._body_left = None  # unknown: nothing is drained, the connection is closed after the answer
            raise HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {headers['content-length']!r}",
                            fix="send the body's size in bytes as ASCII digits")
        self._body_left = length
        return length

    def _json_body(self, headers: dict[str, str], length: int) -> dict[str, Any]:
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send the request body as application/json")
        if length > MAX_JSON_BYTES:
            raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"JSON body over {MAX_JSON_BYTES} bytes")
        raw = self._read_body(length)
        try:
            body = json.loads(raw.decode("utf-8") or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise HttpError(HTTPStatus.BAD_REQUEST, "the request body is not valid JSON") from None
        except RecursionError:  # deeply nested arrays: json's recursion, not a bug of ours
            raise HttpError(HTTPStatus.BAD_REQUEST, "the request body is nested too deeply") from None
        if not isinstance(body, dict):
            raise HttpError(HTTPStatus.BAD_REQUEST, "the request body must be a JSON object")
        return body

    def _read_body(self, length: int) -> bytes:
        """Exactly `length` bytes of body, or HttpError: a body that ends or stalls early is the client's fault."""
        self._body_left = None  # whatever happens, what is left of it is not read again
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            raise HttpError(HTTPStatus.REQUEST_TIMEOUT, f"the request body stalled before its {length} bytes "
                            f"(Content-Length) within {self.timeout:g} s") from None
        except OSError as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"the request body could not be read ({exc})") from None
        if len(raw) < length:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"the request body ended after {len(raw)} of {length} bytes "
                            "(Content-Length)")
        self._body_left = 0
        return raw

    def _drain_body(self, length: int | None = None) -> None:
        """Read and drop what is left of the request body (bounded), so the answer is not lost to a reset."""
        left = length if length is not None else getattr(self, "_body_left", -1)
        if left == -1:  # not looked at yet
            left = _content_length(self.headers.get("Content-Length", "0"))
        self._body_left = 0
        if left is None or left > MAX_DRAIN_BYTES:
            self.close_connection = True  # unknown or huge: close rather than read it
            return
        with contextlib.suppress(OSError):
            while left > 0:
                chunk = self.rfile.read(min(256 * 1024, left))
                if not chunk:
                    break
                left -= len(chunk)

    # ---- answers --------------------------------------------------------------------------------

    def _json(self, status: HTTPStatus, payload: Any, extra: dict[str, str] | None = None) -> None:
        body = json.dumps(to_jsonable(payload), allow_nan=False).encode("utf-8")
        self._reply(status, "application/json", body, extra)

    def _reply(self, status: HTTPStatus, content_type: str, body: bytes, extra: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            for key, value in {**SECURITY_HEADERS, "Content-Type": content_type,
                               "Content-Length": str(len(body)), **(extra or {})}.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass  # the client went away

    def _stream(self) -> None:
        feed = self.server.panel.feed
        # The viewer is counted before the answer starts: one that has its headers is counted, so
        # the next one over the limit is refused however the threads are scheduled.
        with feed.viewer(self.server.panel.max_streams) as admitted:
            if not admitted:
                return self._refuse(Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "too many live video viewers; close other tabs"),
                                    "/stream.mjpg")
            self._send_stream(feed)

    def _send_stream(self, feed) -> None:
        try:
            self.send_response(HTTPStatus.OK)
            for key, value in {**SECURITY_HEADERS, "Content-Type": f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}"}.items():
                self.send_header(key, value)
            self.end_headers()
            boundary = f"\r\n--{MJPEG_BOUNDARY}\r\n".encode("ascii")
            self.wfile.write(boundary[2:])  # the first boundary opens the body: no CRLF before it
            seq = 0  # a new viewer gets the newest JPEG at once, then every newer one
            while not feed.closed:
                jpeg, seq = feed.wait_newer(seq, timeout=REPEAT_AFTER_S)
                if jpeg is None:
                    # Nothing new (a still picture, a stalled engine): send the last one again.
                    # Browsers show a part only once the next one starts, so without this the
                    # newest picture would never appear.
                    jpeg, seq = feed.latest()
                    if jpeg is None or feed.closed:
                        continue
                head = f"Content-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n".encode("ascii")
                self.wfile.write(head + jpeg + boundary)
                self.wfile.flush()
        except OSError:
            pass  # the viewer closed the tab, or stopped reading for request_timeout_s


def _content_length(raw: str) -> int | None:
    """The header's value, or None when it is not plain ASCII digits."""
    raw = raw.strip()
    return int(raw) if CONTENT_LENGTH.fullmatch(raw) else None


def _require_consent(given: bool) -> None:
    if not given:
        raise HttpError(HTTPStatus.BAD_REQUEST, "consent not confirmed: tick \"I have the consent of the person "
                        "in this photo\" before choosing a source face")


