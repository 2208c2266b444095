"""Which pystray backend shows the icon, whether it has a menu, and importing it.

pystray's own pick (appindicator, else gtk, else xorg: whichever imports) ignores whether anything
on the desktop shows that kind of icon. Here the choice follows the desktop:

- `PYSTRAY_BACKEND` set: that one (the user's word).
- Windows / macOS: pystray's win32 / darwin backends (native menus).
- A StatusNotifierWatcher on the session bus (KDE, GNOME with the AppIndicator extension, most
  current panels) and the AppIndicator typelib: `appindicator` (StatusNotifierItem + dbusmenu).
- Else GTK 3 through PyGObject: `gtk` (XEmbed icon with a right-click menu).
- Else `xorg` (XEmbed icon, no menu: a left click switches the swap). Also without a D-Bus session
  bus: pystray's GTK backends need one (for notifications) and fail to start without it.

PyGObject comes with the `[tray]` extra; the typelibs with the apt packages in the README's "Tray".
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from vcamd.common.errors import VcamdError

BACKEND_ENV = "PYSTRAY_BACKEND"
MENU_BACKENDS = frozenset({"appindicator", "gtk", "darwin", "win32"})
"""Backends that show the full pop-up menu; xorg shows none (and dummy shows nothing)."""
SNI_WATCHER = "org.kde.StatusNotifierWatcher"

TRAY_EXTRA_FIX = (
    "for the full menu: sudo apt install gir1.2-ayatanaappindicator3-0.1 libgirepository1.0-dev libcairo2-dev pkg-config "
    "&& pip install -e '.[tray]' (see README, Tray)"
)
GNOME_EXTENSION_FIX = (
    "GNOME shows tray icons only with the AppIndicator extension: sudo apt install gnome-shell-extension-appindicator, "
    "then enable it (gnome-extensions enable ubuntu-appindicators@ubuntu.com or appindicatorsupport@rgcjonas.gmail.com) "
    "and log in again"
)


@dataclass(frozen=True, slots=True)
class BackendChoice:
    name: str
    """appindicator, gtk, xorg, win32, darwin or dummy (pystray's backend module names)."""
    why: str

    @property
    def has_menu(self) -> bool:
        return self.name in MENU_BACKENDS


def session_bus_address(environ: Mapping[str, str]) -> str | None:
    """The D-Bus session bus address of this session, without autolaunching a bus."""
    address = environ.get("DBUS_SESSION_BUS_ADDRESS")
    if address:
        return address
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and (Path(runtime) / "bus").exists():
        return f"unix:path={runtime}/bus"
    return None


def typelib_available(namespace: str, version: str) -> bool:
    """Whether PyGObject is installed and can load this typelib (nothing is initialised)."""
    try:
        import gi

        gi.require_version(namespace, version)
    except (ImportError, ValueError):
        return False
    return True


def appindicator_available() -> bool:
    return typelib_available("Gtk", "3.0") and (
        typelib_available("AyatanaAppIndicator3", "0.1") or typelib_available("AppIndicator3", "0.1")
    )


def status_notifier_watcher_present(environ: Mapping[str, str]) -> bool:
    """Whether a StatusNotifierWatcher (a host for AppIndicator icons) owns its name on the session bus."""
    address = session_bus_address(environ)
    if address is None:
        return False
    try:
        from gi.repository import Gio, GLib
    except ImportError:
        return False
    flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
    try:
        bus = Gio.DBusConnection.new_for_address_sync(address, flags, None, None)
        try:
            reply = bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameHasOwner",
                                  GLib.Variant("(s)", (SNI_WATCHER,)), GLib.VariantType("(b)"),
                                  Gio.DBusCallFlags.NONE, 3000, None)
            return bool(reply.unpack()[0])
        finally:
            bus.close_sync(None)
    except GLib.Error:
        return False


def tray_extra_installed() -> bool:
    """Whether PyGObject (the `[tray]` extra) is importable: without it no backend has a menu."""
    import importlib.util

    return importlib.util.find_spec("gi") is not None


def no_tray_host_fix(env: Mapping[str, str]) -> str:
    """The fix when the session has no tray host: the desktop's own (GNOME: its extension); the
    `[tray]` extra only when it is not installed (it gives a menu, not a host)."""
    if "GNOME" in env.get("XDG_CURRENT_DESKTOP", "").upper():
        fix = GNOME_EXTENSION_FIX
    else:
        fix = ("this desktop has no tray host: run a panel with a system tray or an AppIndicator (StatusNotifierItem) "
               "host (KDE, XFCE, MATE and Cinnamon panels have one), or use `vcamd run --no-tray`")
    return fix if tray_extra_installed() else f"{fix}; {TRAY_EXTRA_FIX}"


