"""Finding and reading the docked tray icon on a real X server (python-xlib): shared by the tray
tests. Loaded by path through the `xscreen` fixture (tests/tray/conftest.py)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vcamd.tray import STATE_COLOURS, TrayState


def find_icon_window(display):
    """The tray icon's X window (pystray names its class after the icon name, 'facelive')."""
    pending = [display.screen().root]
    while pending:
        window = pending.pop()
        try:
            wm_class = window.get_wm_class()
            children = window.query_tree().children
        except Exception:  # noqa: BLE001 — a window may vanish while we walk the tree
            continue
        if wm_class and wm_class[1] == "facelive":
            return window
        pending.extend(children)
    return None


def toplevel_of(window, root):
    """The child of the root window that contains `window`."""
    while True:
        parent = window.query_tree().parent
        if parent.id == root.id:
            return window
        window = parent


def screenshot(display, window) -> Image.Image:
    """What is on screen where the window is (the composed root image, not the window's own buffer)."""
    from Xlib import X

    root = display.screen().root
    geometry = window.get_geometry()
    origin = root.translate_coords(window, 0, 0)
    raw = root.get_image(origin.x, origin.y, geometry.width, geometry.height, X.ZPixmap, 0xFFFFFFFF)
    return Image.frombytes("RGB", (geometry.width, geometry.height), raw.data, "raw", "BGRX")


def share_of_colour(image: Image.Image, colour: tuple[int, int, int], tolerance: int = 40) -> float:
    pixels = np.asarray(image, dtype=np.int16).reshape(-1, 3)
    close = np.all(np.abs(pixels - np.array(colour, dtype=np.int16)) <= tolerance, axis=1)
    return float(close.mean())


def dominant_state(image: Image.Image) -> TrayState | None:
    """The state whose background colour covers most of the icon (None below 40 %)."""
    shares = {state: share_of_colour(image, colour) for state, colour in STATE_COLOURS.items()}
    state, share = max(shares.items(), key=lambda kv: kv[1])
    return state if share > 0.4 else None
