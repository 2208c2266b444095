"""`swapbook.SwapBook`: the newest swap per face, merged from the worker's results, and which faces'
swaps are out of date."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np
import pytest

from vcamd.common.quality import Level, rung
from vcamd.common.types import Face
from vcamd.live.swapbook import KEEP_UNMATCHED, REFRESH_GAP_S, REFRESH_S, REFRESH_SLICE, RefreshSlices, Swap, SwapBook


def _face(x: float, y: float = 50.0, size: float = 40.0) -> Face:
    return Face(box=(x, y, x + size, y + size), score=0.9, kps=np.zeros((5, 2), np.float32))


@dataclass(frozen=True)
class Result:
    faces: list[Face]
    swapped: list[object]
    t_capture: float
    frame_index: int
    level: Level = Level.full
    maker: tuple = field(default_factory=lambda: (PIPELINE, SOURCE))


PIPELINE, SOURCE = object(), object()
MAKER = (PIPELINE, SOURCE)
BOTH_ON = (True, True)  # the running pipeline has an enhancer and a pixel boost (`SwapBook.current`'s switches)


def test_a_result_for_some_faces_replaces_their_swaps_and_keeps_the_others():
    book = SwapBook()
    left, middle, right = _face(0), _face(100), _face(200)
    book.merge(Result([left, middle, right], ["L1", "M1", "R1"], 1.0, 10))
    book.merge(Result([_face(102)], ["M2"], 2.0, 20))  # only the middle face changed
    assert [s.swapped for s in book.match([left, _face(101), right])] == ["L1", "M2", "R1"]
    book.merge(Result([_face(102)], ["M3"], 3.0, 30))
    book.merge(book._merged)  # the same result again: taken once
    assert [s.swapped for s in book.match([left, middle, right])] == ["L1", "M3", "R1"]


def test_a_swap_is_current_while_its_face_only_moved_since_its_frame():
    book = SwapBook()
    face = _face(0)
    book.merge(Result([face], ["s"], 1.0, 10))
    (swap,) = book.match([face])
    assert SwapBook.current(swap, 10, Level.full, MAKER, now=1.5, switches=BOTH_ON)  # stable since the swap's frame
    assert SwapBook.current(swap, 4, Level.full, MAKER, now=1.5, switches=BOTH_ON)  # ... or since before it
    assert not SwapBook.current(swap, 11, Level.full, MAKER, now=1.5, switches=BOTH_ON)  # changed after it was made
    assert not SwapBook.current(swap, 10, Level.full, MAKER, now=1.0 + REFRESH_S + 0.01, switches=BOTH_ON)  # made again now and then
    assert not SwapBook.current(None, 0, Level.full, MAKER, now=1.0, switches=BOTH_ON)


def test_another_pipeline_source_face_or_swap_work_makes_it_out_of_date_detection_rungs_do_not():
    book = SwapBook()
    face = _face(0)
    book.merge(Result([face], ["s"], 1.0, 10, level=Level.no_enhancer))
    (swap,) = book.match([face])
    assert SwapBook.current(swap, 10, Level.low_res, MAKER, now=1.1, switches=BOTH_ON)  # low_res swaps as no_enhancer does
    assert SwapBook.current(swap, 10, Level.frame_skip, MAKER, now=1.1, switches=BOTH_ON)
    assert not SwapBook.current(swap, 10, Level.full, MAKER, now=1.1, switches=BOTH_ON)  # the enhancer is back on
    assert not SwapBook.current(swap, 10, Level.no_enhancer, (object(), SOURCE), now=1.1, switches=BOTH_ON)  # a rebuilt pipeline
    assert not SwapBook.current(swap, 10, Level.no_enhancer, (PIPELINE, object()), now=1.1, switches=BOTH_ON)  # another source face


@pytest.mark.parametrize(("enhancer", "boost"), [(False, False), (True, False), (False, True), (True, True)])
def test_a_swap_is_out_of_date_at_another_rung_only_for_what_the_pipeline_has(enhancer, boost):
    """A pipeline without an enhancer or a pixel boost makes the same swap at every rung: a step from
    full to low_res and back (the watchdog's, in a crowd) keeps every face's swap. With one, the rungs
    that turn it off or on make another swap."""
    book, face = SwapBook(), _face(0)
    book.merge(Result([face], ["s"], 1.0, 10, level=Level.full))
    (swap,) = book.match([face])
    switches = (enhancer, boost)
    for level in Level:
        same = (not enhancer or rung(level).enhancer) and (not boost or rung(level).pixel_boost)
        assert SwapBook.current(swap, 10, level, MAKER, 1.1, switches) is same, level
        assert SwapBook.check(swap, 10, level, MAKER, 1.1, 1.05, switches) is same, level


def test_a_new_swap_replaces_the_one_shown_on_its_face_not_only_the_one_made_where_it_is():
    """A face that moved far from where its swap was made: the new swap replaces the old one, which
    is not matched again (the bench's sliding face: shown 2 s old each time it passed there)."""
    book = SwapBook()
    book.merge(Result([_face(0)], ["old"], 1.0, 10))
    assert [s.swapped for s in book.match([_face(60)])] == ["old"]  # the face moved on, still matched
    book.merge(Result([_face(55)], ["new"], 2.0, 20))  # made where the face was then
    assert [s.swapped for s in book.match([_face(5)])] == ["new"]  # back near the old place: the new swap
    assert len(book._swaps) == 1


def test_a_swap_no_face_matches_goes_after_keep_unmatched_frames():
    book = SwapBook()
    gone, stays = _face(0), _face(300)
    book.merge(Result([gone, stays], ["g", "s"], 1.0, 1))
    for _ in range(KEEP_UNMATCHED - 1):
        book.match([stays])
    assert [s.swapped for s in book.match([gone, stays])] == ["g", "s"]  # back in time: its swap is still there
    for _ in range(KEEP_UNMATCHED):
        book.match([stays])
    assert [None if s is None else s.swapped for s in book.match([_face(0), stays])] == [None, "s"]


def test_a_kept_swap_shows_its_face_as_of_the_last_frame_it_was_checked_current_not_its_own():
    """Frames at 30 fps: a swap made from frame 10 is checked current at every frame while the face
    only moves; at frame 41 the face changes. The shown face is as old as frame 40, not frame 10."""
    book, face = SwapBook(), _face(0)
    t = {i: 1.0 + (i - 10) / 30.0 for i in range(10, 80)}  # the fake camera's capture times
    book.merge(Result([face], ["s"], t[10], 10))
    for i in range(11, 41):
        (swap,) = book.match([face])
        assert SwapBook.check(swap, 5, Level.full, MAKER, now=t[i] + 0.03, t_frame=t[i], switches=BOTH_ON)
        assert SwapBook.shown_since([swap]) == t[i]  # current: as young as the frame checked
    (swap,) = book.match([face])
    assert not SwapBook.check(swap, 41, Level.full, MAKER, now=t[41] + 0.03, t_frame=t[41], switches=BOTH_ON)  # the face changed
    assert SwapBook.shown_since([swap]) == t[40]
    (swap,) = book.match([face])
    assert not SwapBook.check(swap, 41, Level.full, MAKER, now=t[60] + 0.03, t_frame=t[60], switches=BOTH_ON)
    assert SwapBook.shown_since([swap]) == t[40]  # still the last frame it showed the face as it was
    book.merge(Result([face], ["s2"], t[55], 55))  # a swap made after the change: its own frame
    (fresh,) = book.match([face])
    assert SwapBook.shown_since([fresh]) == t[55]
    assert SwapBook.shown_since([fresh, swap]) == t[40]  # the oldest face shown sets the frame's age
    assert SwapBook.shown_since([]) is None


def test_a_kept_swap_past_refresh_counts_from_its_last_current_frame():
    book, face = SwapBook(), _face(0)
    book.merge(Result([face], ["s"], 1.0, 10))
    (swap,) = book.match([face])
    last = 1.0 + REFRESH_S - 0.05
    assert SwapBook.check(swap, 10, Level.full, MAKER, now=last + 0.02, t_frame=last, switches=BOTH_ON)
    assert not SwapBook.check(swap, 10, Level.full, MAKER, now=1.0 + REFRESH_S + 0.1, t_frame=1.0 + REFRESH_S + 0.08, switches=BOTH_ON)
    assert SwapBook.shown_since([swap]) == last  # not 1.0: it showed the still face until `last`


def _swaps(made_at: list[float]) -> list[Swap]:
    return [Swap(_face(50.0 * k), "s", t, 0, Level.full, MAKER) for k, t in enumerate(made_at)]


def test_a_group_that_fits_in_one_slice_is_made_again_together_whenever_due():
    slices, swaps = RefreshSlices(), _swaps([1.0] * REFRESH_SLICE)
    due = [True] * REFRESH_SLICE
    assert slices.take(swaps, due, 5.0) == due and slices.take(swaps, due, 5.01) == due  # no gap, no slice
    assert RefreshSlices.lead_s(REFRESH_SLICE, 0.2) == 1.5 * 0.2  # asked as far ahead as ever


def test_a_crowds_due_swaps_are_made_again_a_slice_at_a_time_the_oldest_first_a_gap_apart():
    slices = RefreshSlices()
    made = [1.0 + 0.001 * ((k * 37) % 40) for k in range(40)]  # 40 faces, made in another order than listed
    swaps, due = _swaps(made), [True] * 40
    first = slices.take(swaps, due, 5.0)
    oldest = sorted(range(40), key=lambda k: made[k])[: RefreshSlices.size(40)]
    assert [k for k, d in enumerate(first) if d] == sorted(oldest)
    assert not any(slices.take(swaps, due, 5.0 + REFRESH_GAP_S / 2))  # the next slice waits for the gap
    rest = [d and not f for d, f in zip(due, first)]
    second = slices.take(swaps, rest, 5.0 + REFRESH_GAP_S)
    assert sum(second) == RefreshSlices.size(40) and not any(f and s for f, s in zip(first, second))


@pytest.mark.parametrize("fps", [30.0, 10.0])
def test_a_crowd_made_together_is_made_again_in_slices_each_before_its_swap_expires(fps):
    """146 swaps made at once, a frame every 1/fps s, a swap taking 50 ms: each frame the due ones
    (asked `lead_s` ahead) go a slice at a time; every face's new swap lands before its old one is
    REFRESH_S old, no slice holds more than an eighth of the faces, and the next round's swaps are
    made over the slices' gaps, not at once (the wave does not come back)."""
    n, usual = 146, 0.05
    slices, made = RefreshSlices(), [0.0] * n
    lead = RefreshSlices.lead_s(n, usual)
    remade: list[float | None] = [None] * n
    sizes = []
    for frame in range(int(REFRESH_S * fps) + 1):
        now = frame / fps
        swaps = _swaps(made)
        due = [remade[k] is None and SwapBook.due(swaps[k], now, lead) for k in range(n)]
        taken = slices.take(swaps, due, now, usual)
        sizes.append(sum(taken))
        for k in (k for k, t in enumerate(taken) if t):
            remade[k] = now
    assert all(t is not None and t + usual < REFRESH_S for t in remade)
    assert max(sizes) <= RefreshSlices.size(n) < n / 6
    assert max(t for t in remade if t is not None) - min(t for t in remade if t is not None) >= 7 * REFRESH_GAP_S


@pytest.mark.parametrize("fps", [30.0, 10.0])
def test_a_crowd_is_made_again_once_per_refresh_period_not_round_after_round(fps):
    """146 swaps made at once, then the loop as it runs for 20 s: a face's swap is made again when
    due and its slice's turn has come, landing `usual` later. After the first round has spread the
    swaps apart, each face is made again about once per REFRESH_S (never more than once in 0.7 of
    it, in the median), never older than REFRESH_S when its new swap lands — and no slice of more
    than an eighth. (Each slice made again as soon as due: every face again every 0.6 REFRESH_S.)"""
    n, usual, seconds = 146, 0.05, 20.0
    slices, made = RefreshSlices(), [0.0] * n
    lead = RefreshSlices.lead_s(n, usual)
    remakes: list[list[float]] = [[] for _ in range(n)]
    landing: list[tuple[float, int]] = []  # (lands at, face) of the swaps being made
    for frame in range(1, int(seconds * fps) + 1):
        now = frame / fps
        for t, k in [x for x in landing if x[0] <= now]:
            landing.remove((t, k))
            made[k] = t - usual  # the capture time of the frame it was made from
        busy = {k for _, k in landing}
        swaps = _swaps(made)
        due = [k not in busy and SwapBook.due(swaps[k], now, lead) for k in range(n)]
        taken = slices.take(swaps, due, now, usual)
        assert sum(taken) <= RefreshSlices.size(n) < n / 6
        for k in (k for k, t in enumerate(taken) if t):
            assert now + usual - made[k] < REFRESH_S  # the new swap lands before the old one expires
            remakes[k].append(now)
            landing.append((now + usual, k))
    settled = [[t for t in times if t > 2 * REFRESH_S] for times in remakes]  # after the first round
    gaps = [b - a for times in settled for a, b in zip(times, times[1:])]
    assert gaps and statistics.median(gaps) >= 0.85 * REFRESH_S and min(gaps) >= REFRESH_S / 4
    assert all(len(times) >= (seconds - 2 * REFRESH_S) / REFRESH_S - 1 for times in settled)


def test_a_kept_swap_is_due_one_lead_ahead_of_refresh_and_the_lead_is_capped():
    book, face = SwapBook(), _face(0)
    book.merge(Result([face], ["s"], 1.0, 10))
    (swap,) = book.match([face])
    assert not SwapBook.due(swap, 1.0 + REFRESH_S - 0.31, lead_s=0.3)
    assert SwapBook.due(swap, 1.0 + REFRESH_S - 0.29, lead_s=0.3)
    assert not SwapBook.due(swap, 1.1, lead_s=60.0)  # a swap slower than REFRESH_S: not made again at once
    assert not SwapBook.due(None, 10.0, lead_s=0.3)


# ---- in the live engine -------------------------------------------------------------------------


def _pair_clip(path, newton, *, change_from: int | None, frames: int = 60, fps: float = 20.0):
    """Two heads side by side, still (left in colour, right in grey); from frame `change_from` on
    the right one is mirrored — the same place, other pixels (a face that changed)."""
    import cv2

    head = newton[40:296, 260:516]
    grey = cv2.cvtColor(cv2.cvtColor(head, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    gap = np.full((head.shape[0], head.shape[1] // 3, 3), 128, np.uint8)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (640, 480))
    for i in range(frames):
        right = cv2.flip(grey, 1) if change_from is not None and i >= change_from else grey
        frame = np.full((480, 640, 3), 110, np.uint8)
        row = np.hstack([head, gap, right])
        frame[100 : 100 + row.shape[0], 20 : 20 + row.shape[1]] = row
        writer.write(frame)
    writer.release()
    return path


def _recorded_jobs(engine, jobs: list) -> None:
    submit, worker = engine.parts.worker.submit, engine.parts.worker

    def recorded(job):
        jobs.append((worker.swaps, [f.box for f in job.frame_faces]))
        submit(job)

    engine.parts.worker.submit = recorded


def test_a_still_pair_shows_its_swap_as_young_as_the_frame_and_a_face_that_changed_is_swapped_alone(
        live_config, run_live, newton, tmp_path):
    cfg = live_config(swap={"face_selection": "all", "on_miss": "blur"})
    jobs: list = []
    clip = _pair_clip(tmp_path / "pair.avi", newton, change_from=30)
    stats, _, engine = run_live(cfg, clip, frames=400, before_run=lambda e: _recorded_jobs(e, jobs),
                                until=lambda sink: any(swaps >= 1 and len(boxes) == 1 for swaps, boxes in jobs))
    single = [boxes[0] for swaps, boxes in jobs if swaps >= 1 and len(boxes) == 1]
    assert single, f"no job for the changed face alone: {[(s, len(b)) for s, b in jobs]}"
    assert (single[0][0] + single[0][2]) / 2 > 320, "the face in the job of its own is not the right (changed) one"
    assert any(len(boxes) == 2 for _, boxes in jobs)  # the first swap: both faces


def test_swaps_of_faces_that_did_not_change_count_as_young_as_the_frame_shown(live_config, run_live, newton, tmp_path):
    """A still pair: after the first swap nothing changes, no swap is made again for REFRESH_S, and
    the age on screen is the frame's own (the swap shows the faces as that frame does)."""
    cfg = live_config(swap={"face_selection": "all", "on_miss": "blur"})
    jobs: list = []
    stats, _, engine = run_live(cfg, _pair_clip(tmp_path / "still.avi", newton, change_from=None), frames=30,
                                before_run=lambda e: _recorded_jobs(e, jobs))
    age, latency = stats["swap_age_ms"], stats["latency_ms"]
    assert stats["frames"]["swapped"] > 0
    assert age["p50"] <= latency["p95"] + 1.0, (age, latency)


def test_a_still_pair_is_refreshed_before_its_swap_expires_and_its_age_stays_young(live_config, run_live, newton, tmp_path):
    """Past REFRESH_S a still pair's swap is made again; it is asked ahead of REFRESH_S, and every
    frame's age counts from the last frame the kept swap was current for: no frame shows the face
    REFRESH_S old (before: each refresh showed frames 2 s+ old while the new swap was made)."""
    cfg = live_config(swap={"face_selection": "all", "on_miss": "blur"})
    seen: dict[str, int] = {}

    def refreshed_and_after(engine) -> bool:
        ring = engine.parts.stats.swap_age_ms
        if engine.parts.worker.swaps >= 2 and "at" not in seen:
            seen["at"] = ring.count
        return "at" in seen and ring.count >= seen["at"] + 10

    box: dict[str, object] = {}
    stats, _, engine = run_live(cfg, _pair_clip(tmp_path / "still.avi", newton, change_from=None, frames=40), frames=600,
                                before_run=lambda e: box.setdefault("engine", e),
                                until=lambda sink: "engine" in box and refreshed_and_after(box["engine"]))
    ages = engine.parts.stats.swap_age_ms.recent()
    assert "at" in seen, f"no refresh swap within the run ({engine.parts.worker.swaps} swaps)"
    assert float(ages.max()) < REFRESH_S * 1000.0 / 2, sorted(ages)[-5:]
