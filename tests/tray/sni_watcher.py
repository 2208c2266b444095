"""A minimal StatusNotifierWatcher (org.kde.StatusNotifierWatcher), the tray host side of AppIndicator.

Debian packages none small enough for a test (KDE's is in plasma-workspace), so this one is written
with Gio from the freedesktop StatusNotifierItem spec: it owns the watcher name on the session bus
given by DBUS_SESSION_BUS_ADDRESS, accepts RegisterStatusNotifierItem / RegisterStatusNotifierHost,
and prints one JSON line per registered item: {"service": BUS_NAME, "path": OBJECT_PATH}.
It prints {"ready": true} once it owns the name. Run: python sni_watcher.py (stops on SIGTERM).
"""

from __future__ import annotations

import json
import signal
import sys

from gi.repository import Gio, GLib

WATCHER = "org.kde.StatusNotifierWatcher"
INTERFACE_XML = """
<node>
  <interface name="org.kde.StatusNotifierWatcher">
    <method name="RegisterStatusNotifierItem"><arg name="service" type="s" direction="in"/></method>
    <method name="RegisterStatusNotifierHost"><arg name="service" type="s" direction="in"/></method>
    <property name="RegisteredStatusNotifierItems" type="as" access="read"/>
    <property name="IsStatusNotifierHostRegistered" type="b" access="read"/>
    <property name="ProtocolVersion" type="i" access="read"/>
    <signal name="StatusNotifierItemRegistered"><arg type="s"/></signal>
    <signal name="StatusNotifierItemUnregistered"><arg type="s"/></signal>
    <signal name="StatusNotifierHostRegistered"/>
  </interface>
</node>
"""


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def main() -> int:
    items: list[str] = []
    loop = GLib.MainLoop()
    info = Gio.DBusNodeInfo.new_for_xml(INTERFACE_XML).interfaces[0]

    def on_call(connection, sender, path, interface, method, params, invocation):
        (service,) = params.unpack()
        if method == "RegisterStatusNotifierItem":
            # An item passes its bus name, or (libayatana-appindicator) its object path on the sender.
            bus_name, object_path = (sender, service) if service.startswith("/") else (service, "/StatusNotifierItem")
            items.append(f"{bus_name}{object_path}")
            connection.emit_signal(None, path, interface, "StatusNotifierItemRegistered", GLib.Variant("(s)", (items[-1],)))
            emit({"service": bus_name, "path": object_path})
        invocation.return_value(None)

    def on_get_property(connection, sender, path, interface, name):
        return {
            "RegisteredStatusNotifierItems": GLib.Variant("as", items),
            "IsStatusNotifierHostRegistered": GLib.Variant("b", True),  # this process is the host too
            "ProtocolVersion": GLib.Variant("i", 0),
        }[name]

    def on_bus(connection, _name):
        connection.register_object("/StatusNotifierWatcher", info, on_call, on_get_property, None)

    def on_name(_connection, _name):
        emit({"ready": True})

    def on_lost(_connection, _name):
        emit({"error": f"could not own {WATCHER}"})
        loop.quit()

    Gio.bus_own_name(Gio.BusType.SESSION, WATCHER, Gio.BusNameOwnerFlags.NONE, on_bus, on_name, on_lost)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, lambda: loop.quit() or GLib.SOURCE_REMOVE)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
