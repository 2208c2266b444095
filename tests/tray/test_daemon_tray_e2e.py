"""`vcamd run` with its real tray icon, end to end, as a desktop user meets it.

The daemon runs as a subprocess on a real X session (Xvfb + Debian's `trayer` as the system tray
host, from conftest.py's `x_session`), without --no-tray: a video clip of a real photo is its
camera, the real SCRFD detector finds the face, stand-in swapper/recognizer models swap it, and
the output goes to the null sink. The test then works the daemon from both ends — real clicks on
the docked icon (xdotool), the control CLI (`vcamd status --json / on / off / quit`) and edits of
its config file — and checks after each step what the CLI reports and what the icon shows on
screen (its colour, read back from the X server with XGetImage).

pystray's xorg backend (the one used without PyGObject) has no pop-up menu: a left click runs the
default item, "Swap on", which toggles the swap.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from support.signals import send_to_another_thread

from vcamd.tray import TrayState

CLIP_SIZE = (320, 240)
CLIP_FPS = 15.0


# -- the daemon's inputs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon_inputs(tmp_path_factory, assets: Path, newton) -> dict[str, Path]:
    """A looping newton clip and the models: real SCRFD, stand-in swapper and recognizer."""
    from vcamd.bench.clips import write_sliding_clip
    from vcamd.bench.standins import build_recognizer, build_swapper

    d = tmp_path_factory.mktemp("daemon-inputs")
    return {
        "clip": write_sliding_clip(d / "newton.avi", newton, size=CLIP_SIZE, fps=CLIP_FPS, frames=30),
        "detector": assets / "models" / "scrfd_500m_kps.onnx",
        "swapper": build_swapper(d / "swapper_light.onnx"),
        "recognizer": build_recognizer(d / "recognizer.onnx"),
        "face": assets / "images" / "newton.png",
    }


def config_text(inputs: dict[str, Path]) -> str:
    return tomli_w.dumps({
        "models": {
            "detector": str(inputs["detector"]),
            "swapper": str(inputs["swapper"]),
            "recognizer": str(inputs["recognizer"]),
            "providers": ["cpu"],
            "threads": 1,
        },
        "detection": {"size": 320, "track_size": 160, "full_every": 10},
        "swap": {"source_face": str(inputs["face"]), "source_consent": True},
        "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 2.0},
        # The widest frame budget the config allows: on a loaded CI machine the watchdog must not
        # lower the quality, which would (rightly) turn the icon amber instead of green.
        "watchdog": {"budget_ms": 1000},
    })


# -- reading the screen -----------------------------------------------------------------------


# -- the daemon -------------------------------------------------------------------------------


class Daemon:
    """The `vcamd run` subprocess, its log, and the control CLI pointed at it."""

    def __init__(self, process: subprocess.Popen, log: Path, env: dict[str, str], wait_for) -> None:
        self.process = process
        self.log = log
        self.env = env
        self._wait_for = wait_for

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def cli(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "vcamd", *args], env=self.env, check=False,
                              capture_output=True, text=True, timeout=timeout)

    def status(self) -> dict | None:
        """`vcamd status --json`; None while the daemon does not answer (yet)."""
        done = self.cli("status", "--json")
        return json.loads(done.stdout) if done.returncode == 0 else None

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, predicate, what: str, poll: float = 0.1):
        """Poll `predicate` until truthy; fail at once, with the log, when the daemon has died.

        On a timeout the daemon gets SIGABRT: faulthandler (PYTHONFAULTHANDLER=1) writes every
        thread's stack into the log, so a hung daemon says where it hangs."""

        def check():
            if not self.alive():
                raise _DaemonDied(f"vcamd run exited {self.process.returncode} while waiting for {what}")
            return predicate()

        try:
            return self._wait_for(check, what, poll_s=poll)
        except _DaemonDied as died:
            raise AssertionError(f"{died}:\n{self.tail()}") from None
        except AssertionError as err:
            if self.alive():
                self.process.send_signal(signal.SIGABRT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=5)
            raise AssertionError(f"{err}\n--- vcamd run log ---\n{self.tail(12000)}") from None


class _DaemonDied(Exception):
    pass


