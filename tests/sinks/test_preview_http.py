"""PreviewSink over plain HTTP: a real server on 127.0.0.1, read with urllib and raw sockets."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import cv2
import numpy as np
import pytest
from support.users import as_another_user, needs_root

from vcamd.common.errors import VcamdError
from vcamd.common.quality import Level
from vcamd.pages.security import LOGGED_IN_PAGE
from vcamd.sinks.preview import MJPEG_BOUNDARY, PreviewSink

BGR = (40, 180, 220)


@pytest.fixture
def preview(make_config) -> Iterator[PreviewSink]:
    sink = PreviewSink(make_config(preview={"port": 0}).preview, 160, 120, 30.0, snapshot_wait_s=0.3)
    sink.open()
    yield sink
    sink.close()


def bearer(sink: PreviewSink) -> dict[str, str]:
    return {"Authorization": f"Bearer {sink.access.token}"}


def authed(sink: PreviewSink, url: str) -> urllib.request.Request:
    """A request with the preview's token (every request needs it, like the control page's)."""
    return urllib.request.Request(url, headers=bearer(sink))


def read_mjpeg_parts(response, count: int) -> list[tuple[dict[str, str], bytes]]:
    """Parse `count` parts of a multipart/x-mixed-replace body: (headers, JPEG bytes)."""
    parts = []
    while len(parts) < count:
        line = response.readline()
        if not line:
            raise AssertionError("stream ended early")
        if line.strip() != f"--{MJPEG_BOUNDARY}".encode():
            continue
        headers = {}
        while (line := response.readline().strip()) != b"":
            key, value = line.decode().split(":", 1)
            headers[key.strip().lower()] = value.strip()
        body = response.read(int(headers["content-length"]))
        parts.append((headers, body))
    return parts


def decode(jpeg: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None, "not a JPEG"
    return image


def close_to(pixel: np.ndarray, bgr: tuple[int, int, int], tol: int = 10) -> bool:
    return bool(np.abs(pixel.astype(int) - np.array(bgr)).max() <= tol)


def test_page_is_self_contained(preview):
    with urllib.request.urlopen(authed(preview, preview.url), timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/html")
        page = r.read().decode()
    assert preview.url.startswith("http://127.0.0.1:") and preview.port > 0
    assert 'src="/stream.mjpg"' in page and '"/stats.json"' in page and "500" in page
    # No external resources: nothing loaded from another origin.
    assert "http://" not in page and "https://" not in page and "//cdn" not in page


def test_stream_gives_jpeg_parts_of_the_published_frames(preview, publisher, solid):
    assert preview.jpegs_encoded == 0
    for _ in range(5):  # nobody watching: frames are not encoded at all
        preview.send(solid(160, 120, BGR))
    assert preview.jpegs_encoded == 0
    publisher(preview, solid(320, 240, BGR))  # a different size: resized to the opened 160×120
    with urllib.request.urlopen(authed(preview, preview.url + "stream.mjpg"), timeout=5) as r:
        assert r.headers["Content-Type"] == f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}"
        parts = read_mjpeg_parts(r, 3)
    for headers, body in parts:
        assert headers["content-type"] == "image/jpeg"
        assert body[:2] == b"\xff\xd8" and body[-2:] == b"\xff\xd9"
        image = decode(body)
        assert image.shape == (120, 160, 3)
        assert close_to(image[60, 80], BGR)
    assert preview.jpegs_encoded >= 3


def test_encoding_is_capped_at_the_output_fps(make_config, publisher, solid):
    sink = PreviewSink(make_config(preview={"port": 0}).preview, 160, 120, 10.0)
    sink.open()
    try:
        # The engine publishing far faster than 10 fps: ten frames each time the thread runs, so the
        # ratio below holds however rarely a busy machine schedules it (one at a time, it once sent
        # only 12 frames while 6 were encoded).
        publisher(sink, solid(160, 120, BGR), fps=100, burst=10)
        with urllib.request.urlopen(authed(sink, sink.url + "stream.mjpg"), timeout=5) as r:
            read_mjpeg_parts(r, 1)
            start_count, start = sink.jpegs_encoded, time.monotonic()
            read_mjpeg_parts(r, 5)
            elapsed = time.monotonic() - start
            encoded = sink.jpegs_encoded - start_count
        assert sink.frames_sent > 3 * sink.jpegs_encoded
        assert encoded <= 10.0 * elapsed + 2, f"{encoded} JPEGs in {elapsed:.2f} s at a 10 fps cap"
    finally:
        sink.close()


def test_stats_json_is_the_latest_snapshot_made_plain(preview, solid):
    with urllib.request.urlopen(authed(preview, preview.url + "stats.json"), timeout=5) as r:
        assert r.headers["Content-Type"] == "application/json"
        assert json.loads(r.read()) == {}
    frame = solid(160, 120, BGR)
    preview.send(frame, {"fps": {"published": np.float64(29.5)}, "level": Level.low_res, "frames": {"held": 3}})
    preview.send(frame)  # no stats with this frame: the last snapshot stays
    with urllib.request.urlopen(authed(preview, preview.url + "stats.json"), timeout=5) as r:
        stats = json.loads(r.read())
    assert stats == {"fps": {"published": 29.5}, "level": "low_res", "frames": {"held": 3}}


def test_snapshot(preview, publisher, solid):
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(authed(preview, preview.url + "snapshot.jpg"), timeout=5)
    assert info.value.code == 503  # nothing published yet
    publisher(preview, solid(160, 120, (200, 60, 20)))
    with urllib.request.urlopen(authed(preview, preview.url + "snapshot.jpg"), timeout=5) as r:
        assert r.headers["Content-Type"] == "image/jpeg"
        image = decode(r.read())
    assert image.shape == (120, 160, 3) and close_to(image[60, 80], (200, 60, 20))


def test_unknown_path_and_foreign_host_are_refused(preview):
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(authed(preview, preview.url + "secret"), timeout=5)
    assert info.value.code == 404
    # DNS rebinding: a page from another site whose name resolves to 127.0.0.1.
    request = urllib.request.Request(preview.url + "snapshot.jpg", headers={"Host": f"evil.example:{preview.port}", **bearer(preview)})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 403
    request = urllib.request.Request(preview.url + "stats.json", headers={"Host": f"localhost:{preview.port}", **bearer(preview)})
    with urllib.request.urlopen(request, timeout=5) as r:
        assert r.status == 200


@pytest.mark.parametrize("path", ["", "snapshot.jpg", "stream.mjpg", "stats.json"])
def test_every_page_of_the_preview_needs_its_token(preview, publisher, solid, path):
    """Issue 27 item 2: another local user fetched /snapshot.jpg and /stream.mjpg — with swapping
    off, the raw camera. Without the token (or a wrong one) nothing of it is served."""
    stop = publisher(preview, solid(160, 120, BGR))
    try:
        wrong = preview.access.token[:-1] + ("A" if preview.access.token[-1] != "A" else "B")
        for headers in ({}, {"Authorization": f"Bearer {wrong}"}, {"Cookie": f"facelive_panel_{preview.port}={wrong}"}):
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(urllib.request.Request(preview.url + path, headers=headers), timeout=5)
            assert info.value.code == 401
            body = info.value.read()
            assert b"access token" in body and b"\xff\xd8" not in body and b"<html" not in body.lower()
        with urllib.request.urlopen(authed(preview, preview.url + path), timeout=5) as r:
            assert r.status == 200
    finally:
        stop.set()


def test_the_preview_login_url_works_once_and_carries_no_token(preview):
    url = preview.login_url()
    assert url.startswith(f"{preview.url}?code=") and preview.access.token not in url
    with urllib.request.urlopen(url, timeout=5) as answer:
        assert answer.status == 200 and answer.read() == LOGGED_IN_PAGE  # moves on to "/" by itself
        cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    name_value = cookie.split(";")[0]
    with urllib.request.urlopen(urllib.request.Request(preview.url + "stats.json", headers={"Cookie": name_value}),
                                timeout=5) as r:
        assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as info:  # replayed: worthless once used
        urllib.request.urlopen(url, timeout=5)
    assert info.value.code == 401 and "Set-Cookie" not in info.value.headers


def test_another_web_page_cannot_read_the_preview(preview):
    request = urllib.request.Request(preview.url + "snapshot.jpg",
                                     headers={**bearer(preview), "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 403


def test_idle_connections_without_the_token_cannot_starve_the_owner(preview):
    """As the control page's (issue 27 item 6): idle connections wait for their head without a thread."""
    idle = [socket.create_connection(("127.0.0.1", preview.port), timeout=30) for _ in range(60)]
    try:
        with urllib.request.urlopen(authed(preview, preview.url + "stats.json"), timeout=10) as r:
            assert r.status == 200
    finally:
        for sock in idle:
            sock.close()


