"""Helper threads: a call run on a thread of its own, and thread priorities (the publishing loop must win the CPU over helper threads)."""

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
    machine a swap model that takes seconds, or a flood of control clients, must not take the
    cores the next frame needs. Linux: per-thread nice; elsewhere nothing (not allowed or not
    per thread)."""
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


def at_lower_priority(fn: Callable[[], T], name: str) -> T:
    """`fn()` run on a new thread of lowered priority (`lower_thread_priority`), waited for: what
    it starts — a model session's own worker threads — is born at that priority. Its exception is
    raised here."""

    def lowered() -> T:
        lower_thread_priority()
        return fn()

    return in_thread(lowered, name).result()
