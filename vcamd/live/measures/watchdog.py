"""Walks the quality ladder (`vcamd.common.quality`): a small, deterministic state machine over capture→publish latencies.

Each published frame reports its latency with `observe()`. Over a rolling window of the last
`window` frames the watchdog decides:

* **degrade one rung** (`quality.lower`: full → no_boost → no_enhancer → low_res → frame_skip) when more than `degrade_ratio`
  of the window ran over `budget_ms`;
* **climb one rung** (`quality.higher`) when the window's p95 has stayed under `budget_ms × recover_headroom` for
  `recover_after_s` seconds;
* also climb one rung when the lower rung does not buy the headroom rule's margin but the higher
  one is known to fit: its last window that kept the budget (at most `degrade_ratio` of it over
  budget, p95 under `budget_ms`) is remembered per rung, and while the current window keeps the
  budget too for `recover_after_s`, the watchdog goes back up. Each memory serves one climb (a
  window that keeps the budget at that rung makes a new one), and after a climb that ran over
  budget again the next one waits twice as long (no oscillation). This is what brings a
  29-face frame back to full quality after a passing load spike: at full it costs more than
  budget × headroom whatever the machine does, yet fits the budget;
* **take back a step down that made the frames later**: after a step down for latency, the frames
  at the new rung are compared with the rung it left as it ran before the window that made it step
  (its last RUNG_RECORD frames but that window: the step is for a burst, or for a load that came
  with it); once a window of them is in (NO_GAIN_FRAMES at least at each rung), a rung with frames
  over budget, no fewer than there, and the p95 later by more than NO_GAIN_MARGIN is left at once,
  back up (reason "no_gain", the rung above's record logged beside); so is a step for a burst (that
  record within `degrade_ratio`) whose rung, after RUNG_RECORD frames, neither keeps the budget nor
  runs earlier than the record by the margin (lower quality for nothing: a crowd's low_res within
  10 % of full kept it there, as late, for the rest of a run). That step is not taken again for
  NO_GAIN_BLOCK_S — twice as long after each step taken back again. If the frames back up (after
  WAY_BACK_FRAMES: the way back has its own cost) are worse than those the rung below just ran (a
  load that stayed: both rungs slower, the lower one less so), the step was right: down again
  (reason "no_gain" too), unblocked. A step down not judged yet when the next one is taken (its
  frames within the margin, but over budget) is judged again if that next one is taken back, on
  its rung's frames after the way back. On a 2-core CPU a 150-face crowd at full quality ran
  p95 50 ms; at low_res, whose smaller detector input misses the crowd's small faces and covers
  their places anew, 68 ms (`benchmarks/loop_cost.py --pin`): the step the watchdog took for a
  passing burst kept it there, slower, for the rest of the run;
* **probe the rung a load took it from**: below the highest rung steps down for latency left, a
  rung whose frames have run calm (no step down due) and faster than when it got there (p50 by
  LOAD_GONE_MARGIN) for PROBE_AFTER_S goes straight back to that rung (reason "probe"): the
  load has gone, and a crowd at full quality (p95 over the budget) never shows the headroom or a
  window that fits to climb on. A probe into a load that stays steps down again, and the rung it
  reaches runs as fast as it will there: no second probe until the machine changes again;
* **degrade to the next rung with less swap work** (`quality.lower_swap_work`: the pixel boost, then the enhancer, off)
  when more than `degrade_ratio` of the window's frames that showed a swapped face showed one older
  than `swap_age_budget_ms` (the face trails the person: a degraded result as surely as a late
  frame; reason "swap_age"). Rungs that change only the loop's detection are not taken for it, and
  with nothing below to make a swap faster nothing happens. A climb to a rung with more swap work
  also needs the window's swap age p95 under `swap_age_budget_ms × recover_headroom`, and after
  one that ran over the swap-age budget again the next waits twice as long, as for "fits";
* **swap one face per round** (`faces_per_round`) when the face is still old with no rung below to
  make a swap faster and the window's frames had several faces to swap: each round the swap
  worker does one face, not N, so that face is N times younger; the others are obscured (the
  frame work decides which face keeps the swap). Logged like a rung change (`faces_per_round=all->1`),
  and given back first, once the face has stayed young (p95 under budget × `recover_headroom`)
  for `recover_after_s` — twice as long after each give-back that made the face old again;
* frames observed with `warming=True` (sessions still being built, the first detection not in
  yet) are not judged: a start-up's slow first frames say nothing about the level's cost;
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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from types import MappingProxyType
from typing import Any

from vcamd.common.jsonable import to_jsonable
from vcamd.common.quality import BEST, Level, adds_swap_work, higher, lower, lower_swap_work, rung, worst
from vcamd.config.schema import WatchdogConfig


@dataclass(frozen=True, slots=True)
class WindowStats:
    frames: int
    p50_ms: float
    p95_ms: float
    over_budget_share: float
    stage_p95_ms: dict[str, float] = field(default_factory=dict)
    swap_age_p95_ms: float | None = None  # None: no frame of the window showed a swapped face
    swap_age_over_share: float = 0.0  # of those frames, the share older than swap_age_budget_ms


@dataclass(frozen=True, slots=True)
class Transition:
    time: float
    from_level: Level
    to_level: Level
    reason: str  # "over_budget", "swap_age", "headroom", "fits" (the higher rung is known to fit the budget),
    # "no_gain" (the step down made the frames later: taken back), "probe" (back to the rung a load
    # took it from: `PROBE_AFTER_S`) or "manual"
    trigger: WindowStats
    faces_per_round: tuple[int | None, int | None] = (None, None)
    """(before, after) of `Watchdog.faces_per_round` (None: every face); equal unless this
    transition capped or uncapped the faces swapped per round."""
    compared: WindowStats | None = None
    """"no_gain": the record of the rung it goes back to, which the frames at the rung it leaves were
    worse than, or did not gain on."""

    @property
    def faces_per_round_change(self) -> tuple[str, str] | None:
        """(before, after) of the faces swapped per round as the log and the stats name them
        ("all", "1"); None when this transition left them as they were."""
        before, after = self.faces_per_round
        return None if before == after else (_faces_name(before), _faces_name(after))

    def log_line(self) -> str:
        """One structured line: key=value pairs a human and grep can both read."""
        t = self.trigger
        stages = " ".join(f"{k}_p95_ms={v:.1f}" for k, v in sorted(t.stage_p95_ms.items()))
        if t.swap_age_p95_ms is not None:
            stages = f"swap_age_p95_ms={t.swap_age_p95_ms:.0f} swap_age_over={t.swap_age_over_share:.2f} {stages}"
        change = self.faces_per_round_change
        faces = f"faces_per_round={change[0]}->{change[1]} " if change else ""
        c = self.compared
        compared = "" if c is None else (f" above_frames={c.frames} above_p95_ms={c.p95_ms:.1f} "
                                         f"above_over_budget={c.over_budget_share:.2f}")
        return (
            f"watchdog transition t={self.time:.3f} from={self.from_level.name} to={self.to_level.name} "
            f"reason={self.reason} {faces}window={t.frames} p50_ms={t.p50_ms:.1f} p95_ms={t.p95_ms:.1f} "
            f"over_budget={t.over_budget_share:.2f}{compared} {stages}".rstrip()
        )


def _faces_name(cap: int | None) -> str:
    return "all" if cap is None else str(cap)


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


def _percentile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) percentile of an already sorted, non-empty list: a window of 15
    frames costs a few µs this way, against ~20 µs a `np.percentile` call, every frame."""
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))

