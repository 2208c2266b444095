"""The GTK backend with a real tray host: Xvfb + trayer, a right-click menu, checked on screenshots.

`tray_host.py` runs the real tray with PYSTRAY_BACKEND=gtk (what a desktop without a
StatusNotifierWatcher gets, e.g. XFCE or MATE with PyGObject installed). Its Gtk.StatusIcon docks
in trayer over XEmbed; the test right-clicks it with xdotool, finds the pop-up menu window, reads
the menu's rows off a screenshot (one band of dark text pixels per item), clicks the "Swap off"
row with the mouse and checks that the engine's swap went off and the icon turned grey.

Set FACELIVE_UPDATE_DOCS=1 to also write the screenshot of the menu to docs/tray-menu.png.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vcamd.tray import TrayState

HERE = Path(__file__).resolve().parent
TRAY_HOST = HERE / "tray_host.py"
DOCS_SCREENSHOT = HERE.parent.parent / "docs" / "tray-menu.png"
MENU_ROWS = ["Swap on", "Swap off", "Source face", "Quality", "Open control page", "Edit config", "Status: …", "Quit"]
"""The menu's text rows, top to bottom (the two separators carry no text)."""


def _load_by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _needs() -> str | None:
    from vcamd.tray.backends import typelib_available

    if shutil.which("dbus-daemon") is None:
        return "needs dbus-daemon (apt-get install dbus-daemon)"
    if not typelib_available("Gtk", "3.0"):
        return "needs PyGObject (pip install -e '.[tray]') and GTK 3 (apt gir1.2-gtk-3.0; see README, Tray)"
    return None


pytestmark = pytest.mark.skipif(_needs() is not None, reason=str(_needs()))
_bus = _load_by_path("facelive_session_bus", HERE / "session_bus.py")
private_bus = _bus.private_bus


def events(log: Path, name: str) -> list:
    if not log.exists():
        return []
    return [e["value"] for e in map(json.loads, log.read_text().splitlines()) if e["event"] == name]


def embedded_icon(display):
    """The window trayer embedded (the StatusIcon's plug), or None before it docks."""
    for top in display.screen().root.query_tree().children:
        try:
            if top.get_wm_class() != ("panel", "trayer"):
                continue
            pending = list(top.query_tree().children)
            while pending:
                window = pending.pop()
                wm_class = window.get_wm_class()
                if wm_class and wm_class[1] != "trayer" and window.get_attributes().map_state == 2:
                    return window
                pending.extend(window.query_tree().children)
        except Exception:  # noqa: BLE001 — windows come and go while the panel lays out
            continue
    return None


def popup_menus(display) -> list:
    """Mapped override-redirect top-level windows big enough to be a menu (GTK pops menus up so)."""
    found = []
    for window in display.screen().root.query_tree().children:
        try:
            attributes, geometry = window.get_attributes(), window.get_geometry()
        except Exception:  # noqa: BLE001
            continue
        if attributes.map_state == 2 and attributes.override_redirect and geometry.width > 100 and geometry.height > 100:
            found.append(window)
    return found


def screen_region(display, x: int, y: int, width: int, height: int) -> Image.Image:
    from Xlib import X

    raw = display.screen().root.get_image(x, y, width, height, X.ZPixmap, 0xFFFFFFFF)
    return Image.frombytes("RGB", (width, height), raw.data, "raw", "BGRX")


def text_rows(menu_image: Image.Image, dark: int = 110) -> list[tuple[int, int]]:
    """(top, bottom) of each horizontal band that holds dark (text) pixels, top to bottom."""
    luma = np.asarray(menu_image.convert("L"), dtype=np.int16)
    inked = (luma < dark).sum(axis=1) >= 2  # a row with text strokes, not a stray pixel
    rows, start = [], None
    for y, has_ink in enumerate(inked):
        if has_ink and start is None:
            start = y
        elif not has_ink and start is not None:
            rows.append((start, y))
            start = None
    if start is not None:
        rows.append((start, len(inked)))
    return [(top, bottom) for top, bottom in rows if bottom - top >= 4]  # text is taller than a rule line


