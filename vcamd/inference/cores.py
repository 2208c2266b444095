"""Which cores the swap model runs on: all but the loop's while the machine is otherwise quiet,
every core while other programs compete for them.

The swap model runs beside the publishing loop. Quiet, a swapper thread on the loop's core makes
the next frame wait (one 720p frame took 137 ms while inswapper ran on every core), so the swap
model keeps off one core: the loop's. Under competing load (a call app) that core is not the
loop's anyway — the other programs take it — and the swapper, with one thread fewer than it
could have, gets less than its fair share against them. Where it was starved (two busy processes
on 2 cores, the 0.37-s call swapper at 0.65–0.75 s a face) a thread per core made the face a third
younger (age p95 1.05 s against 1.35–1.6 s); where the one thread got its share, it changed
nothing measurable, quiet or loaded (docs/performance.md, "The call's swapper built to its cost,
the swapper's cores, the newest frame"). So the swap worker moves its thread onto every core while other programs use at least
`BUSY_CORES`, and back off the loop's core once they have used less than `QUIET_CORES` for
`QUIET_HOLD_S`. The first swap of a start runs on every core too: until it lands the loop only
covers the frame and tracks every few frames (`FrameProcessor._first_swap_running`), and the face is
shown that much sooner (the 554-MB inswapper stand-in's first swap: 1.7 s on one core, 0.85 s on
two).

How (Linux): the swap worker's sessions get one intra-op thread per core of the process, and
ONNX Runtime pins its pool threads (every one but the caller's) to the swapper's cores
(`session.intra_op_thread_affinities`); the swap worker — the thread that calls the model and
works in its parallel sections beside the pool — pins itself to the same cores, or to every
core. Where a thread cannot choose its cores (macOS, Windows: Python has no per-thread affinity)
or a smaller `[models] threads` leaves the loop cores anyway, there is no split: those sessions
get at most cores − 1 threads (`runtime.helper_threads`) and nothing moves.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BUSY_CORES = 0.5
"""Other programs using at least this many cores (over `READ_EVERY_S`) are competing: the swapper
goes onto every core."""
QUIET_CORES = 0.25
"""Below this the machine is quiet again; held for `QUIET_HOLD_S`, the swapper leaves the loop's core."""
QUIET_HOLD_S = 5.0
READ_EVERY_S = 1.0
"""The meter is read at most this often (between swaps: a read costs ~0.1 ms)."""


@dataclass(frozen=True, slots=True)
class CoreSplit:
    """The process's cores, one of them the loop's: the swap model keeps off it while quiet."""

    loop_core: int
    swapper_cores: frozenset[int]

    @property
    def every_core(self) -> frozenset[int]:
        return self.swapper_cores | {self.loop_core}

    @property
    def threads(self) -> int:
        """Intra-op threads of a swap worker's session: one per core."""
        return len(self.every_core)

    def pool_affinities(self) -> str:
        """`session.intra_op_thread_affinities`: each pool thread (all but the caller) on the
        swapper's cores. ONNX Runtime numbers logical processors from 1."""
        cores = ",".join(str(core + 1) for core in sorted(self.swapper_cores))
        return ";".join([cores] * (self.threads - 1))


