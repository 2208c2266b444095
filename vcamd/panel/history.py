"""The last minute of the engine's status, one sample a second: what the page's chart draws.

Kept on the daemon's side, so a page opened now shows the minute before it was opened, and ten
open tabs do not multiply the cost (one `status()` call a second, whoever watches).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # clock() when taken
    fps: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    enabled: bool | None
    level: str | None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else None


def sample_of(status: Mapping[str, Any], t: float) -> Sample:
    """Pick the charted numbers (`vcamd.live.measures.numbers.LiveNumbers`: fps, latency_ms) out of a status
(`control.protocol.Status`, as `Controllable.status()` answers it: a plain dict).

    Read defensively: a `Controllable` other than the engine may report latency as one number, or
    leave numbers out."""
    latency = status.get("latency_ms")
    if isinstance(latency, dict):
        p50, p95 = _number(latency.get("p50")), _number(latency.get("p95"))
    else:
        p50 = p95 = _number(latency)
    level = status.get("level")
    return Sample(
        t=t,
        fps=_number(status.get("fps")),
        latency_p50_ms=p50,
        latency_p95_ms=p95,
        enabled=status.get("enabled") if isinstance(status.get("enabled"), bool) else None,
        level=getattr(level, "name", None) or (str(level) if level is not None else None),
    )


class StatusHistory:
    """A ring of `span_s / period_s` samples of `status()`, taken every `period_s` by one thread."""

    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        *,
        period_s: float = 1.0,
        span_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._status = status
        self._period_s = period_s
        self._clock = clock
        self._samples: deque[Sample] = deque(maxlen=max(1, round(span_s / period_s)))
        self.span_s = span_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "StatusHistory":
        self._thread = threading.Thread(target=self._run, name="panel-history", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def take_sample(self) -> None:
        try:
            status = self._status()
        except Exception as exc:  # a failing status() leaves a gap in the chart, never a dead sampler
            log.debug("status() failed while sampling for the control page: %s", exc)
            return
        with self._lock:
            self._samples.append(sample_of(status, self._clock()))

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def to_json(self) -> list[dict[str, Any]]:
        """Oldest first; "age_s" = seconds before now (the chart's x axis)."""
        now = self._clock()
        return [
            {"age_s": round(now - s.t, 2), "fps": s.fps, "latency_p50_ms": s.latency_p50_ms,
             "latency_p95_ms": s.latency_p95_ms, "enabled": s.enabled, "level": s.level}
            for s in self.samples()
        ]

    def _run(self) -> None:
        next_t = self._clock()
        while not self._stop.is_set():
            self.take_sample()
            next_t += self._period_s
            self._stop.wait(max(0.0, next_t - self._clock()))
