"""The control page in a real browser (Debian's headless chromium, driven over DevTools).

- The one-time login URL logs in (HttpOnly cookie, code gone from the address bar); the page shows the
  live video, the status, the chart, the watchdog's transitions and the config error; real mouse
  clicks switch the swap off, hide the badge, upload a source face with the consent box.
- A page on another origin (a second local server, another port) that fetches and form-POSTs to
  the control page changes nothing, although the browser holds the page's cookie.
- A foreign host name resolving to 127.0.0.1 (DNS rebinding) gets nothing.

Set VCAMD_UPDATE_DOCS=1 to write the checked screenshot to docs/control-page.png.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.common.errors import ConfigError
from vcamd.common.quality import Level
from vcamd.config.reading import config_from_dict
from vcamd.privacy.badge import draw_badge

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FPS_BGR = (0x6F, 0xB2, 0x3F)  # the chart's fps line, #3fb26f


def a_config_error() -> str:
    """A real message from the config loader, as the engine reports a broken edit."""
    with pytest.raises(ConfigError) as err:
        config_from_dict({"swap": {"on_mis": "blur"}}, "~/.config/facelive/config.toml")
    return str(err.value)


def canvas_has_fps_line(page) -> bool:
    return page.eval("""(() => {
        const c = document.getElementById('chart');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 0x3f) < 12 && Math.abs(d[i + 1] - 0xb2) < 12 && Math.abs(d[i + 2] - 0x6f) < 12) n++;
        return n > 300;
    })()""")


def test_the_page_shows_the_daemon_and_drives_it(browser, start_panel, engine, newton, assets, watchdog_history, wait):
    published = newton.copy()
    draw_badge(published, "AI-altered", "bottom-right")  # what the live engine publishes carries it
    engine.publish(published)
    engine.transitions = watchdog_history
    engine.config_error = a_config_error()
    panel = start_panel(history_period_s=0.1)  # the minute's 60 samples fill in 6 s
    page = browser().new_page(1280, 1150)
    page.goto(panel.login_url())
    page.wait("location.pathname === '/' && document.getElementById('state')?.textContent === 'running'",
              "the page, showing the engine's state")
    assert page.eval("location.href") == panel.base_url  # the code left the address bar…
    assert page.eval("document.cookie") == ""  # …into a cookie no script can read
    page.wait("document.getElementById('video').naturalWidth === 768"
              " && getComputedStyle(document.getElementById('video-wait')).display === 'none'",
              "the live video, without the waiting note over it")
    assert page.text("#swap") == "Swap off" and page.text("#swap-state") == "swap on"
    assert page.text("#providers") == "scrfd_500m_kps.onnx: CPUExecutionProvider\ninswapper_128.onnx: CPUExecutionProvider"
    assert page.text("#precision") == ("detector: float\nswapper: int8 — int8 copy checked against float: 8 faces: "
                                       "PSNR ≥ 41.2 dB (needs 35)")
    assert page.text("#server") == ("grpc://gpu-box:8001 up; 21.5 ms round trip; 27.3 ms a call; mutual TLS; "
                                    "serves inswapper_128, inswapper_128.emap")
    assert page.eval("document.getElementById('config-error').hidden") is False
    assert page.text("#config-error") == f"Config problem: {engine.config_error}"
    assert "[swap] on_mis: unknown key" in page.text("#config-error")
    items = page.eval("[...document.querySelectorAll('#transitions li')].map((li) => li.textContent)")
    assert len(items) == len(watchdog_history) == 8
    assert items[0].startswith("faces per round all → 1 · swap_age · p95 12.0 ms, 0% over budget, face p95 4.0 s old")  # newest first
    assert items[1].startswith("full → no_enhancer · swap_age")
    assert items[2].startswith("no_enhancer → full · headroom")
    assert items[-1] == "full → no_enhancer · over_budget · p95 90.0 ms, 100% over budget → after: p95 90.0 ms"
    wait(lambda: len(panel.history.samples()) >= 60, "a full minute of samples")
    page.wait("document.getElementById('fps').textContent !== '–'", "fps shown")
    wait(lambda: canvas_has_fps_line(page), "the fps line drawn on the chart")

    shot = page.screenshot()
    box = page.rect("#video")
    x, y, w, h = (round(box[k]) for k in ("x", "y", "width", "height"))
    assert w > 600 and abs(h - w * 432 / 768) <= 2  # the frame, scaled to the column, aspect kept
    video = shot[y + 2:y + h - 2, x + 2:x + w - 2].astype(int)
    expected = cv2.resize(published, (w, h), interpolation=cv2.INTER_AREA)[2:-2, 2:-2].astype(int)
    assert video.std() > 20  # not a blank area
    assert np.abs(video - expected).mean() < 12, "the video area does not show the engine's frame"
    chart = page.rect("#chart")
    cx, cy, cw, ch = (round(chart[k]) for k in ("x", "y", "width", "height"))
    line = np.abs(shot[cy:cy + ch, cx:cx + cw].astype(int) - np.array(FPS_BGR)).max(axis=2) < 16
    assert line.sum() > 200, "no fps line in the chart on the screenshot"
    if os.environ.get("VCAMD_UPDATE_DOCS"):
        cv2.imwrite(str(REPO / "docs" / "control-page.png"), shot, [cv2.IMWRITE_PNG_COMPRESSION, 9])

    page.click("#swap")  # a real mouse click
    wait(lambda: engine.enabled is False, "swapping off in the engine after clicking Swap off")
    page.wait("document.getElementById('swap').textContent === 'Swap on'", "the button now offers Swap on")
    assert page.text("#swap-state") == "swap off"

    page.click("#badge")
    wait(lambda: engine.badge is False, "the badge hidden in the engine")

    page.eval("(() => { const q = document.getElementById('quality'); q.value = 'low_res';"
              " q.dispatchEvent(new Event('change')); })()")
    wait(lambda: engine.quality is Level.low_res, "quality pinned to low_res")
    page.wait("document.getElementById('level').textContent === 'low_res'", "the level shown")

    photo = assets / "images" / "newton.png"
    page.set_files("#face-file", [photo])
    page.wait("document.getElementById('face-file').files.length === 1", "the file chosen")
    assert page.eval("document.getElementById('face-upload').disabled") is True  # consent box not ticked
    page.click("#consent")
    page.wait("!document.getElementById('face-upload').disabled", "upload allowed once consent is ticked")
    page.click("#face-upload")
    kept = wait(lambda: engine.source_face, "the uploaded face in the engine")
    assert kept.read_bytes() == photo.read_bytes() and kept.name.startswith("newton-")
    page.wait(f"document.getElementById('face-current').textContent === {json.dumps(kept.name)}", "the face shown")
    # The status poll may show the new face before the upload's own answer has been read: wait for it.
    page.wait("document.getElementById('message').textContent === 'source face set: newton.png'", "the upload's answer shown")
    page.wait(f"[...document.getElementById('recent').options].some((o) => o.value === {json.dumps(str(kept))})",
              "the face offered among the recent ones")


def test_the_page_says_what_swapping_needs_and_why_on_is_refused(browser, start_panel, engine, wait):
    """Issue 42: started without consent or a face, the page lists each missing piece with its
    fix, and Swap on is answered with the same list (swapping stays off)."""
    from vcamd.live.readiness import FACE_MISSING, SwapNotReady, consent_missing

    needs = [consent_missing(withdrawn=False), FACE_MISSING]

    class NotReady(type(engine)):
        def status(self):
            return {**super().status(), "swap_needs": [need.to_json() for need in needs]}

        def set_enabled(self, on):
            if on:
                raise SwapNotReady(needs)
            super().set_enabled(on)

    engine.__class__ = NotReady
    engine.enabled = False
    panel = start_panel()
    page = browser().new_page(1280, 900)
    page.goto(panel.login_url())
    page.wait("document.getElementById('swap-needs').hidden === false", "the missing pieces shown")
    items = page.eval("[...document.querySelectorAll('#swap-needs-list li')].map((li) => li.textContent)")
    assert items == [f"{need.what} — {need.fix}" for need in needs]
    assert page.text("#swap-needs-title") == "Swapping stays off until it has:"
    assert page.text("#swap") == "Swap on"
    page.click("#swap")
    page.wait("document.getElementById('message').className === 'message bad'", "the refusal shown")
    assert page.text("#message") == str(SwapNotReady(needs))
    assert engine.enabled is False and ("set_enabled", True) not in engine.calls


ATTACK_PAGE = """<!doctype html>
<html><body><h1>an ordinary web page</h1>
<script>
const P = "http://127.0.0.1:%(port)d", L = "http://localhost:%(port)d";
const results = {};
async function attempt(name, request) {
  try {
    const r = await request();
    let body = "";
    try { body = await r.text(); } catch (e) {}
    results[name] = {status: r.status, type: r.type, body: body.slice(0, 300)};
  } catch (e) { results[name] = {error: String(e)}; }
}
function formPost(action, enctype, fields) {
  return new Promise((resolve) => {
    const name = "f" + Math.random().toString(36).slice(2);
    const frame = document.createElement("iframe");
    frame.name = name;
    frame.onload = () => resolve();
    document.body.appendChild(frame);
    const form = document.createElement("form");
    form.method = "POST"; form.action = action; form.enctype = enctype; form.target = name;
    for (const [k, v] of Object.entries(fields)) {
      const input = document.createElement("input"); input.name = k; input.value = v; form.appendChild(input);
    }
    document.body.appendChild(form);
    form.submit();
  });
}
function frameOf(src) {
  return new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.onload = () => resolve();
    frame.src = src;
    document.body.appendChild(frame);
  });
}
(async () => {
  const plain = {method: "POST", mode: "no-cors", credentials: "include"};
  await attempt("POST off", () => fetch(P + "/api/off", plain));
  await attempt("POST toggle, localhost", () => fetch(L + "/api/toggle", plain));
  await attempt("POST badge, text/plain", () => fetch(P + "/api/badge", {...plain, headers: {"Content-Type": "text/plain"}, body: '{"on": false}'}));
  await attempt("POST quality, JSON", () => fetch(P + "/api/quality", {method: "POST", credentials: "include",
    headers: {"Content-Type": "application/json"}, body: '{"level": "frame_skip"}'}));
  await attempt("POST face", () => fetch(P + "/api/face?consent=yes&name=x.png", {...plain, body: new Blob(["not a photo"])}));
  await attempt("read status", () => fetch(P + "/api/status", {credentials: "include"}));
  await attempt("read status, no-cors", () => fetch(P + "/api/status", {mode: "no-cors", credentials: "include"}));
  await formPost(P + "/api/off", "application/x-www-form-urlencoded", {a: "1"});
  await formPost(P + "/api/toggle", "multipart/form-data", {a: "1"});
  await formPost(L + "/api/badge", "text/plain", {'{"on": false, "x": "': '"}'});
  await formPost(P + "/api/quality", "text/plain", {'{"level": "frame_skip", "x": "': '"}'});
  await frameOf(P + "/");
  window.results = results;
  document.title = "done";
})();
</script></body></html>
"""


class _AttackHandler(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def attack_site():
    """`attack_site(panel_port)` → URL of an ordinary page on another local port that attacks it."""
    servers = []

    def start(port: int) -> str:
        handler = type("Handler", (_AttackHandler,), {"page": (ATTACK_PAGE % {"port": port}).encode()})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_page_on_another_origin_cannot_drive_it(browser, panel, engine, attack_site, wait):
    chrome = browser()
    own = chrome.new_page()
    own.goto(panel.login_url())  # the user has the control page open: the browser holds its cookie
    own.wait("document.getElementById('state')?.textContent === 'running'", "the control page")
    before = (engine.enabled, engine.quality, engine.badge, engine.source_face, engine.face_calls)
    refused_before = panel.refusals[403]

    other = chrome.new_page()
    other.goto(attack_site(panel.port))
    other.wait("document.title === 'done'", "the other page's attempts", timeout_s=90)
    results = other.eval("window.results")

    assert (engine.enabled, engine.quality, engine.badge, engine.source_face, engine.face_calls) == before
    assert not panel.faces_dir.exists() or not any(panel.faces_dir.iterdir())
    assert "error" in results["read status"], results["read status"]  # nothing read back…
    assert "error" in results["POST quality, JSON"]  # …the preflight is refused…
    assert panel.token not in json.dumps(results)
    for name in ("POST off", "POST toggle, localhost", "POST badge, text/plain", "POST face", "read status, no-cors"):
        assert results[name].get("type") == "opaque" or "error" in results[name], (name, results[name])
    # …and the requests that did reach the control page were refused there (9 sent with its cookie).
    assert panel.refusals[403] - refused_before >= 9, panel.refusals
    # The user's own tab still works.
    own.click("#swap")
    wait(lambda: engine.enabled is False, "the user's own click still works")


def test_a_rebound_host_name_gets_nothing(browser, panel, engine):
    chrome = browser("--host-resolver-rules=MAP rebind.test 127.0.0.1")
    page = chrome.new_page()
    page.goto(f"http://rebind.test:{panel.port}/?code={panel.access.one_time_code()}")  # even with a live code
    page.wait("document.readyState === 'complete' && document.body?.textContent.includes('refused')", "the refusal")
    assert "is not this control page's address" in page.eval("document.body.textContent")
    assert page.eval("document.getElementById('video')") is None
    status = page.eval("fetch('/api/off', {method: 'POST'}).then((r) => r.status)")
    assert status == 403
    assert engine.enabled is True


def test_the_private_login_page_logs_the_browser_in(browser, panel, engine, newton, tmp_path):
    """Issue 36 item 1: `vcamd panel` and the tray hand the browser a 0600 file, not an address.
    From that file:// page (another site, to the browser) the one-time code logs in and the page
    opens with its Strict cookie — which a 303 after a cross-site login would not have sent."""
    from vcamd.panel.login import login_page

    engine.publish(newton.copy())
    page_file = login_page(panel.login_url(), tmp_path / "rt")
    page = browser().new_page()
    page.goto(page_file.as_uri())
    page.wait("location.href === " + json.dumps(panel.base_url)
              + " && document.getElementById('state')?.textContent === 'running'", "the control page, logged in")
    assert page.eval("document.cookie") == ""  # the cookie is HttpOnly
    # Issue 36 item 5: a group photo's pick is shown beside the face in use.
    engine.source_face, engine.source_face_pick = Path("/faces/solvay.png"), "the largest of the 29 faces in the photo"
    page.wait("document.getElementById('face-current').textContent === 'solvay.png — the largest of the 29 faces in the photo'",
              "the face in use, with which face of the group photo was taken")
    page.goto(page_file.as_uri())  # the same file again: its code is used up
    page.wait("document.body?.innerText.includes('used already')", "the used code refused")
