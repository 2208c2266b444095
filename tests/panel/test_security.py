"""Every rule of the control page's gate, over real HTTP against the real server.

The engine behind the page must be untouched by every refused request: each test checks the
engine's state, not only the status code.
"""

from __future__ import annotations

import json
import socket
import threading
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler
from urllib.parse import quote

import pytest
from support.users import as_another_user, needs_root

from vcamd.pages.gate import GUEST, OWNER, GatedHTTPServer
from vcamd.pages.security import LOGGED_IN_PAGE
from vcamd.panel.faces import MAX_UPLOAD_BYTES

CHANGES = ["/api/on", "/api/off", "/api/toggle", "/api/quality", "/api/face", "/api/badge"]
READS = ["/", "/panel.js", "/panel.css", "/api/status", "/stream.mjpg"]


def own_origin(panel) -> str:
    return f"http://127.0.0.1:{panel.port}"


def engine_state(engine) -> tuple:
    return engine.enabled, engine.quality, engine.badge, engine.source_face, engine.face_calls


@pytest.mark.parametrize("path", READS)
def test_every_read_needs_the_token(panel, http, path):
    answer = http(panel, "GET", path, auth=None)
    assert answer.status == 401
    assert b"vcamd panel" in answer.body  # says how to get in
    assert b"<html" not in answer.body.lower()  # nothing of the page itself


@pytest.mark.parametrize("path", CHANGES)
def test_every_change_needs_the_token(panel, engine, http, path):
    before = engine_state(engine)
    answer = http(panel, "POST", path, auth=None, origin=own_origin(panel),
                  body=b'{"level": "low_res", "on": false}', headers={"Content-Type": "application/json"})
    assert answer.status == 401
    assert "access token" in answer.error
    assert engine_state(engine) == before


def test_a_wrong_token_is_refused_in_header_and_cookie(panel, engine, http):
    wrong = panel.token[:-1] + ("A" if panel.token[-1] != "A" else "B")  # one character off
    assert http(panel, "GET", "/api/status", auth=None, headers={"Authorization": f"Bearer {wrong}"}).status == 401
    assert http(panel, "GET", "/api/status", auth=None,
                headers={"Cookie": f"facelive_panel_{panel.port}={wrong}"}).status == 401
    answer = http(panel, "POST", "/api/off", auth=None, headers={"Authorization": f"Bearer {wrong}"})
    assert answer.status == 401 and engine.enabled is True