def choose_backend(
    environ: Mapping[str, str] | None = None,
    platform: str = sys.platform,
    *,
    watcher_present: Callable[[Mapping[str, str]], bool] = status_notifier_watcher_present,
    has_appindicator: Callable[[], bool] = appindicator_available,
    has_gtk: Callable[[], bool] = lambda: typelib_available("Gtk", "3.0"),
) -> BackendChoice:
    """The backend for this session (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    forced = env.get(BACKEND_ENV)
    if forced:
        return BackendChoice(forced, f"{BACKEND_ENV}={forced}")
    if platform == "win32":
        return BackendChoice("win32", "Windows")
    if platform == "darwin":
        return BackendChoice("darwin", "macOS")
    if session_bus_address(env) is None:
        # pystray's GTK backends send notifications over the session bus and fail without one.
        return BackendChoice("xorg", "no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS)")
    if has_appindicator():
        if watcher_present(env):
            return BackendChoice("appindicator", "a StatusNotifierWatcher is on the session bus")
        if has_gtk():
            return BackendChoice("gtk", "no StatusNotifierWatcher on the session bus")
    elif has_gtk():
        return BackendChoice("gtk", "PyGObject without the AppIndicator typelib")
    return BackendChoice("xorg", "PyGObject (the [tray] extra) is not installed")


@dataclass(frozen=True, slots=True)
class Pystray:
    """The chosen backend's Icon class and pystray's (backend-independent) Menu and MenuItem."""

    backend: str
    Icon: Any
    Menu: Any
    MenuItem: Any


def import_pystray_menus() -> ModuleType:
    """The pystray package, for Menu and MenuItem, without connecting to any display.

    Importing pystray imports a backend; with none chosen yet, the dummy one is imported (it
    opens nothing) and the real backend's module is imported by `import_pystray`.
    """
    if "pystray" in sys.modules:
        return sys.modules["pystray"]
    previous = os.environ.get(BACKEND_ENV)
    os.environ[BACKEND_ENV] = "dummy"
    try:
        import pystray
    finally:
        if previous is None:
            os.environ.pop(BACKEND_ENV, None)
        else:
            os.environ[BACKEND_ENV] = previous
    package: ModuleType = pystray  # untyped: Any to the checker
    return package


def import_pystray(backend: str) -> Pystray:
    """pystray with this backend, every way that fails turned into one VcamdError."""
    try:
        pystray = import_pystray_menus()
        module = importlib.import_module(f"pystray._{backend}")
    except Exception as exc:  # noqa: BLE001 — ImportError, ValueError from gi, Xlib errors without an X server
        raise VcamdError(
            f"no tray icon backend {backend}: {type(exc).__name__}: {exc}",
            fix="run in a desktop session (DISPLAY set); " + TRAY_EXTRA_FIX + "; or use --no-tray",
        ) from None
    return Pystray(backend, module.Icon, pystray.Menu, pystray.MenuItem)


@dataclass(frozen=True, slots=True)
class TrayDiagnosis:
    """Whether an icon can be shown here, by which backend, with a menu or not, and the fix."""

    available: bool
    backend: str | None
    has_menu: bool
    detail: str
    fix: str = ""


def diagnose_tray(environ: Mapping[str, str] | None = None, platform: str = sys.platform,
                  choice: BackendChoice | None = None) -> TrayDiagnosis:
    """What the daemon's tray would be in this session. Opens the display to check; shows nothing."""
    env = os.environ if environ is None else environ
    if platform not in ("win32", "darwin") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return TrayDiagnosis(False, None, False, "no DISPLAY or WAYLAND_DISPLAY: not in a desktop session",
                             "run from a desktop session, or use `vcamd run --no-tray` (and `vcamd on/off/status`)")
    choice = choice or choose_backend(env, platform)
    if choice.name == "dummy":
        return TrayDiagnosis(False, "dummy", False, f"pystray's dummy backend is selected ({choice.why})",
                             f"unset {BACKEND_ENV}")
    try:
        import_pystray(choice.name)
    except VcamdError as err:
        return TrayDiagnosis(False, choice.name, False, err.message, err.fix or TRAY_EXTRA_FIX)
    gnome = "GNOME" in env.get("XDG_CURRENT_DESKTOP", "").upper()
    if choice.name in ("xorg", "gtk") and not env.get("DISPLAY"):
        return TrayDiagnosis(False, choice.name, False,
                             f"backend {choice.name} ({choice.why}) needs X11 (XEmbed), and this is a Wayland session without DISPLAY",
                             no_tray_host_fix(env))
    if choice.name in ("xorg", "gtk") and env.get("DISPLAY"):
        from vcamd.tray.xorg import systray_owner_present

        try:
            docked = systray_owner_present(env.get("DISPLAY"))
        except Exception as exc:  # noqa: BLE001 — Xlib raises several unrelated types on a bad display
            return TrayDiagnosis(False, choice.name, False, f"cannot talk to X display {env.get('DISPLAY')!r}: {exc}",
                                 "check DISPLAY, or use `vcamd run --no-tray`")
        if not docked:
            return TrayDiagnosis(False, choice.name, False,
                                 f"backend {choice.name} ({choice.why}), but no system tray (XEmbed) host on {env.get('DISPLAY')}",
                                 no_tray_host_fix(env))
    if choice.name == "xorg":
        return TrayDiagnosis(True, "xorg", False,
                             f"backend xorg ({choice.why}): the icon has no menu, a left click only switches the swap",
                             TRAY_EXTRA_FIX + (f"; {GNOME_EXTENSION_FIX}" if gnome else ""))
    label = {"appindicator": "appindicator (StatusNotifierItem)", "gtk": "gtk (XEmbed)"}.get(choice.name, choice.name)
    return TrayDiagnosis(True, choice.name, True, f"backend {label} with the full menu ({choice.why})")


def tray_available(environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether a tray icon can be shown here, and why (not)."""
    diagnosis = diagnose_tray(environ)
    return diagnosis.available, (f"pystray backend {diagnosis.backend}" if diagnosis.available else diagnosis.detail)