@pytest.fixture
def daemon(x_session, daemon_inputs, tmp_path, wait_for):
    config = tmp_path / "config.toml"
    config.write_text(config_text(daemon_inputs), encoding="utf-8")
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "vcamd", "run", "--config", str(config), "--source", str(daemon_inputs["clip"]),
             "--loop", "--sink", "null", "--i-have-consent"],
            env={**x_session.env, "PYTHONFAULTHANDLER": "1"}, stdout=out, stderr=subprocess.STDOUT,
        )
    running = Daemon(process, log, x_session.env, wait_for)
    try:
        yield running, config
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def test_daemon_tray_icon_follows_clicks_cli_config_edits_and_quit(x_session, daemon, wait_for, xscreen):
    from Xlib import X
    from Xlib.display import Display
    from Xlib.error import XError

    proc, config = daemon

    wait = proc.wait

    display = Display(x_session.display)
    try:
        root = display.screen().root

        def shown() -> TrayState | None:
            try:
                icon_now = xscreen.find_icon_window(display)
                return xscreen.dominant_state(xscreen.screenshot(display, icon_now)) if icon_now is not None else None
            except XError:  # trayer re-laid the panel out while we read it: look again
                return None

        def click_icon() -> None:
            # Read the position each time: trayer may move the icon when it re-lays out the panel.
            icon_now = xscreen.find_icon_window(display)
            assert icon_now is not None, "the tray icon window is gone"
            geometry = icon_now.get_geometry()
            origin = root.translate_coords(icon_now, 0, 0)
            x, y = origin.x + geometry.width // 2, origin.y + geometry.height // 2
            subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", "1"],
                           env=x_session.env, check=True, timeout=10)

        def status_where(condition, what: str) -> dict:
            return wait(lambda: (s := proc.status()) is not None and condition(s) and s, what, 0.05)

        # 1. The icon docks into trayer: embedded (reparented into trayer's panel) and mapped.
        icon = wait(lambda: xscreen.find_icon_window(display), "the daemon's tray icon window")
        # (trayer reparents the icon first and maps it a moment later: wait for both.)
        wait(lambda: xscreen.toplevel_of(icon, root).id != icon.id and icon.get_attributes().map_state == X.IsViewable,
             "the icon to be embedded in trayer and shown")
        assert xscreen.toplevel_of(icon, root).get_wm_class() == ("panel", "trayer")

        # 2. Once faces are being swapped, the icon shows "on".
        started = status_where(lambda s: s["state"] == "running" and s["frames"]["swapped"] > 0,
                               "the daemon to swap frames")
        assert started["enabled"] is True and started["config_error"] is None
        wait(lambda: shown() is TrayState.on, "the icon to show 'on'")

        # 3. A real click on the icon (default item "Swap on") switches the swap off, and back on.
        click_icon()
        status_where(lambda s: s["enabled"] is False, "the click to switch the swap off")
        wait(lambda: shown() is TrayState.off, "the icon to show 'off' after the click")
        click_icon()
        status_where(lambda s: s["enabled"] is True, "the second click to switch the swap on")
        wait(lambda: shown() is TrayState.on, "the icon to show 'on' after the second click")

        # 4. The CLI switches the swap: the tray polls the status and follows within ~2 s.
        assert proc.cli("off").returncode == 0
        assert proc.status()["enabled"] is False
        wait(lambda: shown() is TrayState.off, "the icon to show 'off' after `vcamd off`")
        assert proc.cli("on").returncode == 0
        wait(lambda: shown() is TrayState.on, "the icon to show 'on' after `vcamd on`")

        # 5. A broken config edit: the daemon keeps running on the last good config, reports the
        # error, and the icon turns red; the fixed file clears both.
        good = config.read_text(encoding="utf-8")
        config.write_text(good.replace("[swap]", "[swap", 1), encoding="utf-8")  # a typo: unclosed header
        broken = status_where(lambda s: s["config_error"], "the broken config to be reported")
        assert str(config) in broken["config_error"] and "TOML" in broken["config_error"], broken["config_error"]
        assert broken["enabled"] is True and broken["state"] == "running"
        wait(lambda: shown() is TrayState.error, "the icon to show the config error")
        config.write_text(good, encoding="utf-8")
        status_where(lambda s: s["config_error"] is None, "the fixed config to clear the error")
        wait(lambda: shown() is TrayState.on, "the icon back to 'on' after the fix")

        # 6. `vcamd quit`: the daemon stops cleanly and takes its icon with it.
        quit_done = proc.cli("quit")
        assert quit_done.returncode == 0, quit_done.stderr
        try:
            code = proc.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"vcamd run still running 60 s after `vcamd quit`:\n{proc.tail()}") from None
        assert code == 0, proc.tail()
        assert "published " in proc.tail()  # the run's summary line: it ended through the normal path
        wait_for(lambda: xscreen.find_icon_window(display) is None, "the icon to leave the tray")
        assert "Traceback" not in proc.tail(), proc.tail()
    finally:
        display.close()


@pytest.mark.parametrize("to_thread", [False, True], ids=["to-process", "to-a-worker-thread"])
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_daemon_with_tray_stops_on_a_signal(x_session, daemon, wait_for, signal_name, to_thread, xscreen):
    """SIGTERM (service stop, logout) and SIGINT (Ctrl-C) end the run cleanly while the tray
    owns the main thread: exit code 0, the summary printed, the icon gone — also when the signal
    lands on a worker thread (ONNX Runtime's, the camera's) while the main thread waits for X events."""
    from Xlib.display import Display

    proc, _ = daemon
    display = Display(x_session.display)
    try:
        proc.wait(lambda: xscreen.find_icon_window(display), "the daemon's tray icon window")
        proc.wait(lambda: (s := proc.status()) is not None and s["frames"]["published"] > 0,
                  "the daemon to publish frames")
        if to_thread:
            send_to_another_thread(proc.process.pid, getattr(signal, signal_name))
        else:
            proc.process.send_signal(getattr(signal, signal_name))
        try:
            code = proc.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"vcamd run still running 60 s after {signal_name}:\n{proc.tail()}") from None
        assert code == 0, proc.tail()
        assert "published " in proc.tail() and "Traceback" not in proc.tail(), proc.tail()
        wait_for(lambda: xscreen.find_icon_window(display) is None, "the icon to leave the tray")
        assert proc.status() is None  # the control socket is gone too
    finally:
        display.close()
