"""Files and folders the daemon writes: private to the user, never written through a symlink.

Logs, snapshots, stats, the recent-faces list, control lock/token files and model downloads show
the user's face and activity, so every one is created 0600 inside 0700 folders, whatever the
umask. A name that is a symlink (planted by another local user in a shared or misconfigured
folder) is refused, never followed: `O_NOFOLLOW` on open, rename-over for atomic writes (a rename
replaces the link itself, not what it points to). A FIFO or device at the name is refused too
(opened with `O_NONBLOCK`, checked with `fstat` before any write); a character device named on
purpose (/dev/null) is written as is.

Problems are raised as `UnsafePathError`: both an `OSError` (callers that already turn an OSError
into a one-line message keep working; `strerror` is the explanation) and a `VcamdError` (the CLI
prints it as one line with the fix).
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Any, Literal, overload

from vcamd.common.errors import VcamdError

FILE_MODE = 0o600
DIR_MODE = 0o700

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_POSIX = os.name == "posix"

_MODES = {
    # fdopen mode → open flags (O_CREAT is always added)
    "w": os.O_WRONLY | os.O_TRUNC,
    "wb": os.O_WRONLY | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_APPEND,
    "ab": os.O_WRONLY | os.O_APPEND,
    "r+b": os.O_RDWR,
}


class UnsafePathError(OSError, VcamdError):
    """A path vcamd will not write: a symlink, not a regular file/folder, or another user's."""

    def __init__(self, code: int, message: str, path: str, fix: str = "remove it, or choose another path") -> None:
        OSError.__init__(self, code, message, path)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return VcamdError.__str__(self)


def private_dir(path: Path | str, *, tighten: bool = True) -> Path:
    """Create `path` (and missing parents) as 0700 folders, or check an existing one (`check_private_dir`).

    For the folders the app keeps its files in (state, models, log folder, runtime). A folder made
    here is 0700 whatever the umask. An existing folder is refused when it is not a folder, is
    another user's, or other users can write to it (a shared folder such as /tmp: vcamd never
    changes its mode, which would lock every other user out of it). `tighten`: the app's own
    folders, which an older vcamd left 0755, lose their read bits for others; folders the user
    chose (VCAMD_RUNTIME_DIR) are never changed (tighten=False).
    """
    path = Path(path)
    _make_missing_parents(path)
    try:
        os.mkdir(path, DIR_MODE)
        created = True
    except FileExistsError:
        created = False
    if not _POSIX:
        return path  # Windows: per-user app-data folders are private by ACL
    info = check_private_dir(path)
    if stat.S_IMODE(info.st_mode) != DIR_MODE and (created or tighten):
        os.chmod(path, DIR_MODE)  # ours and shut to others already: only their read bits go
    return path


def check_private_dir(path: Path | str) -> os.stat_result:
    """An existing folder (a symlink to one is followed) of the user's that no other user can write
    to, else UnsafePathError saying which and why. Changes nothing. Its stat is returned."""
    path = Path(path)
    info = os.stat(path)
    if not _POSIX:
        return info
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(errno.ENOTDIR, f"{path} is not a folder", str(path))
    if info.st_uid != os.geteuid():
        raise UnsafePathError(
            errno.EPERM,
            f"{path} belongs to another user (uid {info.st_uid}), so files there cannot be kept private",
            str(path),
            "remove it, or choose a folder of yours",
        )
    mode = stat.S_IMODE(info.st_mode)
    if others_can_write(info):
        raise UnsafePathError(
            errno.EPERM,
            f"{path} can be written by other users (mode {mode:04o}), so files there cannot be kept private; "
            "vcamd does not change the mode of a folder it did not create",
            str(path),
            f"choose a folder only you can write (mkdir -m 700 FOLDER), or, if {path} is yours alone, chmod go-w {path}",
        )
    return info


def private_parent(path: Path | str) -> None:
    """Create the missing folders above a user-chosen output file as 0700; existing ones are left
    alone (a snapshot saved into ~/Pictures or /tmp must not change those folders' modes)."""
    _make_missing_parents(Path(path))


