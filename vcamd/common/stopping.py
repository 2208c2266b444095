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
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

EXIT_CODE = 128 + signal.SIGTERM
"""What a one-shot command stopped by SIGTERM exits with (the shell's convention for it)."""


class Stopped(BaseException):  # noqa: N818 — like KeyboardInterrupt: not caught by `except Exception`
    """SIGTERM arrived before the running command installed a handler of its own."""


class _RaiseStopped:
    """The SIGTERM handler `install` sets: raises `Stopped`, and remembers that the signal came.

    Python runs a handler between two bytecodes of the main thread, wherever it is — also inside a
    weak reference's callback or a `__del__` (the import system's module-lock callbacks run during a
    long command), where an exception is printed as "Exception ignored in ..." and dropped: the stop
    was lost and a `vcamd swap` went on to write its whole video. So the handler also records it,
    and a command's long loop asks `raise_if_stopped()` at each step."""

    def __init__(self) -> None:
        self.arrived: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.arrived = signum
        raise Stopped(f"stopped by signal {signum}")


def install() -> None:
    """SIGTERM raises `Stopped` in the main thread from now on (until a command replaces it)."""
    signal.signal(signal.SIGTERM, _RaiseStopped())


def raise_if_stopped() -> None:
    """Raise `Stopped` if a SIGTERM came to `install`'s handler and its own raise was swallowed (see
    `_RaiseStopped`): called at each step of a command's long loop, so such a stop ends it there."""
    handler = signal.getsignal(signal.SIGTERM)
    if isinstance(handler, _RaiseStopped) and handler.arrived is not None:
        raise Stopped(f"stopped by signal {handler.arrived}")


@contextmanager
def held_off() -> Iterator[None]:
    """SIGTERM waits until the block ends, then acts as it would have. For making a file and
    recording where it is as one step: `Stopped` raised between the two would leave a file nobody
    knows to remove. The handler is swapped, not the signal blocked: a process-wide signal goes to
    any thread that does not block it (ONNX Runtime's, OpenCV's), and Python runs its handler in
    the main thread anyway. Main thread only (the only one that may set handlers); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if arrived:
            if callable(previous):
                previous(signal.SIGTERM, None)
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGTERM)


def stopped(argv: Sequence[str]) -> int:
    """Say the process was stopped; its exit code for the command in `argv` (the process's own
    arguments): the daemon's stop is its normal end (0, as its own handler gives), a one-shot
    command (`vcamd swap`) did not finish (`EXIT_CODE`)."""
    print("vcamd: stopped (SIGTERM)", file=sys.stderr)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    return 0 if command == "run" else EXIT_CODE
