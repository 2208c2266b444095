"""Fixtures for the tray tests that need a D-Bus session bus of their own (loaded by path).

`private_bus`: a dbus-daemon session bus started for the test module, never the developer's own.
`watcher`: tests/tray/sni_watcher.py on that bus (a StatusNotifierWatcher: AppIndicator's host).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

WATCHER = Path(__file__).resolve().parent / "sni_watcher.py"


class Lines:
    """A subprocess's stdout lines, collected by a thread (JSON lines decoded)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.items: list[Any] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            try:
                self.items.append(json.loads(line))
            except json.JSONDecodeError:
                self.items.append(line.rstrip())


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def private_bus() -> Iterator[str]:
    """A D-Bus session bus of our own (not the developer's desktop one); yields its address."""
    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    address = bus.stdout.readline().strip()  # printed once the bus listens
    if not address:
        stop(bus)
        pytest.fail(f"dbus-daemon did not start: {bus.stderr.read()[-500:]}")
    try:
        yield address
    finally:
        stop(bus)


@pytest.fixture
def watcher(private_bus: str, wait_for) -> Iterator[Lines]:
    process = subprocess.Popen([sys.executable, str(WATCHER)], env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": private_bus},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = Lines(process)
    try:
        wait_for(lambda: {"ready": True} in lines.items or process.poll() is not None, "the watcher to own its name")
        assert {"ready": True} in lines.items, lines.items
        yield lines
    finally:
        stop(process)
