"""The swap worker's cores (`vcamd.inference.cores`): off the loop's core while the machine is quiet, on
every core while other programs use at least BUSY_CORES; the meter that says which, from
/proc/stat; the sessions' pool pinned where the split says; and the real worker thread moving."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vcamd.inference.cores import (
    BUSY_CORES,
    EVERY_CORE_PRECISIONS,
    QUIET_CORES,
    QUIET_HOLD_S,
    READ_EVERY_S,
    CoreSplit,
    OtherProgramsMeter,
    SwapperCores,
    core_split,
)

LINUX_AFFINITY = hasattr(os, "sched_setaffinity") and Path("/proc/stat").exists()
needs_two_cores = pytest.mark.skipif(not LINUX_AFFINITY or len(os.sched_getaffinity(0)) < 2 if LINUX_AFFINITY else True,
                                     reason="per-thread affinity and at least two cores (Linux)")


def test_the_split_keeps_the_lowest_allowed_core_for_the_loop_and_pins_the_pool_off_it(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3, 5}, raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cores: None, raising=False)
    split = core_split(0)
    assert split == CoreSplit(2, frozenset({3, 5}))
    assert split.threads == 3 and split.every_core == {2, 3, 5}
    assert split.pool_affinities() == "4,6;4,6"  # ONNX Runtime counts processors from 1, one entry per pool thread
    assert core_split(3) == split and core_split(8) == split
    assert core_split(2) is None  # two threads on three cores leave the loop one anyway
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert core_split(0) is None  # one core: nothing to keep
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert core_split(0) is None  # no per-thread affinity (macOS, Windows)


def _stat(path: Path, rows: dict[int, tuple[int, ...]]) -> None:
    total = [sum(r[i] for r in rows.values()) for i in range(10)]
    lines = ["cpu  " + " ".join(map(str, total))] + [f"cpu{n} " + " ".join(map(str, r)) for n, r in sorted(rows.items())]
    path.write_text("\n".join(lines + ["intr 1 2 3", "ctxt 99", "cpu_weird 1 2"]) + "\n", encoding="ascii")


def test_the_meter_counts_the_cores_busy_time_less_this_process_s_own(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    now, own = [10.0], [5.0]
    meter = OtherProgramsMeter(frozenset({0, 1}), lambda: now[0], stat, own_cpu_s=lambda: own[0])
    #                user nice system idle iowait irq softirq steal guest guest_nice
    _stat(stat, {0: (100, 0, 50, 900, 10, 0, 0, 7, 0, 0), 1: (200, 0, 0, 800, 0, 0, 0, 0, 0, 0), 2: (0,) * 10})
    assert meter.read() is None  # the first reading is the zero
    per_s = round(1 / tick)  # ticks in one second
    # In 2 s: core 0 busy 1.5 s (user, nice, system, irq, softirq), core 1 busy 1 s, core 2 (not
    # ours) busy 2 s; idle, iowait and steal count for nothing; this process used 1 s of it.
    _stat(stat, {0: (100 + per_s, per_s // 4, 50 + per_s // 8, 900, 10 + 5 * per_s, per_s // 16, per_s // 16, 7 + 9 * per_s, 0, 0),
                 1: (200 + per_s, 0, 0, 800 + per_s, 0, 0, 0, 0, 0, 0), 2: (2 * per_s, 0, 0, 0, 0, 0, 0, 0, 0, 0)})
    now[0], own[0] = 12.0, 6.0
    assert meter.read() == pytest.approx((1.5 + 1.0 - 1.0) / 2.0, abs=0.02)
    now[0], own[0] = 13.0, 7.5  # nothing else ran; this process's own time is never "others"
    assert meter.read() == 0.0
    stat.unlink()
    assert meter.read() is None  # unreadable: no verdict, never an error


class _Meter:
    def __init__(self, readings: list[float | None]) -> None:
        self.readings = readings
        self.calls = 0

    def read(self) -> float | None:
        self.calls += 1
        return self.readings.pop(0) if self.readings else None


def test_the_worker_takes_every_core_while_others_compete_and_leaves_the_loop_s_core_once_they_stop() -> None:
    split = CoreSplit(0, frozenset({1, 2, 3}))
    now = [0.0]
    pinned: list[frozenset[int]] = []
    meter = _Meter([None])  # the zero, read when the split is first seen
    cores = SwapperCores(lambda: now[0], meter_for=lambda c: meter, pin=pinned.append)
    cores.follow(split)
    assert pinned == [split.swapper_cores] and not cores.every_core and meter.calls == 1

    def swap(others: float | None, after_s: float = READ_EVERY_S) -> None:
        now[0] += after_s
        meter.readings.append(others)
        cores.follow(split)

    swap(BUSY_CORES * 0.9)
    assert not cores.every_core
    swap(BUSY_CORES)
    borrowed_at = now[0]
    assert cores.every_core and pinned[-1] == split.every_core and cores.changes == 1
    swap(QUIET_CORES)  # between the two thresholds: stays
    swap(QUIET_CORES * 0.5)  # quiet from here…
    swap(QUIET_CORES * 0.5, QUIET_HOLD_S - READ_EVERY_S)
    assert cores.every_core  # …but not for QUIET_HOLD_S yet
    swap(QUIET_CORES * 0.5)
    assert not cores.every_core and pinned[-1] == split.swapper_cores and cores.changes == 2
    assert cores.every_core_s() == pytest.approx(now[0] - borrowed_at)
    assert cores.to_json() == {"loop_core": 0, "swapper_cores": [1, 2, 3], "worker_cores": [1, 2, 3], "every_core_now": False,
                               "every_core_s": round(now[0] - borrowed_at, 2), "changes": 2}
    calls = meter.calls
    now[0] += READ_EVERY_S / 2
    cores.follow(split)  # read at most every READ_EVERY_S: a fast GPU swap does not read /proc per frame
    assert meter.calls == calls


def test_the_first_swap_of_a_start_runs_on_every_core_and_the_next_ones_off_the_loop_s() -> None:
    """Until the first swap lands the loop only covers the frame: the swap gets every core."""
    split = CoreSplit(0, frozenset({1}))
    pinned: list[frozenset[int]] = []
    cores = SwapperCores(lambda: 0.0, meter_for=lambda c: _Meter([]), pin=pinned.append)
    cores.follow(split, first=True)
    cores.follow(split, first=True)  # a first swap that failed: tried again on every core, no new syscall
    cores.follow(split)
    cores.follow(split)
    assert pinned == [split.every_core, split.swapper_cores] and not cores.every_core and cores.changes == 0


def test_an_int8_swap_model_runs_on_every_core_while_quiet_and_a_float_one_keeps_off_the_loop_s() -> None:
    """The int8 copy's swap takes every core, quiet or not; the float model's stays off the loop's
    core while quiet; switching to the copy mid-run (`Int8Upgrade`) moves the worker at its next swap."""
    assert EVERY_CORE_PRECISIONS == {"int8"}
    split = CoreSplit(0, frozenset({1}))
    pinned: list[frozenset[int]] = []
    cores = SwapperCores(lambda: 0.0, meter_for=lambda c: _Meter([]), pin=pinned.append)
    cores.follow(split, first=True)
    cores.follow(split, precision="float")
    cores.follow(split, precision="int8")
    cores.follow(split, precision="int8")
    assert pinned == [split.every_core, split.swapper_cores, split.every_core]
    assert not cores.every_core and cores.changes == 0  # not the meter's doing: no move counted as the load's
    assert cores.to_json()["worker_cores"] == [0, 1] and not cores.to_json()["every_core_now"]


def test_a_pipeline_without_a_split_is_never_pinned_and_a_new_split_starts_quiet() -> None:
    pinned: list[frozenset[int]] = []
    now = [0.0]
    cores = SwapperCores(lambda: now[0], meter_for=lambda c: _Meter([None, 2.0]), pin=pinned.append)
    cores.follow(None, first=True)
    assert pinned == []
    first = CoreSplit(0, frozenset({1}))
    cores.follow(first)
    now[0] += READ_EVERY_S
    cores.follow(first)
    assert cores.every_core and pinned == [first.swapper_cores, first.every_core]
    second = CoreSplit(1, frozenset({0}))  # a rebuilt pipeline with other sessions
    cores.follow(second)
    assert not cores.every_core and pinned[-1] == second.swapper_cores
    cores.follow(None)  # rebuilt with fewer threads than cores: runs anywhere again
    cores.follow(None)
    assert pinned[-1] == second.every_core and len(pinned) == 4


def _tasks() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def _allowed(tid: str | int) -> set[int] | None:
    """A thread's cores; None for a thread that ended meanwhile (another test's, finishing)."""
    try:
        status = Path(f"/proc/self/task/{tid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            out: set[int] = set()
            for part in line.split(":", 1)[1].strip().split(","):
                lo, _, hi = part.partition("-")
                out.update(range(int(lo), int(hi or lo) + 1))
            return out
    raise AssertionError("no Cpus_allowed_list")


@needs_two_cores
def test_a_swap_worker_session_has_a_thread_per_core_with_its_pool_off_the_loop_s_core(standins) -> None:
    """The threads that appear while each session is created (other tests' threads may start or
    end meanwhile in this process: only the pinned ones are counted)."""
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(["cpu"], threads=0)
    split = sessions.core_split
    assert split is not None
    before = _tasks()
    session = sessions.get(standins.swapper, background=True)
    new = _tasks() - before
    assert session.get_session_options().intra_op_num_threads == split.threads

    def pinned() -> list[str]:
        return [tid for tid in new if _allowed(tid) == split.swapper_cores]

    # ONNX Runtime's pool threads pin themselves once they run: on a busy machine that may be just
    # after the session is made. Waited for (a bound, not a timing: the condition ends it).
    deadline = time.monotonic() + 30
    while len(pinned()) < split.threads - 1 and time.monotonic() < deadline:
        threading.Event().wait(0.01)
    assert len(pinned()) == split.threads - 1, {t: _allowed(t) for t in new}
    before = _tasks()
    loop_session = sessions.get(standins.recognizer)  # the loop's models: unpinned, as before
    assert not any(_allowed(tid) == split.swapper_cores for tid in _tasks() - before)
    assert loop_session.get_session_options().intra_op_num_threads == sessions.threads


class _RecordingFaces:
    """A face pipeline for the real SwapWorker that records the cores each swap ran on."""

    def __init__(self, split, precision=None) -> None:
        self.core_split = split
        self.precision = precision
        self.seen: list[set[int]] = []

    def swap_faces(self, frame, faces, level=None, timer=None):
        from vcamd.faces.results import SwappedFace

        self.seen.append(os.sched_getaffinity(0))
        crop = np.random.default_rng(len(self.seen)).integers(0, 255, (8, 8, 3), np.uint8)
        return [SwappedFace(crop, "arcface", np.zeros((5, 2), np.float32))]


def _swapping(faces: _RecordingFaces):
    """The real SwapWorker on `faces`, and one swap through it (waits for its result)."""
    from vcamd.common.quality import BEST
    from vcamd.live.measures.stats import LiveStats
    from vcamd.live.swapworker import SwapJob, SwapWorker

    worker = SwapWorker(faces, LiveStats(time.monotonic), time.monotonic)  # type: ignore[arg-type]
    worker.start()
    frame = np.random.default_rng(0).integers(0, 255, (16, 16, 3), np.uint8)

    def swap_once() -> None:
        _, seq = worker.results.latest()
        worker.submit(SwapJob(frame, [None], [None], BEST, time.monotonic()))  # type: ignore[list-item]
        assert worker.results.wait_newer(seq, 60)[0] is not None

    return worker, swap_once


@needs_two_cores
def test_under_real_load_the_real_swap_worker_moves_onto_every_core() -> None:
    """Two busy processes at normal priority (the bench's call app) and the real meter: the worker
    thread pins itself off the loop's core at its first swap and onto every core once the meter
    has seen them. Waits for the condition (each swap reads at most once a READ_EVERY_S)."""
    from vcamd.bench.runs import busy_processes

    split = core_split(0)
    assert split is not None
    faces = _RecordingFaces(split)
    worker, swap_once = _swapping(faces)
    seen = faces.seen
    try:
        swap_once()  # the first swap of a start: every core
        swap_once()
        assert seen[0] == split.every_core and seen[1] == split.swapper_cores
        with busy_processes(2):
            deadline = time.monotonic() + 120  # a generous bound, not a timing: the condition ends it
            while not worker.cores.every_core and time.monotonic() < deadline:
                threading.Event().wait(0.2)
                swap_once()
        assert worker.cores.every_core, "the worker never saw the two busy processes"
        assert seen[-1] == split.every_core
    finally:
        worker.stop()


@needs_two_cores
def test_the_real_swap_worker_runs_an_int8_swapper_on_every_core_while_quiet() -> None:
    """The worker reads what the swapper runs at from the face pipeline (`FaceEngine.precision`)
    before each swap: float off the loop's core, int8 on every core, quiet (no meter verdict: the
    meter is read at most once a READ_EVERY_S and these swaps are back to back)."""
    from vcamd.inference.precision import FLOAT

    split = core_split(0)
    assert split is not None
    faces = _RecordingFaces(split, FLOAT)
    worker, swap_once = _swapping(faces)
    seen = faces.seen
    try:
        swap_once()  # the first swap of a start: every core
        swap_once()
        faces.precision = replace(FLOAT, runs="int8")  # the upgrade switched the swapper to its copy
        swap_once()
        assert seen == [split.every_core, split.swapper_cores, split.every_core]
        assert not worker.cores.every_core  # the load's flag: untouched
    finally:
        worker.stop()