def test_the_login_url_sets_a_strict_httponly_cookie_and_carries_no_token(panel, http):
    url = panel.login_url()
    assert panel.token not in url  # what goes on the opener's command line is not the token
    answer = http(panel, "GET", url.removeprefix(panel.base_url[:-1]), auth=None)
    assert answer.status == 200 and answer.body == LOGGED_IN_PAGE
    # The code leaves the address bar by a visit of the page's own to "/" (a 303 would carry a
    # cross-site login's origin along, and the browser would withhold the Strict cookie).
    assert b'http-equiv="refresh" content="0;url=/"' in answer.body
    cookie = answer.headers["Set-Cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "path"} <= attributes
    assert "SameSite=Strict" in cookie
    jar = SimpleCookie(cookie)
    name = f"facelive_panel_{panel.port}"
    assert jar[name].value == panel.token
    page = http(panel, "GET", "/", auth=None, headers={"Cookie": f"{name}={jar[name].value}"})
    assert page.status == 200 and b'id="video"' in page.body


def test_a_login_url_works_once_and_is_worthless_afterwards(panel, engine, http):
    """Issue 27 item 1: the address handed to the browser (on a command line every local user can
    read) must not be a lasting secret. Once the browser used it, another user replaying it gets nothing."""
    path = panel.login_url().removeprefix(panel.base_url[:-1])
    assert http(panel, "GET", path, auth=None).status == 200  # the user's browser
    replay = http(panel, "GET", path, auth=None)  # the other user, who read the command line
    assert replay.status == 401 and "Set-Cookie" not in replay.headers
    assert b"used already" in replay.body
    # Nor does anything in the address work as a token.
    code = path.partition("code=")[2]
    assert http(panel, "POST", "/api/off", auth=None, headers={"Authorization": f"Bearer {code}"}).status == 401
    assert engine.enabled is True


def test_the_token_itself_in_the_address_logs_nobody_in(panel, http):
    for path in (f"/?token={panel.token}", f"/?code={panel.token}"):
        answer = http(panel, "GET", path, auth=None)
        assert answer.status == 401 and "Set-Cookie" not in answer.headers


def test_a_login_code_is_minted_only_for_the_token_holder(panel, http):
    answer = http(panel, "POST", "/api/login-code")  # Bearer: a script, or `vcamd panel`
    assert answer.status == 200 and answer.json()["url"].startswith(f"{panel.base_url}?code=")
    assert http(panel, "POST", "/api/login-code", auth=None).status == 401
    assert http(panel, "GET", answer.json()["url"].removeprefix(panel.base_url[:-1]), auth=None).status == 200


def test_a_login_code_expires(panel, http, monkeypatch):
    import vcamd.pages.security as security

    path = panel.login_url().removeprefix(panel.base_url[:-1])
    monkeypatch.setattr(security, "CODE_TTL_S", -1.0)  # codes minted from now on are born expired
    late = panel.login_url().removeprefix(panel.base_url[:-1])
    assert http(panel, "GET", late, auth=None).status == 401
    assert http(panel, "GET", path, auth=None).status == 200  # the earlier one is still live


def test_an_old_login_url_is_refused(panel, http):
    answer = http(panel, "GET", "/?code=not-a-code", auth=None)
    assert answer.status == 401 and "Set-Cookie" not in answer.headers
    assert b"vcamd panel" in answer.body


@pytest.mark.parametrize("host", ["evil.example:{port}", "127.0.0.1", "localhost", "localhost:{other}",
                                  "127.0.0.1:{other}", "[::1]:{port}", "127.0.0.1:{port}.evil.example"])
def test_a_foreign_host_header_is_refused_even_with_the_token(panel, engine, http, host):
    host = host.format(port=panel.port, other=panel.port + 1)
    for method, path in (("GET", "/"), ("GET", "/api/status"), ("GET", "/stream.mjpg"), ("POST", "/api/off")):
        answer = http(panel, method, path, host=host, origin=f"http://{host}")
        assert answer.status in (403, 421), (method, path, answer.status)
        assert "Host" in answer.body.decode()
    assert engine.enabled is True


def test_a_missing_host_header_is_refused(panel, http):
    assert http(panel, "GET", "/api/status", host=None).status == 403


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}"])
def test_the_loopback_names_are_accepted(panel, http, host):
    assert http(panel, "GET", "/api/status", host=host.format(port=panel.port)).status == 200


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:{other}",
                                    "http://localhost:{other}", "https://127.0.0.1:{port}"])
def test_a_change_from_another_origin_is_refused(panel, engine, http, origin):
    origin = origin.format(port=panel.port, other=panel.port + 1)
    before = engine_state(engine)
    for auth in ("cookie", "bearer"):
        for path in CHANGES:
            answer = http(panel, "POST", path, auth=auth, origin=origin, body=b'{"level": "low_res", "on": false}',
                          headers={"Content-Type": "application/json"})
            assert answer.status == 403, (auth, path)
            assert "another origin" in answer.error
    assert engine_state(engine) == before


def test_a_cookie_change_without_origin_is_refused_but_bearer_scripts_work(panel, engine, http):
    answer = http(panel, "POST", "/api/off", auth="cookie")
    assert answer.status == 403 and "Bearer" in answer.error
    assert engine.enabled is True
    answer = http(panel, "POST", "/api/off", auth="bearer")  # curl / scripts
    assert answer.status == 200 and answer.json()["status"]["enabled"] is False
    assert engine.enabled is False