@needs_root
def test_another_local_user_gets_nothing_even_with_the_token(preview, publisher, solid):
    stop = publisher(preview, solid(160, 120, BGR))
    try:
        request = (f"GET /snapshot.jpg HTTP/1.0\r\nHost: 127.0.0.1:{preview.port}\r\n"
                   f"Authorization: Bearer {preview.access.token}\r\n\r\n").encode()
        assert as_another_user(preview.port, request).startswith(b"HTTP/1.0 403 ")
    finally:
        stop.set()


def non_loopback_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_listens_only_on_loopback(preview):
    assert preview._server is not None and preview._server.socket.getsockname()[0] == "127.0.0.1"
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to try")
    with pytest.raises(OSError):
        socket.create_connection((address, preview.port), timeout=2).close()


def test_busy_port_is_a_clear_error(make_config):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sink = PreviewSink(make_config(preview={"port": port}).preview, 160, 120, 30.0)
        with pytest.raises(VcamdError) as info:
            sink.open()
    assert f"preview port {port}" in str(info.value) and "[preview] port" in str(info.value)


def test_close_ends_streams_and_the_server(make_config, publisher, solid):
    sink = PreviewSink(make_config(preview={"port": 0}).preview, 160, 120, 30.0)
    sink.open()
    url = sink.url
    stop = publisher(sink, solid(160, 120, BGR))
    with urllib.request.urlopen(authed(sink, url + "stream.mjpg"), timeout=5) as r:
        read_mjpeg_parts(r, 1)
        assert sink.clients == 1
        stop.set()
        sink.close()
        sink.close()  # idempotent
        rest = r.read()  # the server ends the stream instead of leaving the client hanging
        assert len(rest) < 100_000
    for thread in sink._threads:
        assert not thread.is_alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(authed(sink, url), timeout=2)
    sink.send(solid(160, 120, BGR))  # a late frame after close is ignored
