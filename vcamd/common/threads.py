"""Helper threads: a call run on a thread of its own, and a lower priority for helpers that must never outrank the publishing loop (the control server's)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


def lower_thread_priority(nice: int = 10) -> None:
    """Lower the calling thread's priority, so the publishing loop keeps the CPU: on a 2-core
    machine a flood of control clients must not take the cores the next frame needs. Not for the
    swap model: against other programs at normal priority it would get a tenth of their share, and
    an unprivileged thread cannot raise its priority again (RLIMIT_NICE); its sessions leave the
    loop a core instead (`Sessions._background_pool`, `vcamd.inference.cores`). Linux: per-thread nice; elsewhere nothing
    (not allowed or not per thread)."""
    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError as exc:
        log.debug("could not lower the priority of thread %s: %s", threading.current_thread().name, exc)


def in_thread(fn: Callable[[], T], name: str) -> Future[T]:
    """Run `fn` on a new daemon thread; its result (or exception) in the future. A daemon: a load
    whose result is no longer wanted (another part failed first) never holds up the exit."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