def test_gtk_icon_docks_and_its_right_click_menu_drives_the_engine(x_session, private_bus, tmp_path, assets, wait_for, xscreen):
    from Xlib.display import Display

    env = {**x_session.env, "PYSTRAY_BACKEND": "gtk", "DBUS_SESSION_BUS_ADDRESS": private_bus, "NO_AT_BRIDGE": "1"}
    log = tmp_path / "calls.jsonl"
    host = subprocess.Popen([sys.executable, str(TRAY_HOST), "--log", str(log),
                             "--face", str(assets / "images" / "newton.png"), "--face", str(assets / "images" / "crowd_selfie.jpg")],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    display = Display(x_session.display)
    try:
        wait_for(lambda: events(log, "ready") or host.poll() is not None, "the tray host to start")
        assert host.poll() is None, host.stdout.read()[-2000:]
        root = display.screen().root

        # 1. The GTK status icon docks in trayer and shows the "on" colour.
        icon = wait_for(lambda: embedded_icon(display), "the GTK icon to dock in trayer")
        wait_for(lambda: icon.get_geometry().width >= 16, "the docked icon to get its size")

        def icon_state():
            try:
                return xscreen.dominant_state(xscreen.screenshot(display, icon))
            except Exception:  # noqa: BLE001 — trayer re-lays out the panel while we read
                return None

        wait_for(lambda: icon_state() is TrayState.on, "the docked icon to show 'on'")

        def right_click_menu():
            geometry = icon.get_geometry()
            origin = root.translate_coords(icon, 0, 0)
            subprocess.run(["xdotool", "mousemove", str(origin.x + geometry.width // 2), str(origin.y + geometry.height // 2),
                            "click", "3"], env=env, check=True, timeout=10)
            return wait_for(lambda: popup_menus(display), "the right-click menu to pop up")[0]

        def menu_shot(menu):
            geometry = menu.get_geometry()
            origin = root.translate_coords(menu, 0, 0)
            return (origin.x, origin.y), screen_region(display, origin.x, origin.y, geometry.width, geometry.height)

        # 2. A right click pops up the full menu: one text row per item, read off the screenshot.
        menu = right_click_menu()
        rows = wait_for(lambda: r if len(r := text_rows(menu_shot(menu)[1])) == len(MENU_ROWS) else None,
                        f"the menu to show its {len(MENU_ROWS)} rows")
        (menu_x, menu_y), shot = menu_shot(menu)
        shot.save(tmp_path / "tray-menu-only.png")
        assert shot.width > 150 and shot.height > 8 * 18
        if os.environ.get("FACELIVE_UPDATE_DOCS") == "1":
            # The docs picture: the panel with the icon and the menu under it, as a user sees it.
            left = max(0, menu_x - 20)
            screen_region(display, left, 0, root.get_geometry().width - left, menu_y + shot.height + 10).save(DOCS_SCREENSHOT)

        # 3. A real click on the "Swap off" row turns the swap off; the icon turns grey.
        top, bottom = rows[MENU_ROWS.index("Swap off")]
        subprocess.run(["xdotool", "mousemove", str(menu_x + shot.width // 3), str(menu_y + (top + bottom) // 2), "click", "1"],
                       env=env, check=True, timeout=10)
        wait_for(lambda: events(log, "set_enabled") == [False], "the click on Swap off to reach the engine")
        wait_for(lambda: not popup_menus(display), "the menu to close")
        wait_for(lambda: icon_state() is TrayState.off, "the docked icon to show 'off'")

        # 4. A left click is the default action: it switches the swap back on.
        geometry = icon.get_geometry()
        origin = root.translate_coords(icon, 0, 0)
        subprocess.run(["xdotool", "mousemove", str(origin.x + geometry.width // 2), str(origin.y + geometry.height // 2),
                        "click", "1"], env=env, check=True, timeout=10)
        wait_for(lambda: events(log, "set_enabled") == [False, True], "the left click to switch the swap on")
        wait_for(lambda: icon_state() is TrayState.on, "the icon back to 'on'")

        # 5. Quit, from the menu's last row: the engine stops, the host exits cleanly.
        menu = right_click_menu()
        rows = wait_for(lambda: r if len(r := text_rows(menu_shot(menu)[1])) == len(MENU_ROWS) else None,
                        "the menu rows")
        (menu_x, menu_y), shot = menu_shot(menu)
        top, bottom = rows[MENU_ROWS.index("Quit")]
        subprocess.run(["xdotool", "mousemove", str(menu_x + shot.width // 3), str(menu_y + (top + bottom) // 2), "click", "1"],
                       env=env, check=True, timeout=10)
        assert host.wait(timeout=20) == 0
        assert events(log, "request_quit") == [None] and events(log, "exited") == ["engine result"]
    finally:
        display.close()
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)


def test_ctrl_c_stops_the_engine_and_the_gtk_tray(x_session, private_bus, tmp_path, wait_for):
    """pystray's GTK loop resets SIGINT to the default (kill); the tray routes it to the engine's quit."""
    import signal

    env = {**x_session.env, "PYSTRAY_BACKEND": "gtk", "DBUS_SESSION_BUS_ADDRESS": private_bus, "NO_AT_BRIDGE": "1"}
    log = tmp_path / "calls.jsonl"
    host = subprocess.Popen([sys.executable, str(TRAY_HOST), "--log", str(log)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: events(log, "ready") or host.poll() is not None, "the tray host to start")
        host.send_signal(signal.SIGINT)
        assert host.wait(timeout=20) == 0, host.stdout.read()[-2000:]
        assert events(log, "request_quit") == [None] and events(log, "exited") == ["engine result"]
    finally:
        if host.poll() is None:
            host.kill()
        host.wait(timeout=10)
