"""The control page's HTTP exchange, below its routes: a request body read to its Content-Length
(bounded, never chunked, a stalled or short body refused with its status), what is left of a
refused request drained so the client sees the answer, JSON and plain answers with the security
headers, and an MJPEG stream. HTTP/1.0, one request per connection."""

from __future__ import annotations

import contextlib
import json
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

from vcamd.common.boundedjson import JsonRefused, loads_bounded
from vcamd.common.errors import VcamdError
from vcamd.common.jsonable import to_jsonable
from vcamd.pages.gate import GatedHandler
from vcamd.pages.security import SECURITY_HEADERS
from vcamd.panel.faces import MAX_UPLOAD_BYTES
from vcamd.panel.video import JpegFeed

MAX_JSON_BYTES = 64 * 1024
MAX_JSON_DEPTH = 8
"""A body nests 1 level ({"level": "auto"}); deeper is refused before parsing (`vcamd.common.boundedjson`)."""
MAX_DRAIN_BYTES = 4 * MAX_UPLOAD_BYTES
"""A refused request's body is read and dropped up to this size, so the client sees our answer
(closing on unread data resets the connection and the browser shows a network error instead)."""
CONTENT_LENGTH = re.compile(r"[0-9]{1,12}", re.ASCII)
"""A Content-Length is ASCII digits only: `str.isdigit()` also takes "²", which int() then refuses."""

MJPEG_BOUNDARY = "facelive-panel-frame"
REPEAT_AFTER_S = 0.5
"""With no new frame for this long, a video viewer is sent the last JPEG again (see `_send_stream`)."""


class HttpError(VcamdError):
    """A request the API refuses, with the status to answer."""

    def __init__(self, status: HTTPStatus, message: str, fix: str | None = None) -> None:
        self.status = status
        super().__init__(message, fix=fix)


class WireHandler(GatedHandler, BaseHTTPRequestHandler):
    """Reads request bodies and writes answers; `routes.PanelHandler` decides what they are."""

    protocol_version = "HTTP/1.0"

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
            body = loads_bounded(raw or b"{}", max_bytes=MAX_JSON_BYTES, max_depth=MAX_JSON_DEPTH)
        except JsonRefused as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"the request body is {exc}") from None
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

    def _send_stream(self, feed: JpegFeed) -> None:
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
