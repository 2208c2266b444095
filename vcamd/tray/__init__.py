"""The tray icon: see at a glance whether the face swap is on, switch it, pick the face and quality.

A package of parts, each apart:

- `view`: what the tray shows, from `Controllable.status()`: icon states and image, labels, and
  the menu as data (`build_menu`). No pystray, no display.
- `desktop`: open a file/URL with the desktop, the photo chooser, the recent-faces list.
- `backends`: which pystray backend fits this desktop (AppIndicator when a StatusNotifierWatcher
  is on the session bus, else GTK, else xorg), whether it has a menu, and importing it.
- `controller`: `TrayApp`, the menu controller: the menu's actions on the engine's control surface,
  the icon kept in step with the status.
- `lifecycle`: the icon's event loop on the main thread, the engine beside it; `run_engine_with_tray`.
- `pystray_setup`: the one reach into pystray's private state (releasing a failed icon's setup thread).
- `xorg`: workarounds for pystray's xorg backend.

pystray (and GTK/Xlib through it) is imported only when an icon is shown or diagnosed: on Linux
importing it opens a display connection, and `vcamd status` must not pay for that.
"""

from vcamd.tray.backends import (
    BackendChoice,
    TrayDiagnosis,
    choose_backend,
    diagnose_tray,
    import_pystray,
    status_notifier_watcher_present,
    tray_available,
)
from vcamd.tray.controller import TrayApp
from vcamd.tray.desktop import NoFileDialog, RecentFaces, open_with_desktop, pick_image_file
from vcamd.tray.lifecycle import ICON_NAME, run_engine_with_tray, run_tray
from vcamd.tray.view import (
    APP_TITLE,
    STATE_COLOURS,
    MenuEntry,
    TrayState,
    TrayView,
    build_menu,
    parse_level,
    render_icon,
    view_from_status,
)
from vcamd.tray.xorg import systray_owner_present

__all__ = [
    "APP_TITLE", "ICON_NAME", "STATE_COLOURS", "BackendChoice", "MenuEntry", "NoFileDialog",
    "RecentFaces", "TrayApp", "TrayDiagnosis", "TrayState", "TrayView", "build_menu", "choose_backend",
    "diagnose_tray", "import_pystray", "open_with_desktop", "parse_level", "pick_image_file", "render_icon",
    "run_engine_with_tray", "run_tray", "status_notifier_watcher_present", "systray_owner_present",
    "tray_available", "view_from_status",
]
