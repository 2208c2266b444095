"""The control page: `PanelServer` serves it for a `Controllable` on 127.0.0.1 (its life cycle, and
what the API answers and does); the routes are in `routes`, the HTTP exchange in `wire`.

HTTP/1.0, one request per connection. A connection gets a thread only once its request head has
arrived (within `head_timeout_s`), in the pool of its purpose (`vcamd.pages.gate`): at most
`max_connections` with the token, `max_guests` without (the rest get 503 at once), so neither a
forgotten tab nor a flood of idle or tokenless connections can pile up threads or starve the
owner; an owner's client that stops reading or sending is dropped after `request_timeout_s`.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections import Counter
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol

from vcamd.common.errors import FaceError, VcamdError
from vcamd.common.jsonable import to_jsonable
from vcamd.common.quality import quality_names
from vcamd.config.schema import PanelConfig
from vcamd.control.protocol import Controllable
from vcamd.pages.security import LOOPBACK, PageAccess
from vcamd.panel.faces import naming_upload, store_upload
from vcamd.panel.history import StatusHistory
from vcamd.panel.routes import PanelHTTPServer, load_static
from vcamd.panel.video import JpegFeed
from vcamd.panel.wire import HttpError

log = logging.getLogger(__name__)

TRANSITIONS_SHOWN = 50


class RecentFaceList(Protocol):
    """What the panel needs of the tray's `RecentFaces` (the same file, the same rules)."""

    def list(self) -> list[Path]: ...
    def add(self, face: Path) -> None: ...


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
        self._server: PanelHTTPServer | None = None
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
        Not for a command line either (another user could read it there and use it first): a browser
        gets it inside a private file (`vcamd.panel.login.login_page`)."""
        if self._server is None:
            raise RuntimeError("the control page is not started")
        return f"{self.base_url}?code={self.access.one_time_code()}"

    def start(self) -> "PanelServer":
        if self._closed:
            raise RuntimeError("a closed control page cannot be started again; make a new one")
        if self._server is not None:
            return self
        try:
            server = PanelHTTPServer(self)
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
        self._thread = threading.Thread(target=server.serve_forever, name="panel-http", daemon=True)
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