_UNCHANGED = object()
"""`Watchdog._move`'s default: the faces swapped per round stay as they are."""

RUNG_RECORD = 90
"""Frames (3 s at 30 fps) of the current rung kept as its record: what a step down is compared with."""

NO_GAIN_FRAMES = 15
"""The fewest frames at each rung that a step is judged on (`no_gain`): half a second at 30 fps —
fewer (a small `window`, a step right after the start) say nothing, and the step stands as the
ladder took it."""

WAY_BACK_FRAMES = 45
"""The first frames back up after a take-back (1.5 s at 30 fps) are the way back, not the rung's
own cost: a crowd's faces found again at full size, their covers and swaps drawn anew. The frames
after them are what `no_gain` compares with the rung below's."""

NO_GAIN_MARGIN = 0.1
"""A rung's p95 must exceed the record of the rung above by more than this share to count as worse
(with its over-budget share above that rung's too): noise between two windows is not a verdict."""

NO_GAIN_BLOCK_S = 30.0
"""A step down taken back is not taken again for this long (doubled after each further take-back,
up to 2⁴ times): each try costs a window of later frames."""

PROBE_AFTER_S = 10.0
"""A rung below the one steps down for latency left, whose frames have, for this long, run calm (no window
with more than `degrade_ratio` of them over budget) and faster than when it was reached (p50 under
its first RUNG_RECORD frames' by LOAD_GONE_MARGIN: the load that made it step has gone), tries the
rung those steps left again (reason "probe"). A load that passed leaves no headroom a crowd can
show (p95 50 ms at full: over the budget, yet never a step down), and one stepped to frame_skip by
a 40 s load stayed there for the rest of the run. A rung as fast as when it was reached is where
the machine settles: no probe (after a probe that steps down again, too: the rung it reaches
arrives anew)."""

