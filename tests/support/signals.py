"""Signals delivered the way the kernel may deliver them: to a thread other than the main one."""

from __future__ import annotations

import ctypes
import os

import pytest

_TGKILL = {"x86_64": 234, "aarch64": 131}
"""tgkill(2)'s syscall number per machine (Python has no call for another process's thread)."""


def send_to_another_thread(pid: int, signum: int) -> None:
    """tgkill(2) `signum` to one of process `pid`'s threads other than its main one: where the kernel
    may hand a signal sent to the whole process, forced. A main thread waiting in a C call (an event
    loop's select(), waitpid()) is then not woken by it. Skips the test where tgkill's number is not known."""
    tgkill = _TGKILL.get(os.uname().machine)
    if tgkill is None:
        pytest.skip(f"tgkill's syscall number on {os.uname().machine} is not listed in tests/support/signals.py")
    threads = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)
    if not threads:
        raise AssertionError(f"process {pid} has no thread besides its main one")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(tgkill, pid, threads[0], signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {threads[0]}, {signum})")
