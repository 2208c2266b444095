"""A process signal acted on when it arrives, whatever the main thread is blocked in.

CPython runs a signal's Python handler only in the main thread, between two of its bytecodes. The
kernel hands a signal sent to the process (`kill`, `systemctl stop`, Ctrl-C) to any of its threads
that does not block it — often one of ONNX Runtime's or OpenCV's — and while the main thread waits
in a C call with no timeout the handler does not run: with its tray icon, the daemon's main thread
waits in pystray's event loop for the next X event (a select() on the X socket), and a SIGTERM that
landed on another thread went unanswered until something on the desktop moved.

`relayed(actions)` gives each signal in `actions` a C handler that writes the signal's number to a
socket (`signal.set_wakeup_fd`: written by whichever thread caught it) and a thread that reads the
socket and calls the signal's action at once. The Python handlers do nothing, so an action runs once
per signal. A relay inside another passes the signals it has no action for to the outer one's socket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType

log = logging.getLogger(__name__)

Action = Callable[[], None]


def _caught(signum: int, frame: FrameType | None) -> None:
    """The Python handler of a relayed signal: the relay thread acts on it."""


@contextlib.contextmanager
def relayed(actions: Mapping[signal.Signals, Action]) -> Iterator[None]:
    """While the block runs, each signal in `actions` calls its action from the relay thread.

    An action must be quick and safe from any thread (set an event, wake a loop). Main thread only
    (the only one that may set handlers and the wakeup fd); elsewhere the block runs with the
    handlers as they are. On leaving, the handlers and wakeup fd from before are back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # A socket pair, not a pipe: Windows takes only a socket as the wakeup fd.
    reader, writer = socket.socketpair()
    writer.setblocking(False)  # set_wakeup_fd's requirement: a full buffer must not block a handler
    previous_handlers = {signum: signal.signal(signum, _caught) for signum in actions}
    outer_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    relay = threading.Thread(target=_relay, args=(reader, dict(actions), outer_fd), name="signal-relay", daemon=True)
    relay.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(outer_fd)
        for signum, handler in previous_handlers.items():
            if handler is not None:  # None: a handler set outside Python, which cannot be put back
                signal.signal(signum, handler)
        writer.close()  # the relay reads the end of the stream and returns
        relay.join()
        reader.close()


def _relay(reader: socket.socket, actions: Mapping[int, Action], outer_fd: int) -> None:
    while chunk := reader.recv(64):
        for signum in chunk:
            action = actions.get(signum)
            if action is not None:
                _act(signum, action)
            elif outer_fd != -1:
                with contextlib.suppress(OSError):  # the outer one full or gone: as the C handler would
                    os.write(outer_fd, bytes([signum]))


def _act(signum: int, action: Action) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001 — the relay must outlive one failed action
        log.exception("acting on signal %s failed", signal.Signals(signum).name)
