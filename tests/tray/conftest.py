"""Tray test fixtures: the in-test controller, pystray without a display, a real X session.

The X session is real: Xvfb on a display it picks itself (-displayfd), Debian's `trayer` as the
system tray host. Tests that need it skip with the reason when Xvfb/trayer/xdotool are missing
(`.ci/run` installs xvfb, trayer, xdotool, x11-utils).
"""

from __future__ import annotations

import functools
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
from support import waiting

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


MIN_WAIT_S = 60.0
"""Every wait here is for a condition, so a generous deadline costs nothing when things go well (the
per-test numbers, 5-10 s, tuned on an idle machine, missed on a busy one)."""


X_START_TIMEOUT_S = 60.0
"""Xvfb and trayer start in well under a second on an idle machine; on a busy 2-core one, much later."""


def _display_answers(display: str) -> bool:
    from Xlib.display import Display

    try:
        Display(display).close()
        return True
    except Exception:  # noqa: BLE001 — any failure to connect means "not yet"
        return False


def _poll(predicate, timeout: float, poll: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _start_xvfb(logs: Path) -> tuple[subprocess.Popen, str]:
    """Xvfb on a display it picks itself, returned once that display accepts X connections."""
    import select

    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(
        # -noreset: by default Xvfb resets when its last client leaves, and a client connecting
        # then (trayer starting, the readiness probe) is refused or cut off.
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "640x480x24", "-nolisten", "tcp", "-noreset"],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=(logs / "xvfb.log").open("wb"),
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as numbers:
        # Xvfb writes the display number once it listens (and closes the pipe if it dies first).
        ready, _, _ = select.select([numbers], [], [], X_START_TIMEOUT_S)
        number = numbers.readline().strip() if ready else ""
    display = f":{number}"
    if not number or not _poll(lambda: _display_answers(display), X_START_TIMEOUT_S):
        _stop(xvfb)
        pytest.fail(f"Xvfb did not start on {display or 'any display'}: {(logs / 'xvfb.log').read_text()[-500:]}")
    return xvfb, display


def _tray_owned(display: str) -> bool:
    """Whether a tray host owns the system tray selection; an X connection cut off while the server
    settles is "not yet", not a failed set-up."""
    from vcamd.tray import systray_owner_present

    try:
        return systray_owner_present(display)
    except Exception:  # noqa: BLE001 — Xlib's connection errors: ask again
        return False


def _start_trayer(display: str, env: dict[str, str], logs: Path) -> subprocess.Popen:
    """trayer, returned once it owns the system tray selection; restarted if it dies on the way
    (a busy machine once saw "trayer: cannot open display" from an X server still settling)."""
    log_path = logs / "trayer.log"
    for _attempt in range(3):
        trayer = subprocess.Popen(
            ["trayer", "--edge", "top", "--align", "right", "--widthtype", "request", "--height", "32",
             "--transparent", "false", "--tint", "0x000000"],
            env=env, stdout=subprocess.DEVNULL, stderr=log_path.open("ab"),
        )
        if _poll(lambda: trayer.poll() is not None or _tray_owned(display), X_START_TIMEOUT_S) \
                and trayer.poll() is None:
            return trayer
        _stop(trayer)
    pytest.fail(f"trayer never owned the system tray on {display}: {log_path.read_text(errors='replace')[-500:]}")


@pytest.fixture(scope="module")
def x_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[XSession]:
    """Xvfb + trayer, torn down after the module."""
    missing = [tool for tool in ("Xvfb", "trayer", "xdotool") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install xvfb trayer xdotool x11-utils)")
    logs = tmp_path_factory.mktemp("xsession")
    xvfb, display = _start_xvfb(logs)
    env = {**os.environ, "DISPLAY": display, "PYSTRAY_BACKEND": "xorg"}
    env.pop("WAYLAND_DISPLAY", None)
    try:
        trayer = _start_trayer(display, env, logs)
    except BaseException:
        _stop(xvfb)
        raise
    try:
        yield XSession(display, env, trayer)
    finally:
        _stop(trayer)
        _stop(xvfb)


@pytest.fixture
def wait_for():
    """`wait_for(predicate, what)`: `support.waiting.wait_for` with this folder's generous bound."""
    return functools.partial(waiting.wait_for, timeout_s=MIN_WAIT_S, poll_s=0.05)