LOAD_GONE_MARGIN = 0.2
"""How much earlier (p50) than when it was reached a rung's frames must run for a probe: the noise
of a still machine is well within it; a load of two busy processes on two cores is not."""

HISTORY_CAP = 1000
"""Transitions (and their results) kept for the stats JSON: a daemon that runs for days and keeps
changing level (or a tray user flipping quality) must not grow without end; the newest are kept."""


STALE_AFTER_EDIT: Mapping[str, frozenset[str]] = MappingProxyType({
    # [watchdog] key -> what the watchdog remembers that was judged under its old value (`configure`).
    # The frames measured are times, not verdicts: they stay, and so does the level.
    "budget_ms": frozenset({"headroom", "fits", "no_gain", "probe"}),  # "p95 under budget × headroom since"; windows that kept the budget
    "degrade_ratio": frozenset({"fits", "probe"}),  # a window kept the budget with at most this share over it
    "recover_headroom": frozenset({"headroom", "young"}),  # since when the frames, the faces had headroom
    "swap_age_budget_ms": frozenset({"young", "uncaps"}),  # since when the face was young; faces given back too soon
    "window": frozenset({"window"}),  # the series' length (their newest frames kept)
    "lowres_scale": frozenset({"lowres", "no_gain"}),  # what the reduced-detection rungs cost, as measured
    "recover_after_s": frozenset(),  # a duration, compared at each decision
    "cooldown_s": frozenset(),  # likewise
})
"""Memories: "headroom" (`_headroom_since`), "fits" (each rung's last window that kept the budget,
since when it has, and the climbs that failed: the back-off), "young" (`_young_since`), "uncaps"
(the give-backs of faces that failed), "window" (the series re-bounded), "lowres" (the memories of
the reduced-detection rungs, and the window when the level is one), "no_gain" (the steps down taken
back and the rung records they were judged on), "probe" (since when the frames have been calm and
faster than on arrival)."""


