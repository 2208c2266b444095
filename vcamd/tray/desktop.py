"""Desktop helpers for the tray: open a file, folder or URL, pick a photo, remember recent faces."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from vcamd.common.errors import VcamdError
from vcamd.files.private_files import private_dir, write_private_atomic

log = logging.getLogger(__name__)


def open_with_desktop(target: Path | str) -> None:
    """Open a file, folder or URL with the desktop's default application."""
    target = str(target)
    if sys.platform == "win32":
        os.startfile(target)  # only exists on Windows
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
            try:
                # 0600 in a 0700 folder: the list says whose photos this user swaps in.
                private_dir(self.path.parent)
                write_private_atomic(self.path, text)
            except OSError as exc:
                # Only the shortcut list is lost: never a reason to stop the daemon or fail a face change.
                log.warning("cannot save the recent source faces to %s (%s)", self.path, exc.strerror or exc)
