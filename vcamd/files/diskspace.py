"""How full the disk holding a path is, and a full disk in words (naming the file, its folder and
the disk's mount point) for every writer that must say so: `vcamd.files.videofile`, `vcamd swap`'s
photos, `vcamd snapshot`."""

from __future__ import annotations

import os
from pathlib import Path


def free_bytes(folder: Path) -> tuple[int, int] | None:
    """(bytes this process may still write on the disk holding `folder`, its block size): root may
    use the blocks kept back for it. None where the system cannot tell."""
    try:
        info = os.statvfs(folder)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return None
    blocks = info.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else info.f_bavail
    return blocks * info.f_frsize, info.f_frsize


def disk_is_full(folder: Path) -> bool:
    """Whether the disk holding `folder` has less than one block left for this process."""
    room = free_bytes(folder)
    return room is not None and room[0] < max(room[1], 1)


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding `path` (an existing folder)."""
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def full_disk_message(named: str, path: Path, thing: str) -> tuple[str, str]:
    """(message, fix) for `thing` (e.g. "the video") not written to `path` because its disk is full;
    `named` is how the user named the file ("output /x.mp4")."""
    folder = path.parent if str(path.parent) else Path(".")
    disk = mount_point(folder)
    room = free_bytes(folder)
    left = f"{room[0]} bytes free" if room is not None else "no space left"
    return (f"{named}: the disk at {disk} (holding {folder}) is full ({left}); {thing} was not written and "
            "nothing was put under its name", f"free some space on {disk}, or write it to another disk")
