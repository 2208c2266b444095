"""Logging for the daemon: stderr plus a rotating log file that can never crash the caller.

A full disk, a vanished log folder or a closed stderr must not take the camera down with it:
the handlers here report their first write failure once on stderr and then drop records quietly.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import sys
from pathlib import Path
from typing import TextIO

from vcamd.files.private_files import open_private, private_dir, private_parent

LOG_FILE_NAME = "vcamd.log"
MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 3
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_MARK = "_vcamd_handler"
"""Attribute set on the handlers this module installs, so a second setup replaces them."""


class _ReportOnce(logging.Handler):
    """Mixin: an OSError while writing a record is reported once on stderr, then ignored."""

    _reported = False

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self._report(exc)
        else:
            super().handleError(record)  # a programming error (bad format args)

    def _report(self, exc: OSError) -> None:
        if not self._reported:
            self._reported = True
            target = getattr(self, "baseFilename", None) or "stderr"
            stderr = sys.__stderr__
            if stderr is None:
                return  # no stderr at all (pythonw): nothing to tell
            try:
                stderr.write(f"vcamd: logging to {target} failed ({exc}); further log records there are dropped\n")
                stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass  # stderr itself is gone: nothing left to tell


class SafeRotatingFileHandler(_ReportOnce, logging.handlers.RotatingFileHandler):
    """RotatingFileHandler whose write, flush and rollover failures never propagate."""

    def _open(self) -> io.TextIOWrapper:
        # 0600 (a looser file from before is tightened): the log names source-face photos and
        # control requests; other local users must not read it. A symlink planted at the name is
        # refused, not followed.
        return open_private(self.baseFilename, "a", encoding=self.encoding, errors=self.errors)

    def flush(self) -> None:
        # emit() flushes after each record, and logging.shutdown/close flush outside emit():
        # a full disk surfaces here.
        try:
            super().flush()
        except OSError as exc:
            self._report(exc)

    def close(self) -> None:
        try:
            super().close()
        except OSError:
            pass


class SafeStreamHandler(_ReportOnce, logging.StreamHandler[TextIO]):
    """StreamHandler that survives a closed or broken stderr."""

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            self._report(exc)
        except ValueError:
            pass  # the stream was closed under us


def default_log_file() -> Path:
    from vcamd.config.folders import user_state_dir

    return user_state_dir() / LOG_FILE_NAME


def setup_logging(
    level: str | int,
    log_file: Path | None = None,
    *,
    to_file: bool = True,
    max_bytes: int = MAX_BYTES,
    backups: int = BACKUPS,
) -> Path | None:
    """Send the root logger's records to stderr and to `log_file` (rotated at 5 MB, 3 backups).

    `log_file` None = `user_state_dir()/vcamd.log`; `to_file=False` logs to stderr only.
    Calling it again replaces the handlers it installed before (a reload may change the level).
    Returns the log file in use, or None when there is none (disabled, or its folder cannot be
    created — reported once on stderr, the program goes on).
    """
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        from vcamd.common.errors import ConfigError

        raise ConfigError("[runtime] log_level", [f"{level!r}: expected debug, info, warning or error"])
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _MARK, False):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(numeric)
    formatter = logging.Formatter(FORMAT)

    stream = SafeStreamHandler(sys.stderr)
    stream.setFormatter(formatter)
    setattr(stream, _MARK, True)
    root.addHandler(stream)

    if not to_file:
        return None
    path = Path(log_file) if log_file is not None else default_log_file()
    try:
        if log_file is None:
            private_dir(path.parent)  # the app's state folder: 0700, tightened if it was looser
        else:
            private_parent(path)  # a folder the user chose: only the missing parts are created
    except OSError as exc:
        root.warning("cannot create the log folder %s (%s); logging to stderr only", path.parent, exc.strerror)
        return None
    # delay=True: the file is opened on the first record, inside emit(), where failures are handled.
    file_handler = SafeRotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True)
    file_handler.setFormatter(formatter)
    setattr(file_handler, _MARK, True)
    root.addHandler(file_handler)
    return path