def open_private_fd(path: Path | str, flags: int) -> int:
    """`os.open(path, flags | O_CREAT | O_NOFOLLOW, 0600)` that also refuses non-regular files
    and tightens a pre-existing file of ours to 0600. Returns a blocking descriptor."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY, FILE_MODE)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) or (exc.errno == errno.ENXIO and path.is_fifo()):
            raise _refusal(path) from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISCHR(info.st_mode):
            # A character device named on purpose (/dev/null, /dev/full in tests): written as is.
            # Only root can plant one, and its mode is not ours to change.
            if _NONBLOCK:
                os.set_blocking(fd, True)
            return fd
        if not stat.S_ISREG(info.st_mode):
            raise _refusal(path)
        if _POSIX:
            if info.st_uid != os.geteuid():
                raise UnsafePathError(errno.EPERM, f"{path} belongs to another user (uid {info.st_uid})", str(path))
            if stat.S_IMODE(info.st_mode) != FILE_MODE:
                os.fchmod(fd, FILE_MODE)
            if _NONBLOCK:
                os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@overload
def open_private(path: Path | str, mode: Literal["w", "a"], **fdopen_kwargs: Any) -> io.TextIOWrapper: ...


@overload
def open_private(path: Path | str, mode: Literal["wb", "ab"] = "wb", **fdopen_kwargs: Any) -> io.BufferedWriter: ...


@overload
def open_private(path: Path | str, mode: Literal["r+b"], **fdopen_kwargs: Any) -> io.BufferedRandom: ...


def open_private(path: Path | str, mode: str = "wb", **fdopen_kwargs: Any) -> IO[Any]:
    """A file object for `path` opened as `open_private_fd` does; `mode` one of w, wb, a, ab, r+b."""
    try:
        flags = _MODES[mode]
    except KeyError:
        raise ValueError(f"open_private: unsupported mode {mode!r} (use one of {', '.join(_MODES)})") from None
    fd = open_private_fd(path, flags)
    try:
        return os.fdopen(fd, mode, **fdopen_kwargs)
    except BaseException:
        os.close(fd)
        raise


def write_private_atomic(path: Path | str, data: bytes | str) -> None:
    """Write `data` to `path` as a 0600 file, atomically: a fresh temporary name in the same
    folder, fsync, then rename over `path` (a symlink there is replaced, never written through)."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open_private(temporary, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
        raise


def private_temporary(path: Path | str, tag: str = "partial") -> Path:
    """A new empty 0600 file next to `path`, for a writer that opens files by name (OpenCV's video
    writer, FFmpeg): `.STEM.TAG-PID-RANDOM.SUFFIX`, created with O_EXCL (never an existing name,
    never through a symlink). The writer fills it; the caller renames it over `path` when complete
    (`os.replace`: a symlink at `path` is replaced, never written through) or removes it."""
    path = Path(path)
    while True:
        temporary = path.with_name(f".{path.stem}.{tag}-{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY, FILE_MODE)
        except FileExistsError:
            continue  # someone else's name: draw another
        try:
            if _POSIX:
                os.fchmod(fd, FILE_MODE)  # whatever the umask (000 makes no difference here, 0600 stays)
        finally:
            os.close(fd)
        return temporary


def others_can_write(info: os.stat_result) -> bool:
    """Whether a user other than this one may write to the file or folder `info` describes: its
    mode lets everyone, or a group that holds someone else."""
    mode = stat.S_IMODE(info.st_mode)
    return bool(mode & 0o002) or bool(mode & 0o020 and not _group_is_yours_alone(info.st_gid))


def _group_is_yours_alone(gid: int) -> bool:
    """Whether the group `gid` holds no other user (a "user private group", as umask 002 systems give
    every user): then a group-writable folder is writable by the user alone."""
    import grp
    import pwd

    try:
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    me = os.geteuid()
    try:
        my_name = pwd.getpwuid(me).pw_name
    except KeyError:
        return False
    if any(member != my_name for member in group.gr_mem):
        return False
    return all(user.pw_uid == me for user in pwd.getpwall() if user.pw_gid == gid)


def _make_missing_parents(path: Path) -> None:
    missing = []
    parent = path.parent
    while parent != parent.parent and not os.path.lexists(parent):
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            pass


def _refusal(path: Path) -> UnsafePathError:
    try:
        info = os.lstat(path)
    except OSError:
        return UnsafePathError(errno.ELOOP, f"{path} cannot be opened safely", str(path))
    if stat.S_ISLNK(info.st_mode):
        what = f"is a symlink (to {os.readlink(path)}), which vcamd never writes through"
    elif stat.S_ISDIR(info.st_mode):
        what = "is a folder"
    else:
        what = "is not a regular file (a FIFO, socket or block device)"
    return UnsafePathError(errno.ELOOP, f"{path} {what}", str(path))
