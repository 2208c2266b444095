"""Waiting for a condition, never for a clock: the one polling helper every test area uses.

The suite must pass with both cores busy, so a test never sleeps a fixed time and then asserts; it
polls the condition it needs and goes on the moment it holds. The timeout is only an upper bound,
for a condition that never comes: a generous one costs nothing when things go well.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 30.0
"""The default upper bound: far above what any condition here needs on an idle machine."""


def wait_for(condition: Callable[[], T], what: str, *, timeout_s: float = WAIT_S, poll_s: float = 0.02,
             detail: Callable[[], object] | None = None) -> T:
    """Call `condition` every `poll_s` until it returns something truthy, and return that value.

    After `timeout_s` without it, fail with an AssertionError naming `what`, the last value and,
    when given, `detail()` (counts, a log tail: what helps whoever reads the failure). An exception
    from `condition` ends the wait at once (e.g. "the daemon died": no point waiting on)."""
    if not isinstance(what, str):  # a timeout passed where `what` goes (older helpers took it second)
        raise TypeError(f"wait_for(condition, what, *, timeout_s=...): `what` must be a str, got {what!r}")
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f"; {detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what} (last value {value!r}){extra}")
        time.sleep(poll_s)
