"""The control page's routes, and who may use them (every one behind the rules of
`vcamd.pages.security`):

Routes (every one behind the rules of `vcamd.pages.security`):

    GET  /                 the page (also /?code=ONE-TIME-CODE: sets the cookie, then moves on to /)
    GET  /panel.js, /panel.css
    GET  /stream.mjpg      live video (multipart/x-mixed-replace JPEGs)
    GET  /api/status       {"status": engine status, "badge", "history", "transitions", "recent_faces", "qualities"}
    POST /api/on, /api/off, /api/toggle
    POST /api/quality      {"level": "auto" | a level name of `vcamd.common.quality.LADDER`}
    POST /api/badge        {"on": true | false}
    POST /api/model        {"role": "swapper" | "enhancer", "name": a manifest model of that role}
    POST /api/login-code   {"url": "http://127.0.0.1:PORT/?code=…"}: a one-time address for a browser
    POST /api/face         the photo's bytes as the body, ?consent=yes[&name=FILE.jpg]
                           or {"recent": "/path/from/recent_faces", "consent": true}
    every other POST answers like GET /api/status; errors are {"error": "one line"} with a 4xx/5xx status.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

from vcamd.common.errors import VcamdError
from vcamd.common.quality import quality_names
from vcamd.control.protocol import parse_quality
from vcamd.files.photo_lane import PhotoLaneBusy
from vcamd.pages.gate import GUEST, OWNER, GatedHTTPServer
from vcamd.pages.security import (
    LOGGED_IN_PAGE,
    LOOPBACK,
    Refusal,
    bearer_token,
    check_fetch_site,
    check_host,
    check_origin,
    session_cookie,
)
from vcamd.panel.faces import UploadNotStored, UploadTooLarge
from vcamd.panel.wire import HttpError, WireHandler

if TYPE_CHECKING:
    from vcamd.config.schema import PanelConfig
    from vcamd.control.protocol import Controllable
    from vcamd.pages.security import PageAccess
    from vcamd.panel.video import JpegFeed

log = logging.getLogger(__name__)

STATIC_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/panel.js": ("panel.js", "text/javascript; charset=utf-8"),
    "/panel.css": ("panel.css", "text/css; charset=utf-8"),
}
CHANGES = ("/api/on", "/api/off", "/api/toggle", "/api/quality", "/api/badge", "/api/model", "/api/face", "/api/login-code")
ROUTES: dict[str, frozenset[str]] = {
    **{path: frozenset({"GET"}) for path in (*STATIC_FILES, "/stream.mjpg", "/api/status")},
    **{path: frozenset({"POST"}) for path in CHANGES},
}


class Panel(Protocol):
    """What the routes ask of the control page's server (`vcamd.panel.server.PanelServer`): its
    settings and limits, the engine it drives, the page's access rules and video, and the changes
    a request makes."""

    @property
    def cfg(self) -> PanelConfig: ...
    @property
    def target(self) -> Controllable: ...
    @property
    def access(self) -> PageAccess: ...
    @property
    def feed(self) -> JpegFeed: ...
    @property
    def static(self) -> dict[str, bytes]: ...
    @property
    def port(self) -> int: ...
    @property
    def token(self) -> str: ...
    @property
    def max_streams(self) -> int: ...
    @property
    def max_connections(self) -> int: ...
    @property
    def max_guests(self) -> int: ...
    @property
    def request_timeout_s(self) -> float: ...
    @property
    def head_timeout_s(self) -> float: ...

    def login_url(self) -> str: ...
    def state(self) -> dict[str, Any]: ...
    def set_enabled(self, on: bool | None) -> None: ...
    def set_badge(self, on: bool) -> None: ...
    def use_recent_face(self, raw: Any) -> None: ...
    def use_uploaded_face(self, body: Any, length: int, name: str) -> None: ...
    def refused(self, status: HTTPStatus) -> None: ...


def load_static() -> dict[str, bytes]:
    """The page's files, read once from the package (vcamd/panel/static)."""
    folder = resources.files("vcamd.panel") / "static"
    return {route: (folder / name).read_bytes() for route, (name, _) in STATIC_FILES.items()}


class PanelHTTPServer(GatedHTTPServer):
    """Owners (the token, as Bearer or cookie) and guests (everything else) in pools of their own:
    see `vcamd.pages.gate`."""

    def __init__(self, panel: Panel) -> None:
        self.panel = panel

        def classify(method: str, target: str, headers: dict[str, str]) -> str:
            return OWNER if panel.access.allows(headers, panel.port) else GUEST

        super().__init__((LOOPBACK, panel.cfg.port), PanelHandler, classify=classify,
                         limits={OWNER: panel.max_connections, GUEST: panel.max_guests},
                         read_timeouts={OWNER: panel.request_timeout_s, GUEST: min(panel.request_timeout_s, panel.head_timeout_s)},
                         head_timeout_s=panel.head_timeout_s, on_refused=lambda status: panel.refused(HTTPStatus(status)))


class PanelHandler(WireHandler):
    server: PanelHTTPServer
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
        # The token goes into an HttpOnly cookie and out of the address bar (see LOGGED_IN_PAGE).
        self._reply(HTTPStatus.OK, "text/html; charset=utf-8", LOGGED_IN_PAGE,
                    {"Set-Cookie": session_cookie(panel.token, panel.port)})

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
                case "/api/model":
                    body = self._json_body(headers, length)
                    role, name = body.get("role"), body.get("name")
                    if role not in ("swapper", "enhancer") or not isinstance(name, str) or not name:
                        raise HttpError(HTTPStatus.BAD_REQUEST, 'model needs {"role": "swapper" | "enhancer", "name": MODEL}',
                                        fix="the names are in `vcamd models list`")
                    panel.target.set_model(role, name)
                case "/api/face":
                    self._face(params, headers, length)
                case "/api/login-code":
                    self._drain_body(length)
                    return self._json(HTTPStatus.OK, {"url": panel.login_url()})
            answer = panel.state()
        except UploadTooLarge as err:
            self._drain_body()
            return self._refuse(Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(err)), route)
        except UploadNotStored as err:  # the data folder's disk is full (507), or it cannot be written (500)
            self._body_left = err.unread
            status = HTTPStatus.INSUFFICIENT_STORAGE if err.disk_full else HTTPStatus.INTERNAL_SERVER_ERROR
            return self._refuse(Refusal(status, str(err)), route)
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

    def _stream(self) -> None:
        feed = self.server.panel.feed
        # The viewer is counted before the answer starts: one that has its headers is counted, so
        # the next one over the limit is refused however the threads are scheduled.
        with feed.viewer(self.server.panel.max_streams) as admitted:
            if not admitted:
                return self._refuse(Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "too many live video viewers; close other tabs"),
                                    "/stream.mjpg")
            self._send_stream(feed)


def _require_consent(given: bool) -> None:
    if not given:
        raise HttpError(HTTPStatus.BAD_REQUEST, "consent not confirmed: tick \"I have the consent of the person "
                        "in this photo\" before choosing a source face")
