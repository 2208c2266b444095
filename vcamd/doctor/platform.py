"""The platform: the one seam for everything that differs between Linux, Windows and macOS."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def _command_output(command: Sequence[str]) -> str | None:
    """A command's stdout, None when it cannot run."""
    try:
        return subprocess.run(list(command), capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _registry_key_exists(key: str) -> bool:
    """Windows: whether HKEY_CLASSES_ROOT\\<key> exists (64-bit view)."""
    if sys.platform != "win32":
        return False  # winreg exists only on Windows
    try:
        import winreg
    except ImportError:
        return False
    try:
        with winreg.OpenKey(winreg.HKEY_CLASSES_ROOT, key, 0, winreg.KEY_READ | winreg.KEY_WOW64_64KEY):
            return True
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class Platform:
    """Where doctor runs. Every platform-specific check reads the platform from here, and tests
    pass another one (a Windows or macOS with its probes) instead of patching `sys.platform`."""

    system: str
    """`sys.platform`: "linux", "win32" or "darwin"."""
    environ: Mapping[str, str]
    run_command: Callable[[Sequence[str]], str | None] = _command_output
    registry_key_exists: Callable[[str], bool] = _registry_key_exists
    path_exists: Callable[[Path], bool] = Path.exists
    python: str = sys.executable
    """The interpreter vcamd runs in (the venv's): its pip is the one that installs for vcamd."""

    @classmethod
    def here(cls) -> Platform:
        return cls(sys.platform, os.environ)

    @classmethod
    def named(cls, system: str) -> Platform:
        return cls(system, os.environ)

    @property
    def is_linux(self) -> bool:
        return self.system.startswith("linux")

    @property
    def is_windows(self) -> bool:
        return self.system == "win32"

    @property
    def is_macos(self) -> bool:
        return self.system == "darwin"

    @property
    def pip(self) -> str:
        """The pip of vcamd's own environment, as a command to type: a bare `pip` is often the
        system's or another venv's, and installs where vcamd does not look."""
        python = f'"{self.python}"' if " " in self.python else self.python
        return f"{python} -m pip"
