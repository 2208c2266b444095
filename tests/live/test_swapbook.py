"""`swapbook.SwapBook`: the newest swap per face, merged from the worker's results, and which faces'
swaps are out of date."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vcamd.common.quality import Level
from vcamd.common.types import Face
from vcamd.live.swapbook import KEEP_UNMATCHED, REFRESH_S, SwapBook


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
    assert SwapBook.current(swap, 10, Level.full, MAKER, now=1.5)  # stable since the swap's frame
    assert SwapBook.current(swap, 4, Level.full, MAKER, now=1.5)  # ... or since before it
    assert not SwapBook.current(swap, 11, Level.full, MAKER, now=1.5)  # changed after it was made
    assert not SwapBook.current(swap, 10, Level.full, MAKER, now=1.0 + REFRESH_S + 0.01)  # made again now and then
    assert not SwapBook.current(None, 0, Level.full, MAKER, now=1.0)


def test_another_pipeline_source_face_or_swap_work_makes_it_out_of_date_detection_rungs_do_not():
    book = SwapBook()
    face = _face(0)
    book.merge(Result([face], ["s"], 1.0, 10, level=Level.no_enhancer))
    (swap,) = book.match([face])
    assert SwapBook.current(swap, 10, Level.low_res, MAKER, now=1.1)  # low_res swaps as no_enhancer does
    assert SwapBook.current(swap, 10, Level.frame_skip, MAKER, now=1.1)
    assert not SwapBook.current(swap, 10, Level.full, MAKER, now=1.1)  # the enhancer is back on
    assert not SwapBook.current(swap, 10, Level.no_enhancer, (object(), SOURCE), now=1.1)  # a rebuilt pipeline
    assert not SwapBook.current(swap, 10, Level.no_enhancer, (PIPELINE, object()), now=1.1)  # another source face


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
