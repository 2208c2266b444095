"""SIGTERM from the first line: a stop that comes before a command set its own handler is clean.

Python's default for SIGTERM ends the process at once (exit -15): a `vcamd run` stopped while it
imports its libraries, or a `vcamd swap` stopped mid-video, would leave no log line and its
temporary files behind. `install()` is the first thing the `vcamd` process does (`vcamd/__main__.py`
and `cli.main` as the process's entry point): SIGTERM then raises `Stopped` in the main thread,
which unwinds like Ctrl-C (each command's `finally`/`except BaseException` removes what it left
half-written) and `cli.main` turns it into an exit code. The daemon replaces the handler with its
own (`engine.request_quit`) once the engine exists. Standard library only: it runs before anything
heavy is imported.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from types import FrameType

EXIT_CODE = 128 + signal.SIGTERM
"""What a one-shot command stopped by SIGTERM exits with (the shell's convention for it)."""


class Stopped(BaseException):  # noqa: N818 — like KeyboardInterrupt: not caught by `except Exception`
    """SIGTERM arrived before the running command installed a handler of its own."""


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(f"stopped by signal {signum}")


def install() -> None:
    """SIGTERM raises `Stopped` in the main thread from now on (until a command replaces it)."""
    signal.signal(signal.SIGTERM, _raise_stopped)


def stopped(argv: Sequence[str]) -> int:
    """Say the process was stopped; its exit code for the command in `argv` (the process's own
    arguments): the daemon's stop is its normal end (0, as its own handler gives), a one-shot
    command (`vcamd swap`) did not finish (`EXIT_CODE`)."""
    print("vcamd: stopped (SIGTERM)", file=sys.stderr)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    return 0 if command == "run" else EXIT_CODE