class Watchdog:
    """Decides the processing level from measured latencies. Not thread-safe: one caller."""

    def __init__(
        self,
        cfg: WatchdogConfig,
        clock: Callable[[], float] = time.monotonic,
        *,
        enhancer_enabled: bool = True,
        boost_enabled: bool = False,
    ) -> None:
        self._clock = clock
        self.enhancer_enabled = enhancer_enabled
        self.boost_enabled = boost_enabled
        """The running face pipeline swaps at a pixel boost (its rung is a step of its own)."""
        self._forced: Level | None = None
        self.transitions: list[Transition] = []
        self.results: list[TransitionResult] = []
        self._start_measuring(cfg)

    def _start_measuring(self, cfg: WatchdogConfig) -> None:
        self.cfg = cfg
        self._level = BEST
        self._latencies: deque[float] = deque(maxlen=cfg.window)
        self._swap_ages: deque[float] = deque(maxlen=cfg.window)  # of the window's frames that showed a swapped face
        self._stages: dict[str, deque[float]] = {}
        self._last_transition_at: float | None = None
        self._headroom_since: float | None = None
        self._awaiting_result: Transition | None = None
        self._fits: dict[Level, WindowStats] = {}
        """Per rung, its last window that kept the budget (see the module doc)."""
        self._fits_since: float | None = None
        self._failed_climbs = 0
        self._faces_cap: int | None = None  # faces swapped per round (None: every face)
        self._faces_to_swap: deque[int] = deque(maxlen=cfg.window)  # per frame of the window, the faces it had to swap
        self._young_since: float | None = None  # since when the swap age has had headroom
        self._failed_uncaps = 0
        self._record_here: deque[float] = deque(maxlen=RUNG_RECORD)  # the latencies at the current rung since it was reached
        self._taken_from: tuple[Level, WindowStats] | None = None  # a step taken back: the rung below, its frames then
        self._unjudged: list[tuple[Level, WindowStats]] = []
        """The steps down for latency not judged yet, each as the rung it left and that rung's record:
        the last is the step that brought the ladder here, judged now; those before it wait for a
        take-back of the one after them."""
        self._no_gain: dict[tuple[Level, Level], tuple[float, int]] = {}  # a step taken back → (blocked until, times)
        self._left_for_latency: Level | None = None  # the highest rung steps down for latency left, until back there
        self._calm_since: float | None = None  # since when the windows here have been calm and faster than on arrival
        self._arrived_p50: float | None = None  # p50 of this rung's first RUNG_RECORD frames, below `_left_for_latency`
        self._arriving = False  # this rung was reached below `_left_for_latency`: its first RUNG_RECORD frames are its arrival

    def configure(self, cfg: WatchdogConfig, changed: Iterable[str]) -> None:
        """Apply an edit of [watchdog] whose `changed` keys are named: the new thresholds from the
        next frame, and only what was judged under the old values of those keys is forgotten
        (`STALE_AFTER_EDIT`). The frames measured, the level, a level the user pinned, the switches
        of the running pipeline and the history shown in the stats stay."""
        self.cfg = cfg
        for memory in sorted(set().union(*(STALE_AFTER_EDIT[key] for key in changed))):
            self._forget(memory)

    def _forget(self, memory: str) -> None:
        """One memory of `STALE_AFTER_EDIT`, made anew under `self.cfg`."""
        if memory == "window":  # the series bounded anew, their newest frames kept
            self._latencies = deque(self._latencies, maxlen=self.cfg.window)
            self._swap_ages = deque(self._swap_ages, maxlen=self.cfg.window)
            self._faces_to_swap = deque(self._faces_to_swap, maxlen=self.cfg.window)
            self._stages = {name: deque(series, maxlen=self.cfg.window) for name, series in self._stages.items()}
        elif memory == "headroom":
            self._headroom_since = None
        elif memory == "fits":
            self._fits.clear()
            self._fits_since = None
            self._failed_climbs = 0
        elif memory == "young":
            self._young_since = None
        elif memory == "uncaps":
            self._failed_uncaps = 0
        elif memory == "no_gain":
            self._no_gain.clear()
            self._taken_from = None
            self._unjudged = []
        elif memory == "probe":
            self._calm_since = None
        elif memory == "lowres":
            self._fits = {level: w for level, w in self._fits.items() if not rung(level).reduced_detection}
            if rung(self._level).reduced_detection:
                self._reset_window()  # its frames ran at the old detection size
        else:  # pragma: no cover — STALE_AFTER_EDIT names only the memories above
            raise ValueError(memory)

    # -- the level ------------------------------------------------------------------------------
    @property
    def level(self) -> Level:
        return self._forced if self._forced is not None else self._level

    @property
    def faces_per_round(self) -> int | None:
        """How many faces the swap worker gets per round (None: every face to swap). Capped only by
        the swap-age rule (see the module doc); a quality the user pins swaps every face."""
        return None if self._forced is not None else self._faces_cap

    @property
    def automatic(self) -> bool:
        return self._forced is None

    def force(self, level: Level | None) -> Transition | None:
        """Pin the level (the user chose a quality), or None to let the watchdog decide again."""
        before = self.level
        self._forced = level
        self._reset_window()
        self._taken_from = None  # the frames from here on are not the step's
        self._unjudged = []
        if self.level != before:
            t = Transition(self._clock(), before, self.level, "manual", WindowStats(0, 0.0, 0.0, 0.0))
            self._record(t)
            return t
        return None

    # -- measurements -------------------------------------------------------------------------
    def observe(self, latency_ms: float, stage_ms: Mapping[str, float] | None = None, *,
                warming: bool = False, swap_age_ms: float | None = None, faces_to_swap: int = 1) -> list[WatchdogEvent]:
        """Record one published frame; returns what happened: usually nothing, else a transition
        and/or the measured result of the previous one (in that order of time). A frame made
        while the pipeline is `warming` up is not judged (nor kept in the window). `swap_age_ms`:
        the age of the swapped face it showed, None when it showed none. `faces_to_swap`: how many
        faces the selection wanted swapped in it (before `faces_per_round`)."""
        if warming:
            return []
        self._latencies.append(float(latency_ms))
        self._record_here.append(float(latency_ms))
        self._faces_to_swap.append(faces_to_swap)
        if swap_age_ms is not None:
            self._swap_ages.append(float(swap_age_ms))
        for name, ms in (stage_ms or {}).items():
            series = self._stages.get(name)
            if series is None:
                series = self._stages[name] = deque(maxlen=self.cfg.window)
            series.append(float(ms))
        if len(self._latencies) < self.cfg.window:
            return []
        now = self._clock()
        window = self._window_stats(stages=False)  # the stages' p95s only when an event names them
        events: list[WatchdogEvent] = []
        if self._awaiting_result is not None:
            # The first full window at the new level is the transition's result.
            result = TransitionResult(self._awaiting_result, now, self._window_stats())
            self._awaiting_result = None
            self.results.append(result)
            del self.results[:-HISTORY_CAP]
            events.append(result)
        transition = self._decide(now, window)
        if transition is not None:
            events.append(transition)
        return events

    def _fits_budget(self, window: WindowStats) -> bool:
        return window.over_budget_share <= self.cfg.degrade_ratio and window.p95_ms < self.cfg.budget_ms

    def _decide(self, now: float, window: WindowStats) -> Transition | None:
        if self._forced is not None:
            return None
        budget = self.cfg.budget_ms
        if window.p95_ms < budget * self.cfg.recover_headroom:
            if self._headroom_since is None:
                self._headroom_since = now
        else:
            self._headroom_since = None
        if self._arriving and len(self._record_here) == RUNG_RECORD:
            self._arrived_p50, self._arriving = self._stats_of(self._record_here).p50_ms, False
        if (self._arrived_p50 is not None and window.over_budget_share <= self.cfg.degrade_ratio
                and window.p50_ms < self._arrived_p50 * (1.0 - LOAD_GONE_MARGIN)):
            if self._calm_since is None:
                self._calm_since = now
        else:
            self._calm_since = None
        fits = self._fits_budget(window)
        if fits:
            self._fits[self._level] = window
            if self._fits_since is None:
                self._fits_since = now
        else:
            self._fits_since = None
        # Before the cooldown: the frames at the rung a step reached are later than where it came
        # from — the sooner back the better, and the step is blocked, so this cannot oscillate.
        back = self._taken_back(now)
        if back is not None:
            return back
        if not self._cooled_down(now):
            return None
        enhancer, boost = self.enhancer_enabled, self.boost_enabled
        down = lower(self._level, enhancer_configured=enhancer, boost_configured=boost)
        if down is not None and self._no_gain.get((self._level, down), (0.0, 0))[0] > now:
            down = None  # that step made the frames later when last taken: stay
        if window.over_budget_share > self.cfg.degrade_ratio and down is not None:
            last = self.transitions[-1] if self.transitions else None
            if last is not None and last.reason == "fits" and last.to_level is self._level:
                self._failed_climbs += 1  # the memory was wrong: the next such climb waits twice as long
            return self._move(now, down, "over_budget", self._window_stats())
        ages = self._swap_age_stats()
        old = ages is not None and ages[1] > self.cfg.degrade_ratio
        if ages is not None and self._swap_age_headroom(ages):
            if self._young_since is None:
                self._young_since = now
        else:
            self._young_since = None
        faster = lower_swap_work(self._level, enhancer_configured=enhancer, boost_configured=boost)
        if old and faster is not None:
            last = self.transitions[-1] if self.transitions else None
            if last is not None and last.to_level is self._level and adds_swap_work(last.from_level, self._level, enhancer_configured=enhancer,
                                                                                     boost_configured=boost):
                self._failed_climbs += 1  # the climb made the face old again: the next one waits twice as long
            return self._move(now, faster, "swap_age", self._window_stats())
        if old and self._faces_cap is None and max(self._faces_to_swap, default=0) > 1:
            last = self.transitions[-1] if self.transitions else None
            if last is not None and last.faces_per_round == (1, None):
                self._failed_uncaps += 1  # giving the faces back made them old again: wait longer next time
            return self._move(now, self._level, "swap_age", self._window_stats(), faces_per_round=1)
        if self._faces_cap is not None:
            # Every face swapped again comes before any rung with more swap work.
            wait_s = self.cfg.recover_after_s * 2 ** min(self._failed_uncaps, 8)
            if self._young_since is not None and now - self._young_since >= wait_s:
                return self._move(now, self._level, "headroom", self._window_stats(), faces_per_round=None)
        up = higher(self._level, enhancer_configured=enhancer, boost_configured=boost)
        if up is None:
            return None
        more_swap_work = adds_swap_work(self._level, up, enhancer_configured=enhancer, boost_configured=boost)
        if more_swap_work and not self._room_for_swap_work(ages):
            return None
        headroom_wait_s = self.cfg.recover_after_s * (2 ** min(self._failed_climbs, 8) if more_swap_work else 1)
        if self._headroom_since is not None and now - self._headroom_since >= headroom_wait_s:
            return self._move(now, up, "headroom", self._window_stats())
        # The lower rung does not buy the headroom margin, but the higher one is known to fit.
        # Each memory is used once (a healthy window at that rung makes a new one), and after each
        # climb that ran over budget again the next waits twice as long: a rung that fits only
        # now and then is not bounced to and from every few seconds.
        wait_s = self.cfg.recover_after_s * 2 ** min(self._failed_climbs, 8)
        if up in self._fits and self._fits_since is not None and now - self._fits_since >= wait_s:
            del self._fits[up]
            return self._move(now, up, "fits", self._window_stats())
        return self._probe(now, ages)

    def _probe(self, now: float, ages: tuple[float, float] | None) -> Transition | None:
        """Back to the rung the steps down for latency left, once the frames here have run calm and
        faster than on arrival for PROBE_AFTER_S: a load that has passed shows no other way."""
        target = self._left_for_latency
        if target is None or self._calm_since is None:
            return None
        more_swap_work = adds_swap_work(self._level, target, enhancer_configured=self.enhancer_enabled,
                                        boost_configured=self.boost_enabled)
        if more_swap_work and not self._room_for_swap_work(ages):
            return None
        if now - self._calm_since < PROBE_AFTER_S:
            return None
        return self._move(now, target, "probe", self._window_stats())

    def _taken_back(self, now: float) -> Transition | None:
        """Back up to the rung a step down for latency left, when the frames here (a window of them
        at least) are worse than its record (`_worse`), or once RUNG_RECORD of them are in, a step
        for a burst gained nothing on it (`_gained_nothing`): that step blocked for NO_GAIN_BLOCK_S,
        doubled each time. Down again when the frames back up are worse than the rung below's were.
        Back here by a take-back, the step that brought the ladder here, if it was not judged yet
        (a second step down came first: a burst's frames at low_res within the margin, over budget,
        down to frame_skip, taken back), is judged again on the frames after the way back.
        Judged until RUNG_RECORD frames here: a later change is the load's, not the step's."""
        if len(self._record_here) < max(self.cfg.window, NO_GAIN_FRAMES):
            return None
        if not self._unjudged and self._taken_from is None:
            return None  # nothing to judge (most frames): no sorting
        frames = list(self._record_here)
        if self._taken_from is not None:
            frames = frames[WAY_BACK_FRAMES:]  # the way back is not this rung's own cost
            if len(frames) >= NO_GAIN_FRAMES and self._worse(self._stats_of(frames), self._taken_from[1]):
                below, then = self._taken_from
                _, times = self._no_gain.get((self._level, below), (0.0, 1))
                self._no_gain[(self._level, below)] = (0.0, times - 1)  # the take-back was wrong: not counted, unblocked
                return self._move(now, below, "no_gain", self._window_stats(), compared=then)
        if self._unjudged and len(frames) >= NO_GAIN_FRAMES:
            here = self._stats_of(frames)
            above, before = self._unjudged[-1]
            last_look = len(self._record_here) == RUNG_RECORD  # the step's frames are all in
            if self._worse(here, before) or (last_look and self._gained_nothing(here, before)):
                times = self._no_gain.get((above, self._level), (0.0, 0))[1]
                self._no_gain[(above, self._level)] = (now + NO_GAIN_BLOCK_S * 2 ** min(times, 4), times + 1)
                below, waiting = self._level, self._unjudged[:-1]
                back = self._move(now, above, "no_gain", self._window_stats(), compared=before)
                self._taken_from = (below, here)
                self._unjudged = waiting  # their last: the step down to `above` (any other move empties them)
                return back
        if len(self._record_here) == RUNG_RECORD:  # a full record here and no verdict: the step stands
            self._taken_from = None
            self._unjudged = []
        return None

    def _worse(self, here: WindowStats, than: WindowStats) -> bool:
        """Frames over budget (a rung that keeps the budget is not left for the one above), as many
        as there or more (all of them, under a load: equal), and the p95 later by more than NO_GAIN_MARGIN."""
        return (0.0 < here.over_budget_share >= than.over_budget_share
                and here.p95_ms > than.p95_ms * (1.0 + NO_GAIN_MARGIN))

    def _gained_nothing(self, here: WindowStats, than: WindowStats) -> bool:
        """A step down for a burst (the record of the rung above, without the burst's window, would
        not have stepped: at most `degrade_ratio` of it over budget) whose rung, its record full,
        neither keeps the budget nor runs earlier than that record by more than NO_GAIN_MARGIN:
        lower quality for nothing. A step for the rung above's own cost (its record over the
        ratio, every rung as late) stands unless worse."""
        return (than.over_budget_share <= self.cfg.degrade_ratio and not self._fits_budget(here)
                and here.p95_ms >= than.p95_ms * (1.0 - NO_GAIN_MARGIN))

    def _stats_of(self, latencies: Iterable[float]) -> WindowStats:
        """Frames, p50, p95 and over-budget share of a series of latencies (not empty)."""
        lat = sorted(latencies)
        over = sum(1 for v in lat if v > self.cfg.budget_ms) / len(lat)
        return WindowStats(len(lat), _percentile(lat, 50.0), _percentile(lat, 95.0), over)

    def _swap_age_stats(self) -> tuple[float, float] | None:
        """(p95 ms, share over `swap_age_budget_ms`) of the window's swap ages; None when the budget
        is off or no frame of the window showed a swapped face."""
        budget = self.cfg.swap_age_budget_ms
        if budget <= 0 or not self._swap_ages:
            return None
        ages = sorted(self._swap_ages)
        return _percentile(ages, 95.0), sum(1 for v in ages if v > budget) / len(ages)

    def _room_for_swap_work(self, ages: tuple[float, float] | None) -> bool:
        """A climb may give the swap worker more work: every face is swapped each round and the face
        is young enough (`_swap_age_headroom`)."""
        return self._faces_cap is None and self._swap_age_headroom(ages)

    def _swap_age_headroom(self, ages: tuple[float, float] | None) -> bool:
        """The face is young enough to give the swap worker more work (or there is none to judge)."""
        return ages is None or ages[0] < self.cfg.swap_age_budget_ms * self.cfg.recover_headroom

    def _cooled_down(self, now: float) -> bool:
        return self._last_transition_at is None or now - self._last_transition_at >= self.cfg.cooldown_s

    def _move(self, now: float, to: Level, reason: str, window: WindowStats, *,
              faces_per_round: int | None | object = _UNCHANGED, compared: WindowStats | None = None) -> Transition:
        """To rung `to`; `faces_per_round`, when given, changes the faces swapped per round too."""
        cap = self._faces_cap if faces_per_round is _UNCHANGED else faces_per_round
        assert cap is None or isinstance(cap, int)
        t = Transition(now, self._level, to, reason, window, (self._faces_cap, cap), compared)
        # A step down for latency is judged against the rung's frames before the window that made it
        # step (not judged when there are too few).
        before = list(self._record_here)[: -self.cfg.window]
        stepped_down = reason == "over_budget" and to is not self._level and len(before) >= NO_GAIN_FRAMES
        # The step that brought the ladder here, if not judged yet, waits for a take-back of this one.
        self._unjudged = [*self._unjudged, (self._level, self._stats_of(before))] if stepped_down else []
        self._note_probe_target(reason, to)
        self._taken_from = None
        self._level, self._faces_cap = to, cap
        self._last_transition_at = now
        self._reset_window()
        self._awaiting_result = t
        self._record(t)
        return t

    def _note_probe_target(self, reason: str, to: Level) -> None:
        """Before a move to `to`: remember the highest rung a step down for latency ("over_budget",
        or "no_gain" down again) leaves, until the ladder is back there; below it, the rung reached
        is arriving."""
        for_latency = reason in ("over_budget", "no_gain") and to is not self._level and worst((to, self._level)) is to
        if for_latency and self._left_for_latency is None:
            self._left_for_latency = self._level
        elif self._left_for_latency is not None and worst((to, self._left_for_latency)) is self._left_for_latency:
            self._left_for_latency = None  # back at (or above) the rung the steps left
        # Below that rung, whatever the move, the rung reached is measured on arrival: a probe's reference.
        self._arriving, self._arrived_p50 = self._left_for_latency is not None, None

    def _record(self, t: Transition) -> None:
        self.transitions.append(t)
        del self.transitions[:-HISTORY_CAP]

    def _reset_window(self) -> None:
        self._latencies.clear()
        self._record_here.clear()
        self._swap_ages.clear()
        self._stages.clear()
        self._headroom_since = None
        self._fits_since = None
        self._calm_since = None
        self._young_since = None
        self._faces_to_swap.clear()

    def _window_stats(self, stages: bool = True) -> WindowStats:
        per_stage = {k: _percentile(sorted(v), 95.0) for k, v in self._stages.items() if v} if stages else {}
        ages = self._swap_age_stats()
        return replace(self._stats_of(self._latencies), stage_p95_ms=per_stage,
                       swap_age_p95_ms=None if ages is None else ages[0], swap_age_over_share=0.0 if ages is None else ages[1])

    # -- reporting ------------------------------------------------------------------------------
    def history(self) -> list[dict[str, Any]]:
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
            if change := t.faces_per_round_change:
                entry["faces_per_round"] = {"from": change[0], "to": change[1]}
            if t.compared is not None:
                entry["compared"] = to_jsonable(asdict(t.compared), digits=2)
            entry["after"] = to_jsonable(asdict(r.after), digits=2) if r else None
            out.append(entry)
        return out

