"""What each model file's SHA-256 should be and whether it was checked: `vcamd-models.json` in the
models dir holds the hashes pinned for models the manifest publishes none for (recorded on first
download) and a cache of files verified since (size and mtime unchanged: not hashed again)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vcamd.common.errors import ModelError
from vcamd.modelstore.files import dir_error, open_for_write
from vcamd.modelstore.manifest import FileSpec

log = logging.getLogger(__name__)

STATE_FILE = "vcamd-models.json"
"""Pinned hashes of models without a published SHA-256, and a cache of verified files."""


@dataclass
class State:
    """The contents of vcamd-models.json, plus the pins recorded during this call."""

    pinned: dict[str, dict[str, Any]]
    """file name → {sha256, size, recorded}: hashes of models the manifest publishes none for."""
    verified: dict[str, dict[str, Any]]
    """file name → {size, mtime_ns, sha256} at the last successful hash check."""
    new_pins: list[tuple[Path, str]] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"pinned": self.pinned, "verified": self.verified}, indent=2, sort_keys=True) + "\n"

    def expected_sha(self, spec: FileSpec) -> str:
        """The published hash, else the one recorded on first download, else ""."""
        return spec.sha256 or self.pinned.get(spec.file, {}).get("sha256", "")

    def pin(self, spec: FileSpec, sha: str, path: Path) -> None:
        recorded = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # "checked": recorded only after the byte count and the role check were proven (pins
        # written before that check existed lack it, and are checked again on the next pull).
        self.pinned[spec.file] = {"sha256": sha, "size": path.stat().st_size, "recorded": recorded, "checked": True}
        self.new_pins.append((path, sha))
        self.mark_verified(spec, path, sha)
        log.debug("%s has no published SHA-256; recorded %s", spec.file, sha)

    def mark_verified(self, spec: FileSpec, path: Path, sha: str) -> None:
        st = path.stat()
        self.verified[spec.file] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}

    def forget(self, file_name: str) -> None:
        self.verified.pop(file_name, None)

    def unpin(self, file_name: str) -> None:
        """Drop a pin that turned out to record a broken file, so the next pull starts afresh."""
        if self.pinned.pop(file_name, None) is not None:
            self.unpinned.append(file_name)
        self.forget(file_name)

    def role_checked(self, spec: FileSpec) -> bool:
        return bool(self.pinned.get(spec.file, {}).get("checked"))

    def still_verified(self, spec: FileSpec, st: os.stat_result) -> bool:
        """True when the file is unchanged (size, mtime) since it last matched its expected hash."""
        expected = self.expected_sha(spec)
        cached = self.verified.get(spec.file)
        return bool(expected) and cached == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": expected}


def read_state(directory: Path) -> State:
    """The state file of the models dir `directory` (empty when there is none yet)."""
    path = directory / STATE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except NotADirectoryError as exc:  # [models] dir (or a folder above it) is a file
        raise dir_error(directory, exc) from None
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"{path}: unreadable ({exc})",
            fix="delete it: verified files are re-hashed, and hashes of unpublished models are recorded again on the next pull",
        ) from None
    if not isinstance(data, dict):
        data = {}
    return State(dict(data.get("pinned", {})), dict(data.get("verified", {})))


def write_state(directory: Path, state: State, *, required: bool = True) -> None:
    """Save pins and the verified-files cache. `required=False`: only the cache changed, so a
    failed write (full disk) is a warning — the files are simply re-hashed next time."""
    if not directory.is_dir():
        return
    path = directory / STATE_FILE
    tmp = path.with_name(STATE_FILE + ".tmp")
    try:
        tmp.unlink(missing_ok=True)  # a link planted here is removed, not written through
        with open_for_write(tmp) as out:
            out.write(state.to_json().encode("utf-8"))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if required:
            raise ModelError(
                f"cannot record model hashes in {path}: {exc.strerror}",
                fix="free some disk space, then run the command again",
            ) from None
        log.warning("could not update %s (%s); verified files will be re-hashed next time", path, exc.strerror)

