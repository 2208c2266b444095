"""A test process gives back the memory its tests left behind, so that three pytest-xdist workers fit.

The live engine keeps frame-sized buffers in glibc's heap for the process's life
(`vcamd.live.process.keep_frames_in_the_heap`: a 64 MB trim threshold, so a freed frame's pages
serve the next frame) — right for the daemon, one engine a process. A pytest worker opens hundreds
of engines, one after the other, and its heap only grew: 6.7 GB resident after tests/live and
tests/panel in one process, 6–7.5 GB a worker at the end of the suite with `-n 2`, where each test
itself needs well under 1 GB. After a test that grew the process by `GROWTH_BYTES`, `ReturnHeap`
collects the cycles the engines' frozen heaps left (`gc.collect`) and hands the free pages back to
the kernel (`malloc_trim(0)`): the same process then stays at 0.4–0.8 GB. Between tests only:
nothing a test measures or asserts runs with it. Where the C library is not glibc (no
`malloc_trim`) or there is no /proc, it does nothing."""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Callable
from pathlib import Path

GROWTH_BYTES = 256 << 20
"""Give back after a test that grew the resident set this much since the last give-back: the few
tests that run engines, not every test (a full collection of a worker's heap takes 20–160 ms)."""

STATM = Path("/proc/self/statm")


def resident_bytes() -> int:
    """This process's resident set (the second field of /proc/self/statm, in pages)."""
    return int(STATM.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def glibc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where this process's C library has none (musl, macOS)."""
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return None
    except (ValueError, OSError, AttributeError):
        return None
    trim = ctypes.CDLL(None).malloc_trim
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class ReturnHeap:
    """A pytest plugin: after each test, when the process grew by `GROWTH_BYTES`, collect and trim."""

    def __init__(self, trim: Callable[[int], int], growth: int = GROWTH_BYTES) -> None:
        self._trim = trim
        self._growth = growth
        self._after = resident_bytes()

    @classmethod
    def here(cls) -> ReturnHeap | None:
        trim = glibc_trim()
        return cls(trim) if trim is not None and STATM.exists() else None

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        if resident_bytes() - self._after < self._growth:
            return
        gc.collect()
        self._trim(0)
        self._after = resident_bytes()
