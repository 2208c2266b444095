"""An in-test Controllable, and a script that shows the real tray icon around it.

`LoggingController` (a `support.fakes.FakeEngine`) keeps the engine's control state in memory, validates
a source face with the real photo reader and appends every call to a JSON-lines log. The tests use it in-process (through
conftest.py) and in a subprocess: `python tray_host.py --log FILE [--face PHOTO ...]` runs
`vcamd.tray.run_tray` on its main thread, like the daemon does, and reads commands on stdin:

    invoke Quality/Lower resolution   activate a menu item through pystray's Menu API
    dump                              log the menu tree (texts, checks)
    set level low_res | set state camera offline | set config_error TEXT | set config_error
                                      change what status() reports (to show degraded / error)
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

if "support" not in sys.modules:  # run as a script (the tray tests' subprocess): tests/ on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.fakes import FakeEngine  # noqa: E402

from vcamd.common.quality import Level  # noqa: E402


class LoggingController(FakeEngine):
    """The engine's control surface in memory (tests/support/fakes.py), every call logged; the
    status the tray shows, and `run_engine` standing in for the engine's loop."""

    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__(None, log_path=log_path)
        self.panel_url: str | None = None
        self.fps = 29.7

    def status(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "state": self.state,
            "level": self.level.name,
            "fps": self.fps,
            "latency_ms": 41.0,
            "source_face": str(self.source_face) if self.source_face else None,
            "providers": {"det_10g.onnx": "CPUExecutionProvider"},
            "config_error": self.config_error,
            **({"panel_url": self.panel_url} if self.panel_url else {}),
        }

    def panel_login_url(self) -> str:
        """As the daemon's WithPanelUrl: a one-time login address, never the token."""
        assert self.panel_url is not None
        return f"{self.panel_url}?code=one-time"

    def set_quality(self, level: Level | None) -> None:
        super().set_quality(level)
        self.level = Level.full if level is None else level

    def run_engine(self) -> str:
        """Stands in for LiveEngine.run(): blocks until a quit is requested."""
        self.log("engine_started")
        self.quit_requested.wait()
        self.log("engine_stopped")
        return "engine result"


def menu_tree(menu: Any) -> list[dict[str, Any]]:
    """Texts, checks and submenus of a pystray menu as plain data."""
    return [
        {"text": item.text, "checked": item.checked, "radio": item.radio, "default": item.default,
         **({"submenu": menu_tree(item.submenu)} if item.submenu is not None else {})}
        for item in menu
    ]


def find_item(menu: Any, path: str) -> Any:
    """The menu item at 'Top/Sub' (texts compared exactly)."""
    first, _, rest = path.partition("/")
    for item in menu:
        if item.text == first:
            return find_item(item.submenu, rest) if rest else item
    raise KeyError(f"no menu item {first!r} in {[i.text for i in menu]}")


def _serve_commands(app: Any, controller: LoggingController) -> None:
    for line in sys.stdin:
        verb, _, arg = line.strip().partition(" ")
        try:
            if verb == "invoke":
                item = find_item(app.icon.menu, arg)
                item(app.icon)  # what pystray's backends do on activation, then update_menu()
                app.icon.update_menu()
                controller.log("invoked", arg)
            elif verb == "dump":
                controller.log("menu", menu_tree(app.icon.menu))
            elif verb == "engine-quit":  # what `vcamd quit` does: the control server asks the engine
                controller.request_quit()
            elif verb == "set":
                key, _, value = arg.partition(" ")
                if key == "level":
                    controller.level = Level[value]
                elif key == "state":
                    controller.state = value
                elif key == "config_error":
                    controller.config_error = value or None
                controller.log("set", arg)
            else:
                controller.log("unknown_command", line.strip())
        except Exception as exc:  # noqa: BLE001 — report to the test instead of dying silently
            controller.log("command_failed", f"{line.strip()}: {type(exc).__name__}: {exc}")


def main() -> int:
    from vcamd.tray import run_engine_with_tray

    parser = argparse.ArgumentParser()
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--face", type=Path, action="append", default=[])
    args = parser.parse_args()
    controller = LoggingController(args.log)

    def engine_run() -> str:
        # The tray is up when the engine starts (run_engine_with_tray starts it from the setup);
        # when the icon could not be shown the engine runs headless, and the test sees "no_tray".
        if not app_holder:
            controller.log("no_tray")
        else:
            threading.Thread(target=_serve_commands, args=(app_holder[0], controller), daemon=True).start()
        controller.log("ready")
        return controller.run_engine()

    app_holder: list[Any] = []
    result = run_engine_with_tray(
        controller,
        engine_run,
        recent_faces=lambda: args.face,
        notify=lambda message, title: controller.log("notify", f"{title}: {message}"),
        poll_interval_s=0.25,
        on_app=app_holder.append,
    )
    controller.log("exited", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
