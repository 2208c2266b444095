"""The uploaded-faces folder: bounded, and no temporary file outlives the upload that wrote it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np

from vcamd.panel.faces import MAX_KEPT_FACES, store_upload, sweep_partial_uploads


def _photo(i: int) -> bytes:
    image = np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    ok, data = cv2.imencode(".png", image)
    assert ok
    return data.tobytes()


def _store(folder: Path, i: int) -> Path:
    data = _photo(i)
    kept, _ = store_upload(io.BytesIO(data), len(data), folder, f"photo{i}.png")
    return kept


def test_the_folder_keeps_only_the_newest_uploads(tmp_path: Path) -> None:
    """Before: 40 uploads, 43 files kept (every upload, for ever)."""
    folder = tmp_path / "faces"
    kept = []
    for i in range(MAX_KEPT_FACES + 20):
        kept.append(_store(folder, i))
        base = 1_000_000_000 + i
        os.utime(kept[-1], (base, base))  # distinct ages on any filesystem's clock resolution
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(p.name for p in kept[-MAX_KEPT_FACES:])
    again = _store(folder, 3)  # an old photo uploaded again is kept as the newest
    assert again.exists() and len(list(folder.iterdir())) == MAX_KEPT_FACES


def test_a_stopped_uploads_temporary_file_is_removed(tmp_path: Path) -> None:
    """A daemon stopped mid-upload leaves `.upload-PID-….part`; the next upload (or the end of the
    run) removes it, but never the file of an upload still in progress."""
    folder = tmp_path / "faces"
    folder.mkdir(mode=0o700)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(ended.stdout)
    stale = folder / f".upload-{dead_pid}-abc123.part"
    older = folder / ".upload-k2j3h4.part"  # an older vcamd's name, without its pid
    ours = folder / f".upload-{os.getpid()}-def456.part"  # an upload of this process, in progress
    for part in (stale, older, ours):
        part.write_bytes(b"half a photo")
    _store(folder, 1)
    assert not stale.exists() and not older.exists() and ours.exists()
    sweep_partial_uploads(folder, including_ours=True)  # what `vcamd run` does as it ends
    assert not ours.exists()
    assert not list(folder.glob("*.part"))
