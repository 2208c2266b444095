"""Tray test fixtures: the in-test controller, pystray without a display, a real X session.

The X session is real: Xvfb on a display it picks itself (-displayfd), Debian's `trayer` as the
system tray host. Tests that need it skip with the reason when Xvfb/trayer/xdotool are missing
(`.ci/run` installs xvfb, trayer, xdotool, x11-utils).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent
TRAY_HOST = HERE / "tray_host.py"


def _load_by_path(name: str, path: Path) -> ModuleType:
    # Test helper modules cannot be imported by name under --import-mode=importlib; load by path.
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_tray_host() -> ModuleType:
    return _load_by_path("facelive_tray_host", TRAY_HOST)


@pytest.fixture(scope="session")
def tray_host() -> ModuleType:
    """tests/tray/tray_host.py: LoggingController, menu_tree, find_item."""
    return _load_tray_host()


@pytest.fixture(scope="session")
def xscreen() -> ModuleType:
    """tests/tray/xscreen.py: find_icon_window, toplevel_of, screenshot, dominant_state."""
    return _load_by_path("facelive_xscreen", HERE / "xscreen.py")


@pytest.fixture
def controller(tray_host: ModuleType):
    return tray_host.LoggingController()


@pytest.fixture
def pystray_without_display(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """pystray with its dummy backend: Menu/MenuItem work the same, no X connection is made.

    (Importing pystray on Linux otherwise connects to $DISPLAY and fails without one.)
    """
    import sys

    if "pystray" not in sys.modules:
        monkeypatch.setenv("PYSTRAY_BACKEND", "dummy")
    import pystray

    return pystray


@dataclass
class XSession:
    display: str
    env: dict[str, str]
    trayer: subprocess.Popen


def _wait_for(predicate, timeout: float, what: str, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def x_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[XSession]:
    """Xvfb + trayer, torn down after the module."""
    missing = [tool for tool in ("Xvfb", "trayer", "xdotool") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install xvfb trayer xdotool x11-utils)")
    logs = tmp_path_factory.mktemp("xsession")
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "640x480x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=(logs / "xvfb.log").open("wb"),
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as numbers:
        number = numbers.readline().strip()  # Xvfb writes the display number once it is ready
    if not number:
        xvfb.kill()
        pytest.fail(f"Xvfb did not start: {(logs / 'xvfb.log').read_text()[-500:]}")
    display = f":{number}"
    env = {**os.environ, "DISPLAY": display, "PYSTRAY_BACKEND": "xorg"}
    env.pop("WAYLAND_DISPLAY", None)
    trayer = subprocess.Popen(
        ["trayer", "--edge", "top", "--align", "right", "--widthtype", "request", "--height", "32",
         "--transparent", "false", "--tint", "0x000000"],
        env=env, stdout=subprocess.DEVNULL, stderr=(logs / "trayer.log").open("wb"),
    )
    try:
        from vcamd.tray import systray_owner_present

        _wait_for(lambda: systray_owner_present(display), 10, "trayer to own the system tray selection", 0.1)
        yield XSession(display, env, trayer)
    finally:
        for process in (trayer, xvfb):
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture
def wait_for():
    return _wait_for