def core_split(threads: int) -> CoreSplit | None:
    """The split for sessions of `threads` intra-op threads (0: every core); None where a thread
    cannot choose its cores, the process has one core, or `threads` leaves the loop a core anyway."""
    if not (hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")):
        return None
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2 or 0 < threads < len(allowed):
        return None
    loop = min(allowed)
    return CoreSplit(loop, frozenset(allowed - {loop}))


class OtherProgramsMeter:
    """How many of the given cores the machine's other programs used since the last reading: the
    cores' busy time in /proc/stat less this process's own CPU time. Steal time (a hypervisor's
    other guests) is not counted: it is no program here. None where /proc/stat cannot be read."""

    def __init__(self, cores: frozenset[int], clock: Callable[[], float], stat_path: Path = Path("/proc/stat"),
                 own_cpu_s: Callable[[], float] | None = None) -> None:
        self._cores = cores
        self._clock = clock
        self._stat_path = stat_path
        self._own_cpu_s = own_cpu_s or time.process_time  # every thread of this process
        self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK")  # /proc/stat's unit
        self._last: tuple[float, float, float] | None = None  # (clock, busy s, own s)

    def read(self) -> float | None:
        """Cores used by other programs since the last call; None at the first call or when
        /proc/stat is unreadable."""
        busy = self._busy_s()
        if busy is None:
            return None
        now, own = self._clock(), self._own_cpu_s()
        last, self._last = self._last, (now, busy, own)
        if last is None or now <= last[0]:
            return None
        return max(0.0, ((busy - last[1]) - (own - last[2])) / (now - last[0]))

    def _busy_s(self) -> float | None:
        try:
            lines = self._stat_path.read_text(encoding="ascii").splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        ticks = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit() or int(name[3:]) not in self._cores:
                continue
            fields = [int(v) for v in rest.split()]
            # user nice system idle iowait irq softirq steal …: busy = user + nice + system + irq + softirq
            ticks += sum(fields[:3]) + sum(fields[5:7])
        return ticks * self._tick_s


class SwapperCores:
    """The swap worker's cores: `follow(split, first)` on the worker's thread before each swap pins
    it to the split's swapper cores, or to every core for a `first` swap and while other programs
    compete (see the module doc). `meter_for(cores)` builds the meter, `pin(cores)` moves the
    calling thread (parameters for tests)."""

    def __init__(self, clock: Callable[[], float], meter_for: Callable[[frozenset[int]], OtherProgramsMeter] | None = None,
                 pin: Callable[[frozenset[int]], None] | None = None) -> None:
        self._clock = clock
        self._meter_for = meter_for or (lambda cores: OtherProgramsMeter(cores, clock))
        self._pin = pin or pin_calling_thread
        self._split: CoreSplit | None = None
        self._meter: OtherProgramsMeter | None = None
        self._read_at = 0.0  # when the meter was last read (set with each new split)
        self._quiet_since: float | None = None
        self.every_core = False
        """The swapper is on every core now (other programs compete)."""
        self.changes = 0
        self._every_core_s = 0.0
        self._since: float | None = None
        self._pinned: frozenset[int] | None = None

    def follow(self, split: CoreSplit | None, first: bool = False) -> None:
        """Before a swap, on the worker's thread; `first`: no swap has landed yet."""
        now = self._clock()
        if split != self._split:
            self._account(now)
            left = self._split
            self._split, self.every_core, self._quiet_since, self._read_at = split, False, None, now
            self._meter = self._meter_for(split.every_core) if split is not None else None
            if self._meter is not None:
                self._meter.read()  # the first reading only sets the zero
            if split is None and left is not None:
                self._pin_to(left.every_core)  # a pipeline that runs anywhere: unpinned again
        elif split is not None and self._meter is not None and now - self._read_at >= READ_EVERY_S:
            self._read_at = now
            self._judge(now, split, self._meter.read())
        if split is not None:
            self._pin_to(split.every_core if first or self.every_core else split.swapper_cores)

    def _pin_to(self, cores: frozenset[int]) -> None:
        if cores != self._pinned:
            self._pin(cores)
            self._pinned = cores

    def _judge(self, now: float, split: CoreSplit, others: float | None) -> None:
        if others is None:
            return
        if not self.every_core and others >= BUSY_CORES:
            self._move(now, True, f"other programs use {others:.1f} of {split.threads} cores: the loop's core is not its own")
        elif self.every_core and others < QUIET_CORES:
            if self._quiet_since is None:
                self._quiet_since = now
            elif now - self._quiet_since >= QUIET_HOLD_S:
                self._move(now, False, f"other programs have used under {QUIET_CORES:g} cores for {QUIET_HOLD_S:g} s")
        else:
            self._quiet_since = None

    def _move(self, now: float, every_core: bool, why: str) -> None:
        assert self._split is not None
        self._account(now)
        self.every_core, self._quiet_since = every_core, None
        self.changes += 1
        where = "every core" if every_core else f"every core but the loop's ({self._split.loop_core})"
        log.info("swap model on %s: %s", where, why)

    def _account(self, now: float) -> None:
        if self.every_core and self._since is not None:
            self._every_core_s += now - self._since
        self._since = now

    def every_core_s(self) -> float:
        """Seconds the swapper has spent on every core because other programs competed."""
        now = self._clock()
        return self._every_core_s + (now - self._since if self.every_core and self._since is not None else 0.0)

    def to_json(self) -> dict[str, Any]:
        """For the stats: the split (None: the swapper runs anywhere), where it is now, how long
        it was on every core for other programs' sake, and how often it moved."""
        split = self._split
        return {
            "loop_core": split.loop_core if split is not None else None,
            "swapper_cores": sorted(split.swapper_cores) if split is not None else None,
            "every_core_now": self.every_core,
            "every_core_s": round(self.every_core_s(), 2),
            "changes": self.changes,
        }


def pin_calling_thread(cores: frozenset[int]) -> None:
    """Move the calling thread onto `cores` (Linux: a thread's own affinity; logged, never raised)."""
    try:
        os.sched_setaffinity(0, cores)  # Linux: the calling thread only
    except OSError as exc:  # a cpuset changed under us: the swapper runs where the OS lets it
        log.debug("could not move the swap worker to cores %s: %s", sorted(cores), exc)