def test_the_page_itself_may_change_things(panel, engine, http):
    for origin in (own_origin(panel), f"http://localhost:{panel.port}"):
        engine.enabled = True
        answer = http(panel, "POST", "/api/toggle", auth="cookie", origin=origin,
                      headers={"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"})
        assert answer.status == 200
        assert engine.enabled is False


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_what_the_browser_marks_as_sent_by_another_page_is_refused(panel, engine, http, site):
    fetch = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
    assert http(panel, "GET", "/stream.mjpg", auth="cookie", headers=fetch).status == 403
    assert http(panel, "GET", "/api/status", auth="cookie", headers={**fetch, "Sec-Fetch-Dest": "empty"}).status == 403
    framed = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}
    assert http(panel, "GET", "/", auth="cookie", headers=framed).status == 403
    answer = http(panel, "POST", "/api/off", auth="cookie", origin=own_origin(panel),
                  headers={"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
    assert answer.status == 403 and engine.enabled is True
    # Following a link to the page shows it to the user; that lets the other page do nothing.
    visit = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    assert http(panel, "GET", "/", auth="cookie", headers=visit).status == 200


@pytest.mark.parametrize("path", CHANGES)
def test_a_get_on_a_change_is_405(panel, engine, http, path):
    answer = http(panel, "GET", path)
    assert answer.status == 405
    assert answer.headers["Allow"] == "POST"
    assert "takes POST" in answer.error
    assert engine.enabled is True


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_are_405(panel, http, method):
    assert http(panel, method, "/api/off", origin=own_origin(panel)).status == 405
    assert http(panel, method, "/api/status").status == 405


def test_a_post_on_a_read_is_405(panel, http):
    answer = http(panel, "POST", "/api/status", origin=own_origin(panel))
    assert answer.status == 405 and answer.headers["Allow"] == "GET"


def test_unknown_paths_are_404_only_behind_the_token(panel, http):
    assert http(panel, "GET", "/../../etc/passwd", auth=None).status == 401
    assert http(panel, "GET", "/../../etc/passwd").status == 404
    assert http(panel, "GET", "/static/index.html").status == 404


def test_every_answer_forbids_framing_caching_and_inline_code(panel, http):
    for answer in (http(panel, "GET", "/"), http(panel, "GET", "/api/status", auth=None)):
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
        assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
        assert answer.headers["Cache-Control"] == "no-store"
        assert answer.headers["Referrer-Policy"] == "no-referrer"
        assert "Access-Control-Allow-Origin" not in answer.headers


# ---- uploads ------------------------------------------------------------------------------------


def upload(http, panel, data: bytes, *, consent: bool = True, name: str = "photo.png"):
    query = f"?consent=yes&name={quote(name)}" if consent else f"?name={quote(name)}"
    return http(panel, "POST", f"/api/face{query}", body=data, origin=own_origin(panel), auth="cookie",
                headers={"Content-Type": "image/png"})


def stored(panel) -> list:
    return sorted(panel.faces_dir.iterdir()) if panel.faces_dir.exists() else []


def test_an_oversized_upload_is_413_with_a_clear_message(panel, engine, http):
    answer = upload(http, panel, b"\x89PNG\r\n\x1a\n" + b"\0" * MAX_UPLOAD_BYTES)  # one limit + 8 bytes
    assert answer.status == 413
    assert answer.error.startswith("the photo is 21.0 MB; the control page takes photos up to 20 MB")
    assert "use a smaller photo" in answer.error
    assert engine.source_face is None and engine.face_calls == 0
    assert stored(panel) == []  # refused from its Content-Length, before a byte was stored


def test_a_non_image_upload_is_400_with_read_images_message(panel, engine, http):
    answer = upload(http, panel, b"%PDF-1.4 this is not a photo\n" * 50, name="report.pdf")
    assert answer.status == 400
    # read_image's words and fix, naming the file the user picked (not the private temporary copy).
    assert answer.error.startswith('uploaded photo "report.pdf" is not a readable image (not a format Pillow knows)')
    assert "cannot identify" not in answer.error and "'\"" not in answer.error  # not Pillow's quoted path
    assert answer.error.endswith(" — give a JPEG or PNG photo")
    assert ".upload-" not in answer.error
    assert engine.source_face is None and engine.face_calls == 0
    assert stored(panel) == []  # the temporary file is gone too


def test_an_animated_upload_is_refused_with_read_images_message(panel, engine, http, tmp_path):
    from PIL import Image

    frames = [Image.new("RGB", (64, 64), color) for color in ("red", "blue")]
    gif = tmp_path / "anim.gif"
    frames[0].save(gif, save_all=True, append_images=frames[1:])
    answer = upload(http, panel, gif.read_bytes(), name="anim.gif")
    assert answer.status == 400 and "is animated (2 frames)" in answer.error
    assert engine.source_face is None and stored(panel) == []


def test_an_upload_without_consent_is_refused(panel, engine, http, assets):
    answer = upload(http, panel, (assets / "images" / "newton.png").read_bytes(), consent=False)
    assert answer.status == 400
    assert "consent not confirmed" in answer.error
    assert engine.source_face is None and engine.face_calls == 0
    assert stored(panel) == []


def test_a_photo_upload_is_stored_privately_and_used(panel, engine, http, assets, recent):
    photo = (assets / "images" / "newton.png").read_bytes()
    answer = upload(http, panel, photo, name="../../Isaac Newton.png")
    assert answer.status == 200, answer.body
    kept = engine.source_face
    assert kept is not None and kept.parent == panel.faces_dir
    assert kept.name.startswith("Isaac_Newton-") and kept.suffix == ".png"  # no path tricks from the name
    assert kept.read_bytes() == photo
    assert kept.stat().st_mode & 0o777 == 0o600
    assert panel.faces_dir.stat().st_mode & 0o777 == 0o700
    assert stored(panel) == [kept]
    assert recent.list() == [kept]  # the tray's recent list, the same file
    assert answer.json()["recent_faces"] == [{"path": str(kept), "name": kept.name}]


def test_a_recent_face_is_picked_and_nothing_else(panel, engine, http, assets, recent, tmp_path):
    newton = assets / "images" / "newton.png"
    recent.add(newton)
    headers = {"Content-Type": "application/json"}
    elsewhere = tmp_path / "not_recent.png"
    elsewhere.write_bytes(newton.read_bytes())
    for body in ({"recent": str(elsewhere), "consent": True}, {"recent": "/etc/passwd", "consent": True}):
        answer = http(panel, "POST", "/api/face", origin=own_origin(panel), headers=headers,
                      body=json.dumps(body).encode())
        assert answer.status == 400 and "is not one of the recent source faces" in answer.error
    answer = http(panel, "POST", "/api/face", origin=own_origin(panel), headers=headers,
                  body=b'{"recent": "%s", "consent": false}' % str(newton).encode())
    assert answer.status == 400 and "consent not confirmed" in answer.error
    assert engine.source_face is None
    answer = http(panel, "POST", "/api/face", origin=own_origin(panel), headers=headers,
                  body=b'{"recent": "%s", "consent": true}' % str(newton).encode())
    assert answer.status == 200
    assert engine.source_face == newton


# ---- bounded resources --------------------------------------------------------------------------


def hold_owner_slot(panel) -> socket.socket:
    """A request with the token whose body never comes: it holds an owner's slot until closed."""
    sock = socket.create_connection(("127.0.0.1", panel.port))
    sock.sendall(f"POST /api/quality HTTP/1.0\r\nHost: 127.0.0.1:{panel.port}\r\nAuthorization: Bearer {panel.token}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n".encode())
    return sock


def test_owner_connections_are_capped_and_freed(start_panel, http, wait):
    panel = start_panel(max_connections=3, request_timeout_s=30.0)
    held = [hold_owner_slot(panel) for _ in range(3)]
    try:
        # The three stalled requests hold every owner's slot: the next one is told so at once.
        def busy():
            try:
                return http(panel, "GET", "/api/status", timeout_s=5).status == 503
            except OSError:
                return False
        wait(busy, "a 503 while every connection slot is taken")
    finally:
        for sock in held:
            sock.close()
    wait(lambda: http(panel, "GET", "/api/status").status == 200, "service once the stalled requests closed")


def idle_sockets(panel, count: int, first_bytes: bytes = b"") -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", panel.port), timeout=30)
        if first_bytes:
            sock.sendall(first_bytes)
        sockets.append(sock)
    return sockets


@pytest.mark.parametrize("first_bytes", [b"", b"GET /api/status HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Slow: "],
                         ids=["silent", "slowloris"])
@pytest.mark.parametrize("count", [40, 200])
def test_idle_connections_without_the_token_cannot_starve_the_owner(start_panel, http, wait, first_bytes, count):
    """Issue 27 item 6: 40 idle connections, no token needed, made every page request answer 503.
    Connections get a slot only once their head says whose they are; the idle ones wait without
    one (and make room for new ones past `max_pending`), then are dropped after head_timeout_s."""
    panel = start_panel(request_timeout_s=30.0, head_timeout_s=20.0)
    idle = idle_sockets(panel, count, first_bytes)
    try:
        assert http(panel, "GET", "/api/status").status == 200
        answer = http(panel, "POST", "/api/off")
        assert answer.status == 200 and answer.json()["status"]["enabled"] is False
    finally:
        for sock in idle:
            sock.close()


def test_tokenless_requests_fill_only_the_guests_pool(start_panel, http, engine):
    """Tokenless requests whose bodies never come hold the guests' threads, not the owner's."""
    panel = start_panel(request_timeout_s=30.0, head_timeout_s=20.0, max_guests=2)
    head = (f"POST /api/off HTTP/1.0\r\nHost: 127.0.0.1:{panel.port}\r\nContent-Length: 100\r\n\r\n").encode()
    guests = idle_sockets(panel, 40, head)
    try:
        assert http(panel, "GET", "/api/status").status == 200
        assert http(panel, "GET", "/api/status", auth=None).status in (401, 503)  # a guest: its own pool
        assert engine.enabled is True
    finally:
        for sock in guests:
            sock.close()


def test_a_head_that_never_completes_is_dropped_with_408(start_panel):
    panel = start_panel(head_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", panel.port)) as sock:
        sock.settimeout(30)
        sock.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 408 ") and b"no complete request head" in answer


def test_a_client_that_sends_nothing_is_dropped(start_panel):
    # Its head never comes, so head_timeout_s is the bound that drops it (5 s by default).
    panel = start_panel(request_timeout_s=0.5, head_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", panel.port)) as sock:
        sock.settimeout(30)
        assert sock.recv(1024) == b""  # the server closed it, instead of keeping a thread for ever


def test_shutdown_ends_the_accept_loop_without_waiting_for_its_poll(wait):
    """socketserver's own loop looks for a shutdown once per poll_interval: every closed page, and
    every quit of the daemon, waited for it. An hour's poll here: shutdown() must not wait for it."""
    server = GatedHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler, classify=lambda method, target, headers: GUEST,
                             limits={OWNER: 1, GUEST: 1}, read_timeouts={OWNER: 30.0, GUEST: 30.0})
    loop = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 3600.0}, daemon=True)
    loop.start()
    try:
        with socket.create_connection(server.server_address, timeout=30):
            wait(lambda: server.waiting == 1, "the loop to accept a connection (it is in its wait)")
        stopping = threading.Thread(target=server.shutdown, daemon=True)
        stopping.start()
        stopping.join(60)
        assert not stopping.is_alive(), "shutdown() is waiting for the accept loop's next poll"
        loop.join(60)
        assert not loop.is_alive()
    finally:
        server.server_close()


# ---- malformed requests (issue 27 item 7): a 4xx and one log line, never a traceback --------------


def raw_request(panel, head: str, body: bytes = b"", *, token: bool = True, close_write: bool = False) -> bytes:
    """Send a hand-written request on a raw socket; return everything answered until the server closes."""
    lines = [head.removesuffix("\r\n"), f"Host: 127.0.0.1:{panel.port}"]
    if token:
        lines.append(f"Authorization: Bearer {panel.token}")
    with socket.create_connection(("127.0.0.1", panel.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.0 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


def panel_lines(caplog) -> list:
    return [r for r in caplog.records if r.name.startswith("vcamd.panel") and r.levelno >= 20]


@pytest.mark.parametrize("digit", ["²", "³", "١٢", "1_0", "+5", " 12 3"])
@pytest.mark.parametrize("token", [True, False])
def test_a_content_length_that_is_not_ascii_digits_is_400_or_401(panel, engine, caplog, digit, token):
    caplog.set_level("INFO", logger="vcamd.panel")
    caplog.clear()
    answer = raw_request(panel, f"POST /api/quality HTTP/1.0\r\nContent-Type: application/json\r\n"
                                f"Origin: http://127.0.0.1:{panel.port}\r\nContent-Length: {digit}\r\n", b'{"level": "low_res"}',
                         token=token)
    assert status_of(answer) == (400 if token else 401)
    if token:
        assert b"bad Content-Length" in answer
    lines = panel_lines(caplog)
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
    assert engine.quality is None


def test_deeply_nested_json_is_400_not_a_recursion_error(panel, engine, caplog):
    caplog.set_level("INFO", logger="vcamd.panel")
    body = b"[" * 30_000 + b"]" * 30_000  # 60 KB: under the JSON size bound
    answer = raw_request(panel, f"POST /api/quality HTTP/1.0\r\nContent-Type: application/json\r\n"
                                f"Content-Length: {len(body)}\r\n", body)
    assert status_of(answer) == 400 and b"nested more than 8 levels deep" in answer
    lines = panel_lines(caplog)
    assert len(lines) == 1 and lines[0].exc_info is None
    assert engine.quality is None


@pytest.mark.parametrize("body", [
    b'{"level": ' + b"7" * 5000 + b"}",  # 500 "internal error" with a traceback before (int's digit limit)
    b'{"level": 1e99999}',
    b'{"level": NaN}',
    b'{"level": "\\ud800"}',
    b'{"a": ' * 20 + b"1" + b"}" * 20,
    b"\xff\xfe",
    b'"auto"',
], ids=["5000-digit-int", "overflowing-float", "nan", "lone-surrogate", "nested-objects", "not-utf8", "not-an-object"])
def test_every_hostile_json_body_is_one_400_line(panel, engine, caplog, body):
    """Issue 36 item 2, the page's side: bounded as the control socket is (`vcamd.common.boundedjson`)."""
    caplog.set_level("INFO", logger="vcamd.panel")
    answer = raw_request(panel, f"POST /api/quality HTTP/1.0\r\nContent-Type: application/json\r\n"
                                f"Content-Length: {len(body)}\r\n", body)
    assert status_of(answer) == 400, answer
    assert b"the request body " in answer and b"internal error" not in answer
    lines = panel_lines(caplog)
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
    assert engine.quality is None


@pytest.mark.parametrize("route", ["/api/quality", "/api/face?consent=yes"])
@pytest.mark.parametrize("close_write", [True, False])
def test_a_body_shorter_than_its_content_length_is_4xx(start_panel, engine, caplog, route, close_write):
    panel = start_panel(request_timeout_s=0.5)
    caplog.set_level("INFO", logger="vcamd.panel")
    caplog.clear()
    kind = "application/json" if route == "/api/quality" else "image/png"
    answer = raw_request(panel, f"POST {route} HTTP/1.0\r\nContent-Type: {kind}\r\nContent-Length: 100\r\n",
                         b'{"level": ', close_write=close_write)
    assert status_of(answer) in (400, 408), answer
    assert (b"ended after" if close_write else b"stalled") in answer
    lines = panel_lines(caplog)
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
    assert engine.quality is None and engine.face_calls == 0


# ---- another local user (issue 27 items 1 and 2: the class is "another user reaches the page") ----


@needs_root
def test_another_local_user_is_refused_even_with_the_token_or_a_code(panel, engine):
    """Whatever another user has read (a token, a one-time code on a command line), their
    connection is refused: the kernel's socket table says whose the client socket is."""
    host = f"Host: 127.0.0.1:{panel.port}\r\n"
    with_token = f"POST /api/off HTTP/1.0\r\n{host}Authorization: Bearer {panel.token}\r\n\r\n".encode()
    assert as_another_user(panel.port, with_token).startswith(b"HTTP/1.0 403 ")
    code = panel.login_url().partition("code=")[2]
    assert as_another_user(panel.port, f"GET /?code={code} HTTP/1.0\r\n{host}\r\n".encode()).startswith(b"HTTP/1.0 403 ")
    assert engine.enabled is True
    assert panel.access.redeem(code)  # the code was not used up by the refused attempt


def test_the_peer_uid_of_a_loopback_connection_is_read_from_the_socket_table():
    import os

    from vcamd.common.peers import loopback_peer_uid

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            accepted, _ = server.accept()
            with accepted:
                expected = os.geteuid() if os.path.exists("/proc/net/tcp") else None
                assert loopback_peer_uid(accepted) == expected
                assert loopback_peer_uid(accepted, tables=("/nonexistent",)) is None
        assert client.fileno() == -1


def table_address(host: str, port: int) -> str:
    """An address as /proc/net/tcp* prints it: each 32-bit word in host byte order, then the port."""
    import ipaddress
    import struct

    raw = ipaddress.ip_address(host).packed
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


def table_row(local: tuple[str, int], remote: tuple[str, int], uid: int, state: str = "01") -> str:
    return (f"   0: {table_address(*local)} {table_address(*remote)} {state} 00000000:00000000 00:00000000 "
            f"00000000 {uid:>5}        0 4242 1 0000000000000000 20 4 30 10 -1\n")


HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


@pytest.mark.parametrize("mapped", [False, True], ids=["tcp", "tcp6-ipv4-mapped"])
def test_the_peer_is_found_by_the_whole_connection_not_by_its_port(tmp_path, mapped):
    """Issue 36 item 1: another user's socket bound to the owner's client port on another loopback
    address (127.0.0.2, or an IPv6 socket's ::ffff:127.0.0.2) was taken for the owner's, whose row
    came first in the table. Only the row with both ends of this very connection counts."""
    from vcamd.common.peers import PeerUnknown, loopback_peer_uid

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        family = socket.AF_INET6 if mapped else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as client:
            client.bind(("::ffff:127.0.0.2" if mapped else "127.0.0.2", 0))
            client.connect(("::ffff:127.0.0.1" if mapped else "127.0.0.1", server.getsockname()[1]))
            accepted, _ = server.accept()
            with accepted:
                page, theirs = accepted.getsockname(), accepted.getpeername()
                assert theirs[0] == "127.0.0.2"
                port = theirs[1]
                prefix = "::ffff:" if mapped else ""
                owner_row = table_row(("127.0.0.1", port), page, uid=1000)  # the owner's own connection, same port
                stranger_row = table_row((prefix + "127.0.0.2", port), (prefix + page[0], page[1]), uid=4242)
                tcp, tcp6 = tmp_path / "tcp", tmp_path / "tcp6"
                tcp.write_text(HEADER + owner_row + ("" if mapped else stranger_row))
                tcp6.write_text(HEADER + (stranger_row if mapped else ""))
                assert loopback_peer_uid(accepted, tables=(str(tcp), str(tcp6))) == 4242
                # The same ports in a closed leftover (TIME_WAIT, uid 0) or with the ends swapped are not it.
                tcp.write_text(HEADER + owner_row + table_row(page, ("127.0.0.2", port), uid=0)
                               + table_row(("127.0.0.2", port), page, uid=0, state="06"))
                tcp6.write_text(HEADER)
                with pytest.raises(PeerUnknown):
                    loopback_peer_uid(accepted, tables=(str(tcp), str(tcp6)))


@needs_root
@pytest.mark.parametrize("prefix", ["", "::ffff:"], ids=["ipv4", "ipv6-ipv4-mapped"])
def test_another_user_on_the_owners_client_port_is_refused(panel, engine, prefix):
    """Issue 36 item 1, end to end: the owner keeps the live video open; another user binds that
    connection's port number on another loopback address and asks the page with the token (read
    anywhere): refused, every time."""
    host = f"127.0.0.1:{panel.port}"
    video = socket.create_connection(("127.0.0.1", panel.port), timeout=30)
    try:
        video.sendall(f"GET /stream.mjpg HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer {panel.token}\r\n\r\n".encode())
        assert video.recv(64).startswith(b"HTTP/1.0 200")  # the owner's connection is in the table now
        port = video.getsockname()[1]
        request = f"POST /api/off HTTP/1.0\r\nHost: {host}\r\nAuthorization: Bearer {panel.token}\r\n\r\n".encode()
        # Each try from another loopback address: one connection's leftover (TIME_WAIT) blocks its exact ends.
        answers = [as_another_user(panel.port, request, bind=(f"{prefix}127.0.0.{n}", port)) for n in range(2, 10)]
        assert all(a.startswith(b"HTTP/1.0 403 ") for a in answers), answers
        assert engine.enabled is True
    finally:
        video.close()
