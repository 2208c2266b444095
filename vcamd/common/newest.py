"""Newest wins: the one hand-off of the live path, written once.

Wherever a producer must never wait for a consumer (camera → loop, loop → swap model, loop →
detector, encoder → preview viewers), the value in between lives in a `NewestSlot`: a newer value
replaces an older one nobody took (counted as dropped), and a reader either *takes* it (one
consumer: the slot empties) or *observes* it by sequence number (many readers, each waits for a
value newer than the one it saw). `NewestWorker` is a thread that works on the newest job of one
slot and publishes what it made into another; `BoundedCall` runs calls on such a thread so that the
caller stops waiting after a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
J = TypeVar("J")
R = TypeVar("R")


class NewestSlot(Generic[T]):
    """One value, newest wins. Thread-safe; nothing ever queues up."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._value: T | None = None
        self._fresh = False  # a value was put and not taken yet
        self._held = False  # a consumer took a value and has not `release`d it yet (a worker's job)
        self._seq = 0
        self._closed = False
        self.taken_count = 0
        self.dropped = 0  # values replaced before anyone took them
        self.max_depth = 0

    def put(self, value: T) -> int:
        """Store `value` (replacing an untaken one) and wake every waiter; returns its number."""
        with self._cond:
            if self._fresh:
                self.dropped += 1
            self._value, self._fresh = value, True
            self._seq += 1
            self.max_depth = 1
            self._cond.notify_all()
            return self._seq

    def take(self, timeout: float | None, *, hold: bool = False) -> T | None:
        """The newest value not taken yet (the slot empties), waiting up to `timeout` seconds
        (None: until one comes, `wake()` or `close()`); None when none came. With `hold`, the
        slot counts as busy until `release()` (a worker working on the job)."""
        with self._cond:
            if not self._fresh and not self._closed and (timeout is None or timeout > 0):
                self._cond.wait(timeout)
            if not self._fresh or self._closed:
                return None
            value, self._value, self._fresh = self._value, None, False
            self.taken_count += 1
            self._held = hold
            return value

    def release(self) -> None:
        """The consumer is done with the value it took with `hold`."""
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def latest(self) -> tuple[T | None, int]:
        """The newest value (taken or not: observers never empty the slot) and its number."""
        with self._cond:
            return self._value, self._seq

    def wait_newer(self, seq: int, timeout: float | None) -> tuple[T | None, int]:
        """The newest value once its number exceeds `seq`, or (None, seq) on timeout or close."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or (self._value is not None and self._seq > seq), timeout)
            if self._closed or self._value is None or self._seq <= seq:
                return None, seq
            return self._value, self._seq

    def wake(self) -> None:
        """Release waiters early (shutdown)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter for good: later waits return at once with nothing."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    @property
    def depth(self) -> int:
        """1 while a value waits to be taken, else 0."""
        with self._cond:
            return 1 if self._fresh else 0

    @property
    def idle(self) -> bool:
        """Nothing waiting and nothing held by a consumer."""
        with self._cond:
            return not self._fresh and not self._held


class NewestWorker(Generic[J, R]):
    """A thread working on the newest job handed to it: a job not started yet is replaced by a
    newer one (never queued), so the work is always about the freshest frame and the caller never
    waits. Subclasses implement `_work(job) -> result | None`; a result goes into `results`."""

    def __init__(self, name: str) -> None:
        self.jobs: NewestSlot[J] = NewestSlot()
        self.results: NewestSlot[R] = NewestSlot()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.cpu_s = 0.0
        """The thread's CPU time since it started, as of its last finished job (it reads its own
        `time.thread_time`: the stats' CPU by thread)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        # Wait for a running job to finish (ONNX Runtime must not be torn down under a running
        # session); a model stuck inside a run is abandoned after `timeout` — the thread is a
        # daemon, so a blocked model never blocks shutdown.
        self.jobs.close()
        self.results.close()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    @property
    def idle(self) -> bool:
        return self.jobs.idle

    @property
    def jobs_replaced(self) -> int:
        return self.jobs.dropped

    def submit(self, job: J) -> None:
        self.jobs.put(job)

    def _loop(self) -> None:
        started = time.thread_time()
        self._on_thread_start()
        while not self.jobs.closed:
            job = self.jobs.take(None, hold=True)
            if job is None:
                continue
            try:
                result = self._work(job)
            finally:
                self.cpu_s = time.thread_time() - started
                # Released before the result is out, so a caller woken by it can hand in the next job at once.
                self.jobs.release()
            if result is not None:
                self.results.put(result)

    def _on_thread_start(self) -> None:
        """Runs once on the worker thread before the first job."""

    def _work(self, job: J) -> R | None:
        raise NotImplementedError


class BoundedCall(NewestWorker[tuple[int, Callable[[], Any]], tuple[int, Any, BaseException | None]]):
    """Runs calls on its own thread so the caller can stop waiting after a deadline.

    A model that hangs (driver stall, deadlock) then costs the caller one deadline, once: while
    the stuck call is still running, further calls return "not done" at once, so the caller keeps
    going (treating it as a miss) until the model answers again.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._next_id = 0
        self._late_id: int | None = None  # the call that ran past its deadline, until its result is taken
        self.start()

    def call(self, fn: Callable[[], Any], timeout: float) -> tuple[bool, Any]:
        """(True, fn()) when it finished within `timeout`; (False, None) when it did not or the
        previous call is still running. Re-raises fn's exception. One caller thread only."""
        if not self.idle:
            return False, None
        my_id = self._next_id
        self._next_id += 1
        self._late_id = None  # a late result not taken before this call is dropped
        _, seen = self.results.latest()
        deadline = time.monotonic() + timeout
        self.submit((my_id, fn))
        while True:  # a result of an earlier call that timed out may land first: skip it
            answer, seen = self.results.wait_newer(seen, max(0.0, deadline - time.monotonic()))
            if answer is None:
                self._late_id = my_id
                return False, None
            job_id, value, error = answer
            if job_id == my_id:
                break
        if error is not None:
            raise error
        return True, value

    @property
    def late_pending(self) -> bool:
        """The last call ran past its deadline and its result has not been taken (`take_late`)."""
        return self._late_id is not None

    def take_late(self, timeout: float = 0.0) -> tuple[bool, Any]:
        """The result of the last call that ran past its deadline, once it has finished (waiting up
        to `timeout` seconds for it): (True, fn()) — once; (False, None) while it runs, or when
        there is none. Re-raises fn's exception. A caller whose late call still says something true
        now uses it (`live.tracking.latelook`)."""
        if self._late_id is None:
            return False, None
        deadline = time.monotonic() + timeout
        answer, seen = self.results.latest()
        while answer is None or answer[0] != self._late_id:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False, None
            answer, seen = self.results.wait_newer(seen, remaining)
            if answer is None:  # timed out, or closed
                return False, None
        self._late_id = None
        if answer[2] is not None:
            raise answer[2]
        return True, answer[1]

    def _work(self, job: tuple[int, Callable[[], Any]]) -> tuple[int, Any, BaseException | None]:
        job_id, fn = job
        try:
            return job_id, fn(), None
        except Exception as exc:  # handed to the caller, who decides
            return job_id, None, exc
