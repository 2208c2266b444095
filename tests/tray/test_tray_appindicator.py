"""The AppIndicator backend with real hosts: a private D-Bus session bus and a StatusNotifierWatcher.

`tray_host.py` runs the real tray (`run_engine_with_tray`, as the daemon does) with no backend
forced: a StatusNotifierWatcher on the session bus makes it choose appindicator. The icon
registers with the watcher (tests/tray/sni_watcher.py, a minimal watcher written with Gio), and
the test then does what a panel does: it reads the item's menu over D-Bus (com.canonical.dbusmenu
GetLayout) and clicks items (Event "clicked"); the in-test controller logs what reached it.

Needs dbus-daemon, Xvfb + trayer (GTK needs a display), PyGObject (the `[tray]` extra) and the
AyatanaAppIndicator3 typelib (apt gir1.2-ayatanaappindicator3-0.1); skips with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
TRAY_HOST = HERE / "tray_host.py"
WATCHER = HERE / "sni_watcher.py"


def _needs() -> str | None:
    from vcamd.tray.backends import appindicator_available

    if shutil.which("dbus-daemon") is None:
        return "needs dbus-daemon (apt-get install dbus-daemon)"
    if not appindicator_available():
        return "needs PyGObject (pip install -e '.[tray]') and gir1.2-ayatanaappindicator3-0.1 (see README, Tray)"
    return None


pytestmark = pytest.mark.skipif(_needs() is not None, reason=str(_needs()))


def _load_by_path(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_bus = _load_by_path("facelive_session_bus", HERE / "session_bus.py")
Lines, private_bus, watcher = _bus.Lines, _bus.private_bus, _bus.watcher
_stop = _bus.stop


@pytest.fixture
def session_env(x_session, private_bus: str) -> dict[str, str]:
    """The desktop session as the daemon sees it: X display, our bus, no backend forced."""
    env = {**x_session.env, "DBUS_SESSION_BUS_ADDRESS": private_bus, "NO_AT_BRIDGE": "1"}
    env.pop("PYSTRAY_BACKEND", None)
    return env


@pytest.fixture
def bus(private_bus: str):
    from gi.repository import Gio

    flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
    connection = Gio.DBusConnection.new_for_address_sync(private_bus, flags, None, None)
    yield connection
    connection.close_sync(None)


def call(bus, service: str, path: str, interface: str, method: str, args=None, reply: str | None = None) -> Any:
    from gi.repository import Gio, GLib

    result = bus.call_sync(service, path, interface, method, args, GLib.VariantType(reply) if reply else None,
                           Gio.DBusCallFlags.NONE, 10_000, None)
    return result.unpack() if result is not None else None


def get_property(bus, service: str, path: str, interface: str, name: str) -> Any:
    from gi.repository import GLib

    (value,) = call(bus, service, path, "org.freedesktop.DBus.Properties", "Get", GLib.Variant("(ss)", (interface, name)), "(v)")
    return value


def layout(bus, service: str, menu_path: str) -> dict:
    """The whole dbusmenu tree as {"id", "label", "type", "toggle-state", "children"} dicts."""
    from gi.repository import GLib

    _revision, root = call(bus, service, menu_path, "com.canonical.dbusmenu", "GetLayout",
                           GLib.Variant("(iias)", (0, -1, [])), "(u(ia{sv}av))")

    def node(raw) -> dict:
        item_id, props, children = raw
        # dbusmenu labels use mnemonic syntax: "__" is a literal "_" (what the panel shows).
        return {"id": item_id, "label": props.get("label", "").replace("__", "\0").replace("_", "").replace("\0", "_"), "type": props.get("type", "standard"),
                "toggle-state": props.get("toggle-state"), "visible": props.get("visible", True),
                "children": [node(c) for c in children]}

    return node(root)


def find(tree: dict, path: str) -> dict:
    first, _, rest = path.partition("/")
    for child in tree["children"]:
        if child["label"] == first:
            return find(child, rest) if rest else child
    raise KeyError(f"no menu item {first!r} in {[c['label'] for c in tree['children']]}")


def click(bus, service: str, menu_path: str, path: str, wait_for) -> None:
    """Click the item at 'Top/Sub', as a panel does: with the id from the current layout.

    The tray rebuilds its menu when what it shows changes (new ids, announced by LayoutUpdated);
    a click that raced a rebuild is refused by dbusmenu and made again on the new layout.
    """
    from gi.repository import GLib

    def attempt() -> bool:
        item = find(layout(bus, service, menu_path), path)
        try:
            call(bus, service, menu_path, "com.canonical.dbusmenu", "Event",
                 GLib.Variant("(isvu)", (item["id"], "clicked", GLib.Variant("i", 0), 0)))
        except GLib.Error as err:
            if "does not refer to a menu item" in err.message:
                return False
            raise
        return True

    wait_for(attempt, f"a click on {path} to be accepted")


def events(log: Path, name: str) -> list:
    if not log.exists():
        return []
    return [e["value"] for e in map(json.loads, log.read_text().splitlines()) if e["event"] == name]


def test_appindicator_registers_and_its_menu_works_over_dbus(session_env, watcher, bus, tmp_path, assets, wait_for):
    log = tmp_path / "calls.jsonl"
    newton, crowd = assets / "images" / "newton.png", assets / "images" / "crowd_selfie.jpg"
    host = subprocess.Popen([sys.executable, str(TRAY_HOST), "--log", str(log), "--face", str(newton), "--face", str(crowd)],
                            env=session_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = Lines(host)
    try:
        # 1. With a watcher on the bus the tray chooses appindicator and registers a StatusNotifierItem.
        registered = wait_for(lambda: [i for i in watcher.items if "service" in i] or host.poll() is not None,
                              "the tray to register with the StatusNotifierWatcher")
        assert host.poll() is None, output.items
        service, item_path = registered[0]["service"], registered[0]["path"]
        assert get_property(bus, service, item_path, "org.kde.StatusNotifierItem", "Id") == "facelive"
        wait_for(lambda: get_property(bus, service, item_path, "org.kde.StatusNotifierItem", "Status") == "Active",
                 "the item to become Active")
        menu_path = get_property(bus, service, item_path, "org.kde.StatusNotifierItem", "Menu")

        # 2. The full menu, read as a panel reads it.
        def top_labels() -> list[str]:
            return [c["label"] if c["type"] != "separator" else "-" for c in layout(bus, service, menu_path)["children"]
                    if c["visible"]]

        wait_for(lambda: "Status: swap on" in top_labels(), "the menu to show the engine status")
        assert top_labels() == ["Swap on", "Swap off", "Source face", "Quality", "-", "Open control page", "Edit config",
                                "Status: swap on", "-", "Quit"]
        tree = layout(bus, service, menu_path)
        assert find(tree, "Swap on")["toggle-state"] == 1 and find(tree, "Swap off")["toggle-state"] == 0
        faces = [c["label"] for c in find(tree, "Source face")["children"] if c["type"] != "separator"]
        assert faces == ["newton.png", "crowd_selfie.jpg", "Choose…"]
        quality = [c["label"] for c in find(tree, "Quality")["children"]]
        assert quality == ["Auto", "Full quality", "No pixel boost", "No enhancer", "Lower resolution", "Every other frame"]

        # 3. Clicking "Swap off" over D-Bus turns the swap off in the engine, and the menu follows.
        click(bus, service, menu_path, "Swap off", wait_for)
        wait_for(lambda: events(log, "set_enabled") == [False], "the click to reach the controller")
        wait_for(lambda: find(layout(bus, service, menu_path), "Swap off")["toggle-state"] == 1,
                 "the menu to show Swap off checked")
        assert "Status: swap off" in top_labels()

        # 4. A quality and a recent face, from the submenus.
        click(bus, service, menu_path, "Quality/Lower resolution", wait_for)
        wait_for(lambda: events(log, "set_quality") == ["low_res"], "Quality ▸ Lower resolution")
        click(bus, service, menu_path, "Source face/crowd_selfie.jpg", wait_for)
        wait_for(lambda: events(log, "set_source_face") == [str(crowd)], "Source face ▸ crowd_selfie.jpg")
        wait_for(lambda: find(layout(bus, service, menu_path), "Source face/crowd_selfie.jpg")["toggle-state"] == 1,
                 "the picked face to be checked")

        # 5. Quit stops the engine and the tray; the host exits cleanly.
        click(bus, service, menu_path, "Quit", wait_for)
        assert host.wait(timeout=20) == 0, output.items
        assert events(log, "request_quit") == [None] and events(log, "exited") == ["engine result"]
        assert events(log, "command_failed") == []
    finally:
        _stop(host)


def test_doctor_names_the_appindicator_backend_with_its_menu(session_env, watcher):
    """`vcamd doctor`'s tray check, in the same session: appindicator, full menu, ✓."""
    script = "from vcamd.doctor import check_tray; r = check_tray(); print(r.status.value); print(r.detail)"
    done = subprocess.run([sys.executable, "-c", script], env=session_env, capture_output=True, text=True, timeout=60)
    status, detail = done.stdout.strip().splitlines()[-2:]
    assert (status, detail.split(" (")[0]) == ("ok", "backend appindicator"), done.stdout + done.stderr
    assert "full menu" in detail


def test_without_a_watcher_the_gtk_backend_is_chosen(session_env):
    """No StatusNotifierWatcher on the bus (plain X11 panel): GTK's XEmbed icon, still with a menu."""
    script = "from vcamd.doctor import check_tray; r = check_tray(); print(r.status.value); print(r.detail)"
    done = subprocess.run([sys.executable, "-c", script], env=session_env, capture_output=True, text=True, timeout=60)
    status, detail = done.stdout.strip().splitlines()[-2:]
    assert status == "ok" and detail.startswith("backend gtk (XEmbed) with the full menu"), done.stdout + done.stderr
