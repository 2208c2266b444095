"""The tray icon: see at a glance whether the face swap is on, switch it with one click.

The icon runs in the daemon process and drives the engine's control surface (the `Controllable`
protocol of docs/architecture.md) directly. pystray wants the main thread, so the daemon calls
`run_engine_with_tray(engine, lambda: engine.run(...), ...)` from its main thread: the engine loop
runs in a worker started from pystray's `setup`, and each side stops the other when it ends.

Backends: pystray picks appindicator/gtk (full pop-up menu) when PyGObject is installed, else
xorg (XEmbed tray, e.g. XFCE, MATE, trayer). The xorg backend has no pop-up menu: a left click
runs the default item, "Swap on". Three pystray 0.19 / python-xlib problems of that backend are
worked around below (`_enable_xorg_clicks`, `_XorgIconWindow`, `_XorgWaker`).

The icon shows four states, each with its own colour and glyph (readable for colour-blind users
too): on (green, camera), off (grey, camera struck through), degraded (amber, camera + "!" badge:
the watchdog lowered the quality), error (red, "×" badge: camera offline, engine error or a broken
config edit). A poller thread reads `controller.status()` about once a second and is the only
thread that redraws the icon; menu actions read the status again at once so checks are never stale.

pystray is imported lazily: on Linux importing it opens an X connection and raises without a
display, and `vcamd status` must not pay for that.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar

from PIL import Image, ImageDraw

from vcamd.errors import VcamdError
from vcamd.types import Level

log = logging.getLogger(__name__)
T = TypeVar("T")

APP_TITLE = "FaceLive Camera"
ICON_NAME = "facelive"
"""pystray icon name; the X11 window class becomes "facelive" / "facelive SystemTrayIcon"."""


class TrayController(Protocol):
    """The part of the engine's `Controllable` control surface the tray uses."""

    def status(self) -> Mapping[str, Any]: ...
    def set_enabled(self, on: bool) -> None: ...
    def set_source_face(self, path: Path) -> None: ...
    def set_quality(self, level: Level | None) -> None: ...
    def request_quit(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# What the icon shows


class TrayState(StrEnum):
    on = "on"
    off = "off"
    degraded = "degraded"
    error = "error"


STATE_COLOURS: dict[TrayState, tuple[int, int, int]] = {
    TrayState.on: (38, 166, 65),
    TrayState.off: (128, 128, 128),
    TrayState.degraded: (230, 162, 0),
    TrayState.error: (210, 40, 40),
}
"""Background colour of the icon per state (tests look for these in a screenshot of the tray)."""

LEVEL_LABELS: dict[Level, str] = {
    Level.full: "Full quality",
    Level.no_enhancer: "No enhancer",
    Level.low_res: "Lower resolution",
    Level.frame_skip: "Every other frame",
}


HEALTHY_STATES = ("running", "starting")
"""Engine states that are not a problem; any other (camera offline, error, stopped) shows red."""


@dataclass(frozen=True, slots=True)
class TrayView:
    """The engine status as the tray presents it."""

    state: TrayState
    enabled: bool
    level: Level | None
    """The level the engine runs at now (None when the status does not say)."""
    quality: Level | None
    """The quality the user fixed, None = automatic (the watchdog decides)."""
    source_face: Path | None
    summary: str
    """One line: tooltip and the text of the Status menu item."""
    detail: str
    """Several lines: the Status notification."""


def parse_level(value: object) -> Level | None:
    """A level as the status reports it (Level, int, name or None) → Level | None."""
    if value is None or isinstance(value, Level):
        return value
    if isinstance(value, bool):
        raise ValueError(f"level {value!r} is not a Level")
    if isinstance(value, int):
        return Level(value)
    if isinstance(value, str):
        if value in ("", "auto"):
            return None
        if value.isdigit():
            return Level(int(value))
        try:
            return Level[value]
        except KeyError:
            raise ValueError(f"level {value!r} is not one of {[m.name for m in Level]}") from None
    raise ValueError(f"level {value!r} is not a Level")


def view_from_status(status: Mapping[str, Any], quality_fallback: Level | None = None) -> TrayView:
    """Turn `controller.status()` into what the icon and menu show.

    `quality_fallback` is what the tray itself last chose; it is used only when the status has no
    `quality` key (the architecture's status contract does not list one yet).
    """
    enabled = bool(status.get("enabled", False))
    state_text = str(status.get("state", "running"))
    level = parse_level(status.get("level"))
    quality = parse_level(status["quality"]) if "quality" in status else quality_fallback
    face = status.get("source_face")
    source_face = Path(face) if face else None
    config_error = status.get("config_error")

    problem = None
    if state_text not in HEALTHY_STATES:
        problem = state_text
    if config_error:
        problem = f"config error: {config_error}"

    if problem:
        state = TrayState.error
    elif not enabled:
        state = TrayState.off
    elif level is not None and level > Level.full:
        state = TrayState.degraded
    else:
        state = TrayState.on

    if state is TrayState.degraded:
        headline = f"swap on, degraded ({LEVEL_LABELS[level].lower()})"
    elif state is TrayState.error:
        headline = problem or "error"
    else:
        headline = f"swap {state.value}"
    fps = status.get("fps")
    latency = status.get("latency_ms")
    numbers = []
    if isinstance(fps, (int, float)):
        numbers.append(f"{fps:.0f} fps")
    if isinstance(latency, Mapping):  # the engine reports percentiles: show the median
        latency = latency.get("p50")
    if isinstance(latency, (int, float)):
        numbers.append(f"{latency:.0f} ms")
    summary = headline + (f" · {' · '.join(numbers)}" if numbers else "")

    providers = status.get("providers") or {}
    provider_text = ", ".join(sorted({str(p) for p in providers.values()})) if isinstance(providers, Mapping) else str(providers)
    lines = [
        f"Swap: {'on' if enabled else 'off'} ({state_text})",
        f"Quality: {LEVEL_LABELS[level] if level is not None else 'unknown'}"
        f" ({'auto' if quality is None else 'fixed'})",
        f"Source face: {source_face or 'none'}",
    ]
    if numbers:
        lines.append("Speed: " + ", ".join(numbers))
    if provider_text:
        lines.append(f"Runs on: {provider_text}")
    if config_error:
        lines.append(f"Config error: {config_error}")
    return TrayView(state, enabled, level, quality, source_face, summary, "\n".join(lines))


def render_icon(state: TrayState, size: int = 64) -> Image.Image:
    """The tray image: a rounded square in the state's colour with a white camera glyph.

    Off strikes the camera through, degraded adds a "!" badge, error a "×" badge, so the states
    differ in shape as well as colour.
    """
    image = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    s = size / 64  # everything below is drawn on a 64-unit grid
    draw.rounded_rectangle((0, 0, size - 1, size - 1), radius=round(12 * s), fill=STATE_COLOURS[state] + (255,))
    white = (255, 255, 255, 255)
    # Camera: body and lens (a triangle pointing right).
    draw.rounded_rectangle((10 * s, 22 * s, 40 * s, 44 * s), radius=round(4 * s), fill=white)
    draw.polygon([(42 * s, 33 * s), (54 * s, 24 * s), (54 * s, 42 * s)], fill=white)
    if state is TrayState.off:
        draw.line((8 * s, 54 * s, 56 * s, 12 * s), fill=white, width=max(1, round(5 * s)))
    elif state is TrayState.degraded:
        draw.rectangle((28 * s, 4 * s, 34 * s, 14 * s), fill=white)
        draw.rectangle((28 * s, 16 * s, 34 * s, 19 * s), fill=white)
    elif state is TrayState.error:
        w = max(1, round(4 * s))
        draw.line((24 * s, 48 * s, 40 * s, 62 * s), fill=white, width=w)
        draw.line((40 * s, 48 * s, 24 * s, 62 * s), fill=white, width=w)
    return image


# ---------------------------------------------------------------------------------------------
# Desktop helpers: open a file or folder, pick a photo, remember recent faces


def open_with_desktop(target: Path | str) -> None:
    """Open a file, folder or URL with the desktop's default application."""
    target = str(target)
    if sys.platform == "win32":
        os.startfile(target)  # type: ignore[attr-defined]  # only exists on Windows
        return
    opener = "open" if sys.platform == "darwin" else "xdg-open"
    if not shutil.which(opener):
        raise VcamdError(f"cannot open {target}: `{opener}` is not installed", fix="open it yourself, or install xdg-utils")
    subprocess.Popen([opener, target], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


class NoFileDialog(VcamdError):
    """No way to show a file chooser (no tkinter, zenity or kdialog)."""


# Runs in a child process: Tk must own its thread, and a dialog that stays open for a minute must
# not block the tray's event loop.
_TK_DIALOG = """\
import sys
try:
    import tkinter, tkinter.filedialog
except ImportError:
    sys.exit(3)
root = tkinter.Tk(); root.withdraw()
path = tkinter.filedialog.askopenfilename(title=sys.argv[1], initialdir=sys.argv[2],
    filetypes=[("Photos", "*.jpg *.jpeg *.png *.webp *.bmp"), ("All files", "*")])
print(path or "")
"""

IMAGE_PATTERNS = "*.jpg *.jpeg *.png *.webp *.bmp"


def pick_image_file(initial_dir: Path, title: str = "Choose the source face photo") -> Path | None:
    """Show a file chooser and return the picked photo, None when cancelled.

    Tries tkinter (in a child process), then zenity, then kdialog. Raises NoFileDialog when none
    of them is available.
    """
    tk = subprocess.run(
        [sys.executable, "-c", _TK_DIALOG, title, str(initial_dir)], capture_output=True, text=True, check=False
    )
    if tk.returncode == 0:
        return Path(tk.stdout.strip()) if tk.stdout.strip() else None
    tk_problem = "not installed"
    if tk.returncode != 3:
        lines = tk.stderr.strip().splitlines()
        tk_problem = lines[-1] if lines else f"exit status {tk.returncode}"
        log.warning("tkinter file dialog failed: %s", tk_problem)
    for command in (
        ["zenity", "--file-selection", f"--title={title}", f"--filename={initial_dir}/", f"--file-filter={IMAGE_PATTERNS}"],
        ["kdialog", "--title", title, "--getopenfilename", str(initial_dir), IMAGE_PATTERNS],
    ):
        if shutil.which(command[0]):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            picked = done.stdout.strip()
            return Path(picked) if done.returncode == 0 and picked else None
    raise NoFileDialog(
        f"no file dialog could be shown (tkinter: {tk_problem}; zenity and kdialog: not installed)",
        fix="install python3-tk or zenity, or set [swap] source_face in config.toml",
    )


class RecentFaces:
    """The last few source-face photos, kept in a small JSON file in the user state dir."""

    def __init__(self, path: Path, limit: int = 8) -> None:
        self.path = path
        self.limit = limit
        self._lock = threading.Lock()

    def list(self) -> list[Path]:
        """Most recent first; photos that no longer exist are left out."""
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return []  # a missing, unreadable or damaged history only costs the shortcut list
        if not isinstance(raw, list):
            return []
        return [Path(p) for p in raw if isinstance(p, str) and Path(p).is_file()][: self.limit]

    def add(self, face: Path) -> None:
        with self._lock:
            face = face.expanduser().resolve()
            faces = [face] + [p for p in self.list() if p != face]
            text = json.dumps([str(p) for p in faces[: self.limit]], indent=1)
            tmp = self.path.with_suffix(".tmp")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp.unlink(missing_ok=True)
                # 0600: the list says whose photos this user swaps in; other local users must not read it.
                with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
                    out.write(text)
                tmp.replace(self.path)
            except OSError as exc:
                # Only the shortcut list is lost: never a reason to stop the daemon or fail a face change.
                log.warning("cannot save the recent source faces to %s (%s)", self.path, exc.strerror or exc)
                with suppress(OSError):
                    tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# The tray application


Notify = Callable[[str, str], None]
"""notify(message, title)."""


class TrayApp:
    """Menu, icon state and actions of the tray, around one controller.

    Build the pystray menu with `menu()`, attach the pystray icon with `attach(icon)`, then
    `start_polling()`. Without an icon (tests), `refresh()` and the menu work the same.
    """

    def __init__(
        self,
        controller: TrayController,
        *,
        recent_faces: Callable[[], Sequence[Path]] = lambda: (),
        remember_face: Callable[[Path], None] | None = None,
        open_preview: Callable[[], None] | None = None,
        edit_config: Callable[[], None] | None = None,
        choose_face: Callable[[Path], Path | None] = pick_image_file,
        config_path: Path | None = None,
        notify: Notify | None = None,
        poll_interval_s: float = 1.0,
        quit_event: threading.Event | None = None,
        run_in_background: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.controller = controller
        self._recent_faces = recent_faces
        self._remember_face = remember_face
        self._open_preview = open_preview
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
        self._view = TrayView(TrayState.off, False, None, None, None, "starting", "starting")
        self._drawn: tuple[TrayState, str] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._waker: _XorgWaker | None = None
        self._xwindow: _XorgIconWindow | None = None
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
                f"status unavailable: {exc}", f"The engine status cannot be read: {exc}",
            )
        with self._lock:
            self._view = view
        return view

    # -- actions (menu callbacks) -------------------------------------------------------------

    def toggle(self) -> None:
        # The engine's own toggle flips its current state on its loop, so the tray and `vcamd toggle`
        # never race; a controller without one gets the read-then-set.
        flip = getattr(self.controller, "toggle", None)
        self._act("switch the swap", flip if flip is not None else lambda: self.controller.set_enabled(not self.refresh().enabled))

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

    def open_preview(self) -> None:
        if self._open_preview is None:
            self.notify("The preview is not available in this session.")
            return
        self._run_in_background(lambda: self._act("open the preview", self._open_preview))

    def edit_config(self) -> None:
        if self._edit_config is None:
            self.notify("No config file in use — create one with `vcamd config init`.")
            return
        self._run_in_background(lambda: self._act("open the config file", self._edit_config))

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

    def _act(self, what: str, action: Callable[[], None]) -> None:
        """Run one user action; a failure becomes a notification, never a dead tray."""
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
        from vcamd.config import user_config_path

        folder = user_config_path().parent
        return folder if folder.is_dir() else None

    # -- menu ---------------------------------------------------------------------------------

    def faces_for_menu(self) -> list[Path]:
        """The current source face first, then the recent ones, without duplicates."""
        faces: list[Path] = []
        for face in [self._view.source_face, *self._recent_faces()]:
            if face is not None and face not in faces:
                faces.append(face)
        return faces

    def menu(self) -> Any:
        """The pystray menu. Texts and checks are callables read whenever the menu is shown."""
        pystray = import_pystray()
        Item, Menu = pystray.MenuItem, pystray.Menu

        def face_items() -> Iterator[Any]:
            for face in self.faces_for_menu():
                yield Item(face.name, _bind(self.set_face, face), checked=self._is_face(face), radio=True)
            yield Menu.SEPARATOR
            yield Item("Choose…", lambda: self.choose_face())

        quality_items = [
            Item("Auto", _bind(self.set_quality, None), checked=self._is_quality(None), radio=True)
        ] + [
            Item(LEVEL_LABELS[level], _bind(self.set_quality, level), checked=self._is_quality(level), radio=True)
            for level in Level
        ]
        return Menu(
            # default=True: a left click on the icon switches the swap (the xorg backend has no
            # pop-up menu, only this default action).
            Item("Swap on", lambda: self.toggle(), checked=lambda _i: self._view.enabled, default=True),
            Item("Source face", Menu(face_items)),
            Item("Quality", Menu(*quality_items)),
            Menu.SEPARATOR,
            Item("Open preview", lambda: self.open_preview()),
            Item("Edit config", lambda: self.edit_config()),
            Item(lambda _i: f"Status: {self._view.summary}", lambda: self.show_status()),
            Menu.SEPARATOR,
            Item("Quit", lambda: self.quit()),
        )

    def _is_face(self, face: Path) -> Callable[[Any], bool]:
        return lambda _item: self._view.source_face == face

    def _is_quality(self, level: Level | None) -> Callable[[Any], bool]:
        return lambda _item: self._view.quality == level

    # -- icon ---------------------------------------------------------------------------------

    def attach(self, icon: Any) -> None:
        """Use this pystray icon. For the xorg backend call it before `icon.run()`: it sets up
        X resources while only one thread uses the icon's connection."""
        self._icon = icon
        if _is_xorg(icon):
            _enable_xorg_clicks(icon)
            self._waker = _XorgWaker.for_icon(icon)

    def loop_ended(self) -> None:
        """Called by run_tray when the icon's event loop has returned."""
        self._loop_ended.set()

    def _stop_icon(self) -> None:
        icon = self._icon
        if icon is None:
            return
        icon.stop()
        if self._waker is not None:
            self._waker.wake_until(self._loop_ended)

    def draw(self) -> None:
        """Bring the icon image, tooltip and menu in line with the current view (poller thread)."""
        icon = self._icon
        view = self._view
        if icon is None or self._drawn == (view.state, view.summary):
            return
        title = f"{APP_TITLE}: {view.summary}"
        image = render_icon(view.state) if self._drawn is None or self._drawn[0] != view.state else None
        if self._xwindow is not None:
            self._xwindow.show(icon, image, title)
        else:
            if image is not None:
                icon.icon = image
            icon.title = title
            icon.update_menu()
        self._drawn = (view.state, view.summary)

    def start_polling(self) -> None:
        self._poller = threading.Thread(target=self._poll_loop, name="tray-status", daemon=True)
        self._poller.start()

    def stop_polling(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=5)

    def _poll_loop(self) -> None:
        if _is_xorg(self._icon):
            self._xwindow = _XorgIconWindow.for_icon(self._icon)
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


def _bind(fn: Callable[[Any], None], arg: Any) -> Callable[[], None]:
    """A zero-argument menu action calling fn(arg) (pystray inspects the action's arity)."""
    return lambda: fn(arg)


def _start_thread(fn: Callable[[], None]) -> None:
    threading.Thread(target=fn, name="tray-action", daemon=True).start()


# ---------------------------------------------------------------------------------------------
# pystray backend glue


def import_pystray() -> ModuleType:
    """Import pystray, turning every way that fails into one VcamdError."""
    try:
        import pystray
    except Exception as exc:  # noqa: BLE001 — ImportError, or Xlib's errors when no X server answers
        raise VcamdError(
            f"no tray icon backend: {type(exc).__name__}: {exc}",
            fix="run in a desktop session (DISPLAY set) with pystray and python-xlib installed, or use --no-tray",
        ) from None
    return pystray


def backend_name(pystray: ModuleType) -> str:
    """'xorg', 'gtk', 'appindicator', 'darwin', 'win32' or 'dummy'."""
    return pystray.Icon.__module__.rsplit(".", 1)[-1].lstrip("_")


def _is_xorg(icon: Any) -> bool:
    return icon is not None and type(icon).__module__ == "pystray._xorg"


def _enable_xorg_clicks(icon: Any) -> None:
    """Make a left click on the xorg backend's icon reach pystray.

    pystray 0.19's xorg backend handles ButtonPress but creates its window without selecting
    ButtonPressMask, so X never delivers the click and the default action never runs. Selecting it
    here is the smallest fix; other backends have no `_window` and are left alone.
    """
    from Xlib import X

    window, display = icon._window, icon._display
    window.change_attributes(event_mask=X.ExposureMask | X.StructureNotifyMask | X.ButtonPressMask)
    display.flush()


class _XorgWaker:
    """Wakes pystray's xorg event loop when `Icon.stop()` left it blocked.

    With pystray 0.19.5 and python-xlib 0.33, `Icon.stop()` called from another thread left the
    loop blocked in `select()` in 6 of 20 tries under Xvfb (the icon window was gone, `run()` never
    returned). Any new event on the icon's X connection unblocks it, so after a stop we send a
    no-op ClientMessage to a small helper window of that connection, from a second connection,
    until the loop has returned.
    """

    def __init__(self, display_name: str, window: Any) -> None:
        self.display_name = display_name
        self.window = window

    @classmethod
    def for_icon(cls, icon: Any) -> _XorgWaker:
        from Xlib import X

        display = icon._display
        window = display.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent, window_class=X.InputOnly)
        display.flush()
        return cls(display.get_display_name(), window)

    def wake_until(self, ended: threading.Event, interval_s: float = 0.3, attempts: int = 20) -> None:
        from Xlib.display import Display
        from Xlib.protocol.event import ClientMessage

        for _ in range(attempts):
            if ended.wait(interval_s):
                return
            display = Display(self.display_name)
            try:
                wake = ClientMessage(window=self.window, client_type=display.intern_atom("_FACELIVE_WAKE"),
                                     data=(32, [0, 0, 0, 0, 0]))
                display.send_event(self.window, wake, event_mask=0)
                display.flush()
            finally:
                display.close()
        log.warning("tray: the icon's event loop did not end after stop()")


class _XorgIconWindow:
    """xorg: paints the icon, sets its tooltip and keeps it docked, over the poller's own X connection.

    pystray's xorg backend forwards `icon.icon = ...` from other threads to its event loop over
    the same python-xlib connection the loop reads from, and under Xvfb that deadlocked in about
    1 of 30 runs (the loop stuck waiting for a reply inside the forwarded update). X windows can
    be drawn from any connection, so the poller draws the icon window itself and hands pystray the
    new image only as the data its own Expose handler repaints from.

    It also re-sends the dock request when the window is not embedded while a tray host exists:
    the first request can go unanswered (seen in ~1 of 30 starts), and a tray host can start after
    us (session start) or restart.
    """

    _SYSTEM_TRAY_REQUEST_DOCK = 0

    def __init__(self, display_name: str, window_id: int, retry_s: float = 2.0) -> None:
        from Xlib.display import Display

        self._display = Display(display_name)
        self._window = self._display.create_resource_object("window", window_id)
        self._gc = self._window.create_gc()
        self._root = self._display.screen().root
        self._tray_atom = self._display.intern_atom(f"_NET_SYSTEM_TRAY_S{self._display.get_default_screen()}")
        self._opcode_atom = self._display.intern_atom("_NET_SYSTEM_TRAY_OPCODE")
        self._retry_s = retry_s
        self._last_request = time.monotonic()  # pystray sent the first request when the icon was shown

    @classmethod
    def for_icon(cls, icon: Any) -> _XorgIconWindow:
        return cls(icon._display.get_display_name(), icon._window.id)

    def show(self, icon: Any, image: Image.Image | None, title: str) -> None:
        from Xlib.error import XError

        try:
            if image is not None:
                geometry = self._window.get_geometry()
                canvas = Image.new("RGB", (geometry.width, geometry.height))
                canvas.paste(image.resize((geometry.width, geometry.height), Image.Resampling.LANCZOS))
                # What pystray's Expose handler paints from (plain attributes, no X traffic). Each
                # is replaced by a complete object, never cleared: the event loop may be drawing
                # from them right now. (Setting _icon_data to None raced the loop's
                # _assert_icon_data: AttributeError, pystray's loop ended and the daemon with it,
                # in ~1 of 20 daemon starts under Xvfb.)
                icon._icon = image
                icon._icon_data = canvas
                self._window.put_pil_image(self._gc, 0, 0, canvas)
            self._window.set_wm_name(title)
            self._display.flush()
        except XError as exc:
            log.debug("tray: icon window not drawable (%s)", exc)  # stopping, or not mapped yet

    def keep_docked(self) -> None:
        from Xlib import X
        from Xlib.error import XError
        from Xlib.protocol.event import ClientMessage

        try:
            embedded = self._window.query_tree().parent.id != self._root.id
            owner = self._display.get_selection_owner(self._tray_atom)
        except XError:
            return  # the icon window is gone (stopping)
        now = time.monotonic()
        if embedded or owner == X.NONE or now - self._last_request < self._retry_s:
            return
        self._last_request = now
        log.info("tray: icon not embedded in the system tray; asking the tray host again")
        request = ClientMessage(
            window=owner, client_type=self._opcode_atom,
            data=(32, [X.CurrentTime, self._SYSTEM_TRAY_REQUEST_DOCK, self._window.id, 0, 0]),
        )
        self._display.send_event(owner, request, event_mask=X.NoEventMask)
        self._display.flush()

    def close(self) -> None:
        self._display.close()


def systray_owner_present(display_name: str | None = None) -> bool:
    """X11: whether a system tray host owns `_NET_SYSTEM_TRAY_S<screen>` (so an icon can dock)."""
    from Xlib import X
    from Xlib.display import Display

    display = Display(display_name)
    try:
        atom = display.intern_atom(f"_NET_SYSTEM_TRAY_S{display.get_default_screen()}")
        return display.get_selection_owner(atom) != X.NONE
    finally:
        display.close()


def tray_available(environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether a tray icon can be shown here, and why (not).

    Linux/BSD need a desktop session (DISPLAY or WAYLAND_DISPLAY) and an importable pystray
    backend; with the xorg backend a system tray host must also be running.
    """
    env = os.environ if environ is None else environ
    if sys.platform not in ("win32", "darwin") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return False, "no DISPLAY or WAYLAND_DISPLAY: not in a desktop session"
    try:
        pystray = import_pystray()
    except VcamdError as err:
        return False, str(err)
    backend = backend_name(pystray)
    if backend == "dummy":
        return False, "pystray's dummy backend is selected (PYSTRAY_BACKEND=dummy)"
    if backend == "xorg":
        try:
            docked = systray_owner_present(env.get("DISPLAY"))
        except Exception as exc:  # noqa: BLE001 — Xlib raises several unrelated types on a bad display
            return False, f"cannot talk to X display {env.get('DISPLAY')!r}: {exc}"
        if not docked:
            return False, (
                f"no system tray host on {env.get('DISPLAY')} (GNOME needs the AppIndicator extension; "
                "or install PyGObject for the appindicator backend)"
            )
    return True, f"pystray backend {backend}"


def run_tray(
    controller: TrayController,
    setup: Callable[[TrayApp], None],
    *,
    quit_event: threading.Event | None = None,
    **app_options: Any,
) -> TrayApp:
    """Show the tray icon and run its event loop on the calling (main) thread until Quit.

    `setup(app)` runs once the icon is up, in pystray's setup thread: start the engine there (and
    keep `app` to send notifications, e.g. about a broken config edit). When it raises, the icon is taken down and the error is raised here. `quit_event` set by the daemon
    (e.g. after `vcamd quit`) takes the icon down within one poll interval.
    `app_options` are passed to TrayApp (recent_faces, open_preview, edit_config, ...).
    """
    pystray = import_pystray()
    app = TrayApp(controller, quit_event=quit_event, **app_options)
    icon = pystray.Icon(ICON_NAME, render_icon(TrayState.off), f"{APP_TITLE}: starting", app.menu())
    failure: list[BaseException] = []

    app.attach(icon)  # before run(): the xorg set-up must not race the event loop

    def on_ready(icon: Any) -> None:
        icon.visible = True
        try:
            setup(app)
        except BaseException as exc:  # noqa: BLE001 — handed to the main thread below
            failure.append(exc)
            icon.stop()
            return
        app.start_polling()

    try:
        icon.run(setup=on_ready)
    finally:
        app.loop_ended()
        app.stop_polling()
    if failure:
        raise failure[0]
    return app


@contextmanager
def _ctrl_c_asks_to_quit(controller: TrayController) -> Iterator[None]:
    """While the tray runs on the main thread, Ctrl-C (SIGINT) asks the engine to quit and the
    tray follows it, like `vcamd quit` and SIGTERM.

    Left as KeyboardInterrupt, Ctrl-C lands in pystray's xorg event loop, whose bare `except:`
    swallows it and logs "An error occurred in the main loop" with a traceback (and it may cut an
    X request in half). A second Ctrl-C raises KeyboardInterrupt as usual, for an engine that
    does not stop. Off the main thread signal handlers cannot be set: nothing changes there.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_interrupt(_signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log.info("tray: interrupted; stopping the engine")
        controller.request_quit()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_engine_with_tray(
    controller: TrayController,
    engine_run: Callable[[], T],
    *,
    on_app: Callable[[TrayApp], None] | None = None,
    **app_options: Any,
) -> T:
    """The daemon's entry with a tray: the engine loop in a worker thread, the tray on this one.

    `engine_run` is the blocking engine loop (e.g. `lambda: engine.run(max_frames=n)`). When it
    returns (`vcamd quit`, SIGTERM, --frames reached) the icon is taken down; when the user picks
    Quit or presses Ctrl-C, the engine is asked to quit. Returns what `engine_run` returned and
    raises what it raised. Call it from the main thread (pystray needs it on macOS).
    `on_app(app)` runs once the icon is up, before the engine starts (keep `app` to notify).
    """
    engine_done = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = engine_run()
        except BaseException as exc:  # noqa: BLE001 — re-raised on the main thread below
            outcome["error"] = exc
        finally:
            engine_done.set()

    worker = threading.Thread(target=work, name="engine", daemon=True)

    def setup(app: TrayApp) -> None:
        if on_app is not None:
            on_app(app)
        worker.start()

    interrupted = quit_chosen = False
    try:
        with _ctrl_c_asks_to_quit(controller):
            quit_chosen = run_tray(controller, setup, quit_event=engine_done, **app_options).quit_chosen
    except KeyboardInterrupt:
        log.info("tray: interrupted")
        interrupted = True
    except Exception as exc:  # the icon is a convenience: its failure must not take the camera down
        log.warning("the tray icon failed (%s); FaceLive Camera keeps running without it", exc)
    if worker.ident is None:
        if interrupted:
            raise KeyboardInterrupt
        log.warning("no tray icon; running without it (control it with `vcamd on/off/status/quit`)")
        work()  # the icon never came up: run the engine here, headless
    else:
        if not engine_done.is_set():
            if interrupted:
                controller.request_quit()  # a second Ctrl-C
            elif not quit_chosen:
                # The icon went away on its own (pystray error, tray host gone): keep the camera.
                log.warning("the tray icon closed; FaceLive Camera keeps running (stop it with `vcamd quit`)")
        worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
