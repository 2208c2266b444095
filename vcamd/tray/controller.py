"""The tray's menu controller: the menu and its actions, and the icon kept in step with the status.

`TrayApp` drives the same `Controllable` the control socket drives (vcamd.control.protocol). A
poller thread reads `controller.status()` about once a second and is the only thread that redraws
the icon (and, on the menu backends, rebuilds the menu when what it shows changed); menu actions
read the status again at once so checks are never stale. The menu itself is the data model of
vcamd.tray.view, turned into pystray items each time a backend builds it. Showing the icon, running
its event loop and the engine beside it is vcamd.tray.lifecycle.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from vcamd.common.errors import VcamdError
from vcamd.common.quality import Level
from vcamd.control.protocol import Controllable
from vcamd.tray.backends import import_pystray_menus
from vcamd.tray.desktop import NoFileDialog, open_with_desktop, pick_image_file
from vcamd.tray.view import (
    APP_TITLE,
    STARTING_VIEW,
    Command,
    MenuEntry,
    TrayState,
    TrayView,
    Verb,
    build_menu,
    faces_for_menu,
    render_icon,
    view_from_status,
)
from vcamd.tray.xorg import XorgIconWindow, XorgWaker, enable_xorg_clicks, is_xorg, stop_icon

log = logging.getLogger(__name__)

Notify = Callable[[str, str], None]
"""notify(message, title)."""


class PanelSurface(Controllable, Protocol):
    """The engine behind the control page (`panel.surface`): it also mints one-time login addresses."""

    def panel_login_url(self) -> str: ...


class TrayApp:
    """Menu, icon state and actions of the tray, around one controller.

    Build the pystray menu with `menu()`, attach the pystray icon with `attach(icon)`, then
    `start_polling()`. Without an icon (tests), `refresh()`, `menu_model()` and the menu work the same.
    """

    def __init__(
        self,
        controller: Controllable,
        *,
        recent_faces: Callable[[], Sequence[Path]] = lambda: (),
        remember_face: Callable[[Path], None] | None = None,
        open_preview: Callable[[], None] | None = None,
        open_url: Callable[[Path | str], None] = open_with_desktop,
        edit_config: Callable[[], None] | None = None,
        choose_face: Callable[[Path], Path | None] = pick_image_file,
        config_path: Path | None = None,
        notify: Notify | None = None,
        poll_interval_s: float = 1.0,
        quit_event: threading.Event | None = None,
        run_in_background: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """`open_preview` is the fallback of "Open control page" when the status has no panel_url."""
        self.controller = controller
        self._recent_faces = recent_faces
        self._remember_face = remember_face
        self._open_preview = open_preview
        self._open_url = open_url
        self._edit_config = edit_config
        self._choose_face = choose_face
        self._config_path = config_path
        self._notify_override = notify
        self._poll_interval_s = poll_interval_s
        self._quit_event = quit_event
        self._run_in_background = run_in_background or _start_thread
        self._icon: Any = None
        self._lock = threading.Lock()
        self._quality_choice: Level | None = None
        self._view = STARTING_VIEW
        self._drawn: tuple[TrayState, str] | None = None
        self._drawn_menu: tuple[MenuEntry, ...] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._waker: XorgWaker | None = None
        self._xwindow: XorgIconWindow | None = None
        self._loop_ended = threading.Event()
        self.quit_chosen = False
        """True once the user picked Quit (the icon closing for any other reason is not a quit)."""

    # -- state --------------------------------------------------------------------------------

    @property
    def icon(self) -> Any:
        """The pystray icon once attached (None before)."""
        return self._icon

    @property
    def view(self) -> TrayView:
        return self._view

    def refresh(self) -> TrayView:
        """Read the controller's status now; a failing status is shown as the error state."""
        with self._lock:
            quality_fallback = self._quality_choice
        try:
            view = view_from_status(self.controller.status(), quality_fallback)
        except Exception as exc:  # noqa: BLE001 — any failure to read the status is shown, not raised
            log.warning("tray: cannot read the engine status: %s", exc)
            old = self._view
            view = TrayView(
                TrayState.error, old.enabled, old.level, old.quality, old.source_face,
                f"status unavailable: {exc}", f"The engine status cannot be read: {exc}", old.panel_url,
            )
        with self._lock:
            self._view = view
        return view

    # -- actions (menu callbacks) -------------------------------------------------------------

    def run(self, command: Command) -> None:
        """Do what a menu item says."""
        verb, arg = command.verb, command.arg
        if verb is Verb.toggle:
            self.toggle()
        elif verb is Verb.enable:
            self._act(f"switch the swap {'on' if arg else 'off'}", lambda: self.controller.set_enabled(bool(arg)))
        elif verb is Verb.face:
            self.set_face(arg)
        elif verb is Verb.choose_face:
            self.choose_face()
        elif verb is Verb.quality:
            self.set_quality(arg)
        elif verb is Verb.model:
            role, name = arg
            # In the background: the check of the model's files must not hold the menu's thread.
            self._run_in_background(lambda: self._act(f"switch the {role} to {name}", lambda: self.controller.set_model(role, name)))
        elif verb is Verb.open_panel:
            self.open_panel()
        elif verb is Verb.edit_config:
            self.edit_config()
        elif verb is Verb.show_status:
            self.show_status()
        elif verb is Verb.quit:
            self.quit()
        else:  # pragma: no cover — Verb is closed
            raise ValueError(f"unknown tray command {command}")

    def toggle(self) -> None:
        self._act("switch the swap", self.controller.toggle)  # the engine flips its own state: no race with the socket

    def set_face(self, path: Path) -> None:
        def do() -> None:
            self.controller.set_source_face(path)
            if self._remember_face:
                self._remember_face(path)
            self.notify(f"Source face: {path.name}")

        self._act(f"use {path} as the source face", do)

    def choose_face(self) -> None:
        """Show a file chooser (in the background: it may stay open a while) and use the pick."""

        def do() -> None:
            start = self._view.source_face.parent if self._view.source_face else Path.home()
            try:
                picked = self._choose_face(start)
            except NoFileDialog as err:
                folder = self._config_folder()
                message = f"{err.message}. Set [swap] source_face in {self._config_path or 'config.toml'}"
                if folder is not None:
                    try:
                        open_with_desktop(folder)
                        message += f" (its folder {folder} is now open)"
                    except (VcamdError, OSError) as open_err:
                        message += f" ({open_err})"
                self.notify(message + f" — or {err.fix}.", "No file dialog")
                return
            if picked is not None:
                self.set_face(picked)

        self._run_in_background(lambda: self._act("choose a source face", do))

    def set_quality(self, level: Level | None) -> None:
        def do() -> None:
            self.controller.set_quality(level)
            with self._lock:
                self._quality_choice = level

        self._act("set the quality", do)

    def open_panel(self) -> None:
        """Open the control page (when the status has a panel_url) through a private file that holds a
        one-time login address (`panel.login.login_page`) — no token or code on the opener's command
        line, which every local user can read; the preview page without one."""
        open_preview = self._open_preview
        if self.refresh().panel_url:
            # A status with a panel_url comes from the page's surface (panel.surface), which mints the address.
            page = cast(PanelSurface, self.controller)
            self._run_in_background(lambda: self._act(
                "open the control page", lambda: self._open_url(_login_page(page.panel_login_url()))))
        elif open_preview is not None:
            self._run_in_background(lambda: self._act("open the preview", open_preview))
        else:
            self.notify("The control page is not available in this session (see [panel] in the config).")

    def edit_config(self) -> None:
        edit_config = self._edit_config
        if edit_config is None:
            self.notify("No config file in use — create one with `vcamd config init`.")
            return
        self._run_in_background(lambda: self._act("open the config file", edit_config))

    def show_status(self) -> None:
        self.notify(self.refresh().detail, f"{APP_TITLE}: {self._view.state.value}")

    def quit(self) -> None:
        self.quit_chosen = True
        self._act("quit", self.controller.request_quit)
        self._stop.set()
        self._stop_icon()

    def notify(self, message: str, title: str = APP_TITLE) -> None:
        """A desktop notification: the injected notifier, the backend's own, notify-send, or the log."""
        log.info("tray notification: %s: %s", title, message)
        if self._notify_override is not None:
            self._notify_override(message, title)
        elif self._icon is not None and getattr(self._icon, "HAS_NOTIFICATION", False):
            self._icon.notify(message, title)
        elif shutil.which("notify-send"):
            subprocess.Popen(["notify-send", "--app-name", APP_TITLE, title, message],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _act(self, what: str, action: Callable[[], object]) -> None:
        """Run one user action (what it returns is not used); a failure becomes a notification, never a dead tray."""
        try:
            action()
        except VcamdError as err:
            self.notify(str(err), f"Cannot {what}")
        except Exception as exc:  # noqa: BLE001 — the tray must survive an engine bug
            log.exception("tray: failed to %s", what)
            self.notify(f"{type(exc).__name__}: {exc}", f"Cannot {what}")
        self.refresh()
        self._wake.set()  # redraw the icon now, not at the next poll

    def _config_folder(self) -> Path | None:
        if self._config_path is not None:
            return self._config_path.parent
        from vcamd.config.folders import user_config_path

        folder = user_config_path().parent
        return folder if folder.is_dir() else None

    # -- menu ---------------------------------------------------------------------------------

    def faces_for_menu(self) -> list[Path]:
        """The current source face first, then the recent ones, without duplicates."""
        return faces_for_menu(self._view.source_face, self._recent_faces())

    def menu_model(self) -> tuple[MenuEntry, ...]:
        """The menu as data, for the current view."""
        return build_menu(self._view, self.faces_for_menu())

    def menu(self) -> Any:
        """The pystray menu. It is rebuilt from `menu_model()` whenever a backend reads it."""
        pystray = import_pystray_menus()
        return pystray.Menu(lambda: (self._pystray_item(pystray, entry) for entry in self.menu_model()))

    def _pystray_item(self, pystray: Any, entry: MenuEntry) -> Any:
        if entry.is_separator:
            return pystray.Menu.SEPARATOR
        if entry.submenu is not None:
            submenu = pystray.Menu(*(self._pystray_item(pystray, e) for e in entry.submenu))
            return pystray.MenuItem(entry.label, submenu, visible=entry.visible)
        command = entry.command
        assert command is not None
        return pystray.MenuItem(
            entry.label, lambda: self.run(command),
            checked=None if entry.checked is None else (lambda _item, c=entry.checked: c),
            radio=entry.radio, default=entry.default, visible=entry.visible,
        )

    # -- icon ---------------------------------------------------------------------------------

    def attach(self, icon: Any) -> None:
        """Use this pystray icon. For the xorg backend call it before `icon.run()`: it sets up
        X resources while only one thread uses the icon's connection."""
        self._icon = icon
        if is_xorg(icon):
            enable_xorg_clicks(icon)
            self._waker = XorgWaker.for_icon(icon)

    def loop_ended(self) -> None:
        """Called by run_tray when the icon's event loop has returned."""
        self._loop_ended.set()

    def _stop_icon(self) -> None:
        icon = self._icon
        if icon is None:
            return
        stop_icon(icon)
        if self._waker is not None:
            self._waker.wake_until(self._loop_ended)

    def draw(self) -> None:
        """Bring the icon image, tooltip and menu in line with the current view (poller thread)."""
        icon = self._icon
        view = self._view
        if icon is None:
            return
        menu = self.menu_model()
        if self._drawn == (view.state, view.summary) and menu == self._drawn_menu:
            return
        title = f"{APP_TITLE}: {view.summary}"
        image = render_icon(view.state) if self._drawn is None or self._drawn[0] != view.state else None
        if self._xwindow is not None:
            self._xwindow.show(icon, image, title)
        else:
            if image is not None:
                icon.icon = image
            icon.title = title
            if menu != self._drawn_menu:
                # gtk/appindicator build a new menu from the model: only when what it shows changed
                # (each rebuild gives every item a new dbusmenu id under the user's pointer).
                icon.update_menu()
        self._drawn = (view.state, view.summary)
        self._drawn_menu = menu

    def start_polling(self) -> None:
        self._poller = threading.Thread(target=self._poll_loop, name="tray-status", daemon=True)
        self._poller.start()

    def stop_polling(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=5)

    def _poll_loop(self) -> None:
        if is_xorg(self._icon):
            self._xwindow = XorgIconWindow.for_icon(self._icon)
        try:
            self._poll_until_stopped()
        finally:
            if self._xwindow is not None:
                self._xwindow.close()

    def _poll_until_stopped(self) -> None:
        while not self._stop.is_set():
            if self._quit_event is not None and self._quit_event.is_set():
                # The daemon is stopping (e.g. `vcamd quit`): take the icon down with it.
                self._stop_icon()
                return
            self.refresh()
            try:
                self.draw()
                if self._xwindow is not None:
                    self._xwindow.keep_docked()
            except Exception:  # noqa: BLE001 — a failed redraw must not end the poller
                log.exception("tray: icon update failed")
            self._wake.wait(self._poll_interval_s)
            self._wake.clear()


def _login_page(url: str) -> Path:
    from vcamd.panel.login import login_page

    return login_page(url)


def _start_thread(fn: Callable[[], None]) -> None:
    threading.Thread(target=fn, name="tray-action", daemon=True).start()
