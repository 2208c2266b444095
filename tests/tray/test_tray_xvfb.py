"""The real tray icon under Xvfb, docked in a real system tray host (Debian's `trayer`).

`tray_host.py` runs `vcamd.tray.run_tray` in a subprocess (pystray's xorg backend, as on an X11
desktop) around an in-test controller that logs its calls. The test finds the docked icon window
with python-xlib, clicks it with xdotool (real X input: the click is the icon's default action,
the hidden "Switch the swap" item), and checks screenshots of the docked icon taken with XGetImage.

pystray's xorg backend has no pop-up menu (HAS_MENU is False: a left click runs the default item,
nothing else), so the other menu items are activated through pystray's Menu API inside the process
that hosts the icon (`invoke Quality/Lower resolution` on the harness's stdin) — the same call the
gtk/appindicator backends make when a user clicks the item.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vcamd.tray import TrayState

TRAY_HOST = Path(__file__).resolve().parent / "tray_host.py"


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def events(path: Path, name: str) -> list:
    return [e["value"] for e in read_log(path) if e["event"] == name]


@pytest.fixture
def tray_process(x_session, tmp_path, assets, wait_for):
    log = tmp_path / "calls.jsonl"
    process = subprocess.Popen(
        [sys.executable, str(TRAY_HOST), "--log", str(log),
         "--face", str(assets / "images" / "newton.png"), "--face", str(assets / "images" / "crowd_selfie.jpg")],
        env=x_session.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(lambda: events(log, "ready") or process.poll() is not None, "the tray host to start")
        if process.poll() is not None:
            pytest.fail(f"tray host exited {process.returncode}: {process.stdout.read()[-2000:]}")
        yield process, log
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def send(process, line: str) -> None:
    process.stdin.write(line + "\n")
    process.stdin.flush()


def test_icon_docks_clicks_and_menu_drive_the_controller(x_session, tray_process, tmp_path, wait_for, xscreen):
    from Xlib.display import Display
    from Xlib.error import BadMatch

    process, log = tray_process
    display = Display(x_session.display)
    try:
        root = display.screen().root

        # 1. The icon docks: its window is embedded (reparented) into trayer's panel and mapped.
        icon = wait_for(lambda: xscreen.find_icon_window(display), "the tray icon window")
        wait_for(lambda: xscreen.toplevel_of(icon, root).id != icon.id, "the icon to be embedded in trayer")
        panel = xscreen.toplevel_of(icon, root)
        assert panel.get_wm_class() == ("panel", "trayer")
        assert icon.get_attributes().map_state == 2  # IsViewable
        geometry = icon.get_geometry()
        assert geometry.width >= 16 and geometry.height >= 16

        def state_on_screen():
            try:
                return xscreen.dominant_state(xscreen.screenshot(display, icon))
            except BadMatch:  # trayer moved the icon while we read it (it re-lays out the panel): retry
                return None

        # 2. A screenshot of the docked icon shows the "on" colour.
        wait_for(lambda: state_on_screen() is TrayState.on, "the docked icon to show 'on'")
        xscreen.screenshot(display, icon).save(tmp_path / "tray-on.png")

        # 3. A real click on the icon (the default action switches the swap) turns it off; the icon turns grey.
        origin = root.translate_coords(icon, 0, 0)
        centre = (origin.x + geometry.width // 2, origin.y + geometry.height // 2)
        subprocess.run(["xdotool", "mousemove", str(centre[0]), str(centre[1]), "click", "1"],
                       env=x_session.env, check=True, timeout=10)
        wait_for(lambda: events(log, "set_enabled") == [False], "the click to reach the controller")
        wait_for(lambda: state_on_screen() is TrayState.off, "the docked icon to show 'off'")
        xscreen.screenshot(display, icon).save(tmp_path / "tray-off.png")
        subprocess.run(["xdotool", "click", "1"], env=x_session.env, check=True, timeout=10)
        wait_for(lambda: events(log, "set_enabled") == [False, True], "the second click")
        wait_for(lambda: state_on_screen() is TrayState.on, "the icon back to 'on'")

        # 4. Menu items, activated through pystray's Menu API in the icon's process.
        send(process, "invoke Quality/Lower resolution")
        wait_for(lambda: events(log, "set_quality") == ["low_res"], "Quality ▸ Lower resolution")
        wait_for(lambda: state_on_screen() is TrayState.degraded, "the icon to show 'degraded'")
        send(process, "invoke Quality/Auto")
        wait_for(lambda: events(log, "set_quality") == ["low_res", None], "Quality ▸ Auto")
        send(process, "invoke Source face/crowd_selfie.jpg")
        wait_for(lambda: events(log, "set_source_face"), "Source face ▸ crowd_selfie.jpg")
        assert events(log, "set_source_face")[0].endswith("crowd_selfie.jpg")

        send(process, "dump")
        menu = wait_for(lambda: events(log, "menu"), "the menu dump")[-1]
        by_text = {entry["text"]: entry for entry in menu}
        assert by_text["Swap on"]["checked"] is True
        faces = {e["text"]: e["checked"] for e in by_text["Source face"]["submenu"]}
        assert faces["crowd_selfie.jpg"] is True and faces["newton.png"] is False
        quality = {e["text"]: e["checked"] for e in by_text["Quality"]["submenu"]}
        assert quality["Auto"] is True and quality["Lower resolution"] is False

        # 5. An engine error (camera unplugged) turns the icon red.
        send(process, "set state camera offline")
        wait_for(lambda: state_on_screen() is TrayState.error, "the icon to show 'error'")
        xscreen.screenshot(display, icon).save(tmp_path / "tray-error.png")
        send(process, "set state running")
        wait_for(lambda: state_on_screen() is TrayState.on, "the icon back to 'on'")

        # 6. Quit asks the engine to stop and takes the icon down; the engine's result comes back.
        send(process, "invoke Quit")
        assert process.wait(timeout=60) == 0
        assert events(log, "request_quit") == [None]
        assert events(log, "engine_stopped") == [None]
        assert events(log, "exited") == ["engine result"]
        assert events(log, "command_failed") == []
        wait_for(lambda: xscreen.find_icon_window(display) is None, "the icon window to go away")
    finally:
        display.close()


def test_the_icon_goes_when_the_engine_stops(x_session, tray_process, wait_for, xscreen):
    """`vcamd quit` (or SIGTERM) ends the engine loop: the tray follows and the process exits."""
    from Xlib.display import Display

    process, log = tray_process
    display = Display(x_session.display)
    try:
        wait_for(lambda: xscreen.find_icon_window(display), "the tray icon window")
        send(process, "engine-quit")
        assert process.wait(timeout=60) == 0
        assert [e["event"] for e in read_log(log)][-3:] == ["request_quit", "engine_stopped", "exited"]
        assert events(log, "exited") == ["engine result"]
        wait_for(lambda: xscreen.find_icon_window(display) is None, "the icon window to go away")
    finally:
        display.close()


def test_ctrl_c_stops_the_engine_and_the_tray(x_session, tray_process, wait_for, xscreen):
    import signal

    from Xlib.display import Display

    process, log = tray_process
    display = Display(x_session.display)
    try:
        wait_for(lambda: xscreen.find_icon_window(display), "the tray icon window")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert events(log, "request_quit") == [None]
        assert events(log, "exited") == ["engine result"]
    finally:
        display.close()


def test_the_icon_is_shown_and_stopped_without_using_the_event_loops_connection_from_another_thread(x_session, monkeypatch):
    """pystray's `icon.visible = True` and `icon.stop()` (called from its setup thread) send their
    requests to the event loop over the loop's own X connection; python-xlib can then lose the
    reply the loop is waiting for: one daemon start stayed blocked 60 s in a loaded suite run, and
    this test's own stop once left the loop and the setup thread waiting for good. `show_xorg_icon`
    and `stop_xorg_icon` send them over a connection of their own: the loop's connection is used
    by the loop alone."""
    import threading

    from vcamd.tray import render_icon
    from vcamd.tray.backends import import_pystray
    from vcamd.tray.xorg import XorgWaker, show_xorg_icon, stop_xorg_icon

    monkeypatch.setenv("DISPLAY", x_session.display)
    monkeypatch.setenv("PYSTRAY_BACKEND", "xorg")
    pystray = import_pystray("xorg")
    icon = pystray.Icon("vcamd-show-test", render_icon(TrayState.off), "show test")
    loop_thread = threading.current_thread()
    from_elsewhere: list[str] = []
    connection = icon._display

    def watched(name):
        real = getattr(connection, name)

        def call(*args, **kwargs):
            if threading.current_thread() is not loop_thread:
                from_elsewhere.append(name)
            return real(*args, **kwargs)

        return call

    for name in ("send_event", "flush", "sync"):
        monkeypatch.setattr(connection, name, watched(name))
    waker = XorgWaker.for_icon(icon)
    ended = threading.Event()
    seen: dict = {}

    def setup(icon) -> None:
        try:
            show_xorg_icon(icon)
            seen["visible"] = icon.visible
        finally:
            threading.Thread(target=waker.wake_until, args=(ended,), daemon=True).start()
            stop_xorg_icon(icon)
            seen["from_elsewhere"] = list(from_elsewhere)
            setup_done.set()

    setup_done = threading.Event()
    try:
        icon.run(setup=setup)
    finally:
        ended.set()
    assert setup_done.wait(60), "the setup thread did not get past its stop"  # the loop may end first
    assert seen == {"visible": True, "from_elsewhere": []}
