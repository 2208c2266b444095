"""Walks the quality ladder (`vcamd.quality`): a small, deterministic state machine over capture→publish latencies.

Each published frame reports its latency with `observe()`. Over a rolling window of the last
`window` frames the watchdog decides:

* **degrade one rung** (`quality.lower`: full → no_enhancer → low_res → frame_skip) when more than `degrade_ratio`
  of the window ran over `budget_ms`;
* **climb one rung** (`quality.higher`) when the window's p95 has stayed under `budget_ms × recover_headroom` for
  `recover_after_s` seconds;
* never two transitions within `cooldown_s`, and after each one the window starts empty, so the
  next decision looks only at frames produced at the new level.

The gap between "over budget" (degrade) and "well under budget for seconds" (recover) is the
hysteresis that keeps it from oscillating. Time comes from an injected clock, so tests can drive
it frame by frame.

Every transition is one `Transition` (time, from → to, the measurements that triggered it); once
the next full window has been measured, a `TransitionResult` reports what the change achieved.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from vcamd.config import WatchdogConfig
from vcamd.jsonable import to_jsonable
from vcamd.quality import BEST, Level, higher, lower


@dataclass(frozen=True, slots=True)
class WindowStats:
    frames: int
    p50_ms: float
    p95_ms: float
    over_budget_share: float
    stage_p95_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Transition:
    time: float
    from_level: Level
    to_level: Level
    reason: str  # "over_budget", "headroom" or "manual"
    trigger: WindowStats

    def log_line(self) -> str:
        """One structured line: key=value pairs a human and grep can both read."""
        t = self.trigger
        stages = " ".join(f"{k}_p95_ms={v:.1f}" for k, v in sorted(t.stage_p95_ms.items()))
        return (
            f"watchdog transition t={self.time:.3f} from={self.from_level.name} to={self.to_level.name} "
            f"reason={self.reason} window={t.frames} p50_ms={t.p50_ms:.1f} p95_ms={t.p95_ms:.1f} "
            f"over_budget={t.over_budget_share:.2f} {stages}".rstrip()
        )


@dataclass(frozen=True, slots=True)
class TransitionResult:
    """What the window after a transition measured."""

    transition: Transition
    time: float
    after: WindowStats

    def log_line(self) -> str:
        a = self.after
        return (
            f"watchdog result t={self.time:.3f} of={self.transition.from_level.name}->{self.transition.to_level.name} "
            f"window={a.frames} p50_ms={a.p50_ms:.1f} p95_ms={a.p95_ms:.1f} over_budget={a.over_budget_share:.2f}"
        )


WatchdogEvent = Transition | TransitionResult

HISTORY_CAP = 1000
"""Transitions (and their results) kept for the stats JSON: a daemon that runs for days and keeps
changing level (or a tray user flipping quality) must not grow without end; the newest are kept."""


class Watchdog:
    """Decides the processing level from measured latencies. Not thread-safe: one caller."""

    def __init__(
        self,
        cfg: WatchdogConfig,
        clock: Callable[[], float] = time.monotonic,
        *,
        enhancer_enabled: bool = True,
    ) -> None:
        self.cfg = cfg
        self._clock = clock
        self.enhancer_enabled = enhancer_enabled
        self._level = BEST
        self._forced: Level | None = None
        self._latencies: deque[float] = deque(maxlen=cfg.window)
        self._stages: dict[str, deque[float]] = {}
        self._last_transition_at: float | None = None
        self._headroom_since: float | None = None
        self._awaiting_result: Transition | None = None
        self.transitions: list[Transition] = []
        self.results: list[TransitionResult] = []

    # -- the level ------------------------------------------------------------------------------
    @property
    def level(self) -> Level:
        return self._forced if self._forced is not None else self._level

    @property
    def automatic(self) -> bool:
        return self._forced is None

    def force(self, level: Level | None) -> Transition | None:
        """Pin the level (the user chose a quality), or None to let the watchdog decide again."""
        before = self.level
        self._forced = level
        self._reset_window()
        if self.level != before:
            t = Transition(self._clock(), before, self.level, "manual", WindowStats(0, 0.0, 0.0, 0.0))
            self._record(t)
            return t
        return None

    # -- measurements -------------------------------------------------------------------------
    def observe(self, latency_ms: float, stage_ms: Mapping[str, float] | None = None) -> list[WatchdogEvent]:
        """Record one published frame; returns what happened: usually nothing, else a transition
        and/or the measured result of the previous one (in that order of time)."""
        self._latencies.append(float(latency_ms))
        for name, ms in (stage_ms or {}).items():
            self._stages.setdefault(name, deque(maxlen=self.cfg.window)).append(float(ms))
        if len(self._latencies) < self.cfg.window:
            return []
        now = self._clock()
        window = self._window_stats()
        events: list[WatchdogEvent] = []
        if self._awaiting_result is not None:
            # The first full window at the new level is the transition's result.
            result = TransitionResult(self._awaiting_result, now, window)
            self._awaiting_result = None
            self.results.append(result)
            del self.results[:-HISTORY_CAP]
            events.append(result)
        transition = self._decide(now, window)
        if transition is not None:
            events.append(transition)
        return events

    def _decide(self, now: float, window: WindowStats) -> Transition | None:
        if self._forced is not None:
            return None
        budget = self.cfg.budget_ms
        if window.p95_ms < budget * self.cfg.recover_headroom:
            if self._headroom_since is None:
                self._headroom_since = now
        else:
            self._headroom_since = None
        if not self._cooled_down(now):
            return None
        down = lower(self._level, enhancer_configured=self.enhancer_enabled)
        if window.over_budget_share > self.cfg.degrade_ratio and down is not None:
            return self._move(now, down, "over_budget", window)
        up = higher(self._level, enhancer_configured=self.enhancer_enabled)
        if self._headroom_since is not None and now - self._headroom_since >= self.cfg.recover_after_s and up is not None:
            return self._move(now, up, "headroom", window)
        return None

    def _cooled_down(self, now: float) -> bool:
        return self._last_transition_at is None or now - self._last_transition_at >= self.cfg.cooldown_s

    def _move(self, now: float, to: Level, reason: str, window: WindowStats) -> Transition:
        t = Transition(now, self._level, to, reason, window)
        self._level = to
        self._last_transition_at = now
        self._reset_window()
        self._awaiting_result = t
        self._record(t)
        return t

    def _record(self, t: Transition) -> None:
        self.transitions.append(t)
        del self.transitions[:-HISTORY_CAP]

    def _reset_window(self) -> None:
        self._latencies.clear()
        self._stages.clear()
        self._headroom_since = None

    def _window_stats(self) -> WindowStats:
        lat = np.fromiter(self._latencies, dtype=np.float64)
        p50, p95 = np.percentile(lat, [50, 95])
        over = float(np.mean(lat > self.cfg.budget_ms))
        stages = {k: float(np.percentile(np.fromiter(v, np.float64), 95)) for k, v in self._stages.items() if v}
        return WindowStats(len(lat), float(p50), float(p95), over, stages)

    # -- reporting ------------------------------------------------------------------------------
    def history(self) -> list[dict]:
        """Transitions with the result measured after each, for the stats JSON."""
        results = {id(r.transition): r for r in self.results}
        out = []
        for t in self.transitions:
            entry = {
                "time": round(t.time, 3),
                "from": t.from_level.name,
                "to": t.to_level.name,
                "reason": t.reason,
                "trigger": to_jsonable(asdict(t.trigger), digits=2),
            }
            r = results.get(id(t))
            entry["after"] = to_jsonable(asdict(r.after), digits=2) if r else None
            out.append(entry)
        return out

