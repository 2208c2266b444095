"""What the live engine changes for its whole process while it is open, and gives back when it stops.

Three settings. The first two keep the loop's thread on time:

* OpenCV's own worker pool is off (`OPENCV_THREADS`): the per-frame work is many small operations
  on face-sized regions, already spread over the engine's threads.
* The objects that exist when the engine opens — imports, the config, models' Python objects, and
  in a test process every test's leftovers — are moved out of the cyclic garbage collector's
  reach (`gc.freeze()`). A full collection holds the GIL for as long as it walks the heap, and
  every thread of the engine waits: 20 ms for `vcamd bench`'s 58 000 objects, 100–460 ms for a
  long pytest process's 110 000–210 000 objects on two busy cores — long enough to stall the
  output past the camera's stall timeout (docs/reliability.md). Frozen, they are still freed by
  reference counting as ever; only cycles among them wait until the engine stops, when they are
  handed back (`gc.unfreeze()`) unless the process had frozen objects of its own before.

The third saves CPU per pixel, and stays for the process's life (`keep_frames_in_the_heap`):

* glibc's allocator keeps frame-sized buffers in its heap. By default it may hand each decoded
  frame's memory back to the kernel and map fresh pages for the next one: ~2 000 page faults a
  1080p frame, which made its JPEG decode cost 7.8–9.8 ms here instead of 3.0–3.9 ms.
"""

from __future__ import annotations

import ctypes
import gc
import os

import cv2

OPENCV_THREADS = 1
"""OpenCV's own worker threads while the engine is open. Its per-frame work is many small
operations on face-sized regions (crops, warps, blends, colour conversions) and one JPEG decode,
already spread over the engine's threads (camera reader, loop, tracker, full detector, swap
worker); a parallel OpenCV call on top splits a few hundred µs of work and wakes pool threads for
it, which costs more CPU than it saves time on a small machine (docs/performance.md)."""


FRAME_HEAP_BYTES = 32 << 20
"""Allocations below this come from glibc's heap, not fresh mappings: every frame up to 4K (25 MB
in BGR). glibc's own ceiling for its moving threshold (on 64-bit), which it reaches only after a
frame was mapped and freed, and may leave again."""

HEAP_TRIM_BYTES = 64 << 20
"""Freed memory at the heap's top is handed back to the kernel only past this: twice
FRAME_HEAP_BYTES, as glibc sets it when it moves the threshold itself."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # <malloc.h>


def keep_frames_in_the_heap() -> bool:
    """Tell glibc's allocator to keep frame-sized buffers in its heap (`FRAME_HEAP_BYTES`,
    `HEAP_TRIM_BYTES`), so that a freed frame's pages serve the next frame instead of being
    unmapped and faulted in again. Whether it did: only glibc has these settings (macOS, Windows
    and musl keep their allocators' own ways). For the process's life: glibc has no way back to its
    moving threshold, and nothing gets slower for it."""
    try:
        libc_version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):  # not a glibc system: no such name
        return False
    if not libc_version.startswith("glibc"):
        return False
    libc = ctypes.CDLL(None)  # this process's own C library
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, FRAME_HEAP_BYTES)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_BYTES))


class ProcessSettings:
    """Applies the engine's process-wide settings and restores the ones found, once each (the
    allocator's stay: `keep_frames_in_the_heap`)."""

    def __init__(self) -> None:
        self._opencv_threads: int | None = None  # OpenCV's thread count before apply(); None: not applied
        self._unfreeze = False  # whether restore() hands the frozen objects back to the collector

    def apply(self) -> None:
        if self._opencv_threads is not None:
            return
        self._opencv_threads = cv2.getNumThreads()
        cv2.setNumThreads(OPENCV_THREADS)
        # A process that froze objects itself keeps its own policy: restore() leaves them frozen.
        # (So does a second engine opened while a first runs; when the first stops it hands every
        # object back, and the second runs on with ordinary collections: slower ones, never wrong.)
        self._unfreeze = gc.get_freeze_count() == 0
        self.freeze_heap()
        keep_frames_in_the_heap()

    def freeze_heap(self) -> None:
        """Leave what exists now out of later collections (again when the loop starts: the caller's
        own start-up — the control page, the config watcher — ran between open() and run())."""
        if self._opencv_threads is not None:
            gc.freeze()

    def restore(self) -> None:
        if self._opencv_threads is None:
            return
        cv2.setNumThreads(self._opencv_threads)
        self._opencv_threads = None
        if self._unfreeze:
            gc.unfreeze()
