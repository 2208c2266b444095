"""Steady faces (vcamd/live/tracking/smoothing.py): the One-Euro filter of each tracked face's position
quiets a still head's shimmer, follows a moving one, starts afresh on a jump or a new face; and
the live engine pastes the filtered position."""

from __future__ import annotations

import numpy as np
from support.live import Wrapped

from vcamd.common.types import Face
from vcamd.config.schema import SmoothingConfig
from vcamd.live.tracking.smoothing import MAX_LAG_WIDTHS, FaceSmoother

FPS = 30.0
ON = SmoothingConfig()


def moved(face: Face, dx: float, dy: float = 0.0, rng: np.random.Generator | None = None, noise: float = 0.0) -> Face:
    """`face` shifted by (dx, dy), each keypoint and box corner jittered by `noise` px (std)."""
    jitter = rng.normal(0.0, noise, (7, 2)) if rng is not None else np.zeros((7, 2))
    x1, y1, x2, y2 = face.box
    kps = (face.kps + np.float32([dx, dy]) + jitter[:5]).astype(np.float32)
    return Face(box=(x1 + dx + jitter[5, 0], y1 + dy + jitter[5, 1], x2 + dx + jitter[6, 0], y2 + dy + jitter[6, 1]),
                score=face.score, kps=kps)


def centre(face: Face) -> np.ndarray:
    return face.kps.mean(axis=0)


def eye_distance(face: Face) -> float:
    return float(np.linalg.norm(face.kps[1] - face.kps[0]))


def run(smoother: FaceSmoother, faces: list[Face], cfg: SmoothingConfig = ON, start: int = 0) -> list[Face]:
    return [smoother.steady([f], (start + i) / FPS, cfg)[0] for i, f in enumerate(faces)]


SHIMMER = 0.004
"""The detector's keypoint noise on a still head, as a share of the face's width (SCRFD-2.5G on a
noisy 720p portrait: ~1 px on a 285-px face; benchmarks/steady.py)."""


def test_a_still_noisy_face_is_steadied(newton_face):
    rng = np.random.default_rng(3)
    raw = [moved(newton_face, 0, 0, rng, noise=SHIMMER * newton_face.width) for _ in range(90)]
    out = run(FaceSmoother(), raw)
    raw_steps = np.linalg.norm(np.diff([centre(f) for f in raw[30:]], axis=0), axis=1)
    out_steps = np.linalg.norm(np.diff([centre(f) for f in out[30:]], axis=0), axis=1)
    assert np.percentile(out_steps, 95) < 0.3 * np.percentile(raw_steps, 95)
    assert np.std([eye_distance(f) for f in out[30:]]) < 0.4 * np.std([eye_distance(f) for f in raw[30:]])
    # ... and stays where the face is (no drift: the mean position is the true one)
    assert np.linalg.norm(np.mean([centre(f) for f in out[30:]], axis=0) - centre(newton_face)) < 0.5


def test_a_moving_face_is_followed_without_lag_and_without_overshoot(newton_face):
    speed, pan, still = 8.0, 40, 30
    raw = [newton_face] * 10 + [moved(newton_face, speed * (i + 1)) for i in range(pan)]
    raw += [raw[-1]] * still
    out = run(FaceSmoother(), raw)
    xs_raw = np.array([centre(f)[0] for f in raw])
    xs_out = np.array([centre(f)[0] for f in out])
    lag = xs_raw[12 : 10 + pan] - xs_out[12 : 10 + pan]
    assert 0.0 <= lag.mean() <= 1.5, lag
    assert (xs_out[10 + pan :] - xs_raw[-1]).max() <= 0.5  # never past where it stopped
    assert abs(xs_out[-1] - xs_raw[-1]) < 0.1  # settled where it stopped
    # a step (a quick nod of 20 px, under a jump): followed within a few frames
    step = [newton_face] * 20 + [moved(newton_face, 0, 20.0)] * 10
    ys = np.array([centre(f)[1] for f in run(FaceSmoother(), step)])
    assert abs(ys[24] - centre(step[-1])[1]) < 1.0


def test_the_filtered_face_never_strays_from_the_detected_one(newton_face):
    """Whatever the settings, the paste stays on the face (MAX_LAG_WIDTHS of its width)."""
    sluggish = SmoothingConfig(min_cutoff_hz=0.01, beta=0.0)
    raw = [newton_face] * 5 + [moved(newton_face, 3.0 * (i + 1)) for i in range(30)]
    out = run(FaceSmoother(), raw, sluggish)
    limit = MAX_LAG_WIDTHS * newton_face.width + 1e-3
    assert all(np.abs(o.kps - r.kps).max() <= limit for o, r in zip(out, raw))
    assert np.abs(out[-1].kps - raw[-1].kps).max() > 0.9 * limit  # the guard, not the filter, held it


def test_a_jump_a_new_face_or_a_gap_starts_afresh(newton_face):
    smoother = FaceSmoother()
    rng = np.random.default_rng(4)
    run(smoother, [moved(newton_face, 0, 0, rng, SHIMMER * newton_face.width) for _ in range(20)])
    # a jump of 0.3 face widths (the same track, as the tracker may report after a fast move)
    jumped = moved(newton_face, 0.3 * newton_face.width)
    out = smoother.steady([jumped], 20 / FPS, ON)[0]
    np.testing.assert_array_equal(out.kps, jumped.kps)
    assert smoother.resets == 1
    # the tracker says this face appeared (a new identity where the last one was): unfiltered
    other = moved(jumped, 2.0, 1.0)
    assert smoother.steady([other], 21 / FPS, ON, appeared=[other])[0] is other
    # not seen for a second: its old position says nothing any more
    later = moved(other, 3.0, 0.0)
    out = smoother.steady([later], 21 / FPS + 1.0, ON)[0]
    np.testing.assert_array_equal(out.kps, later.kps)
    # a second face beside the first gets its own filter, from where it is
    beside = moved(newton_face, 2.0 * newton_face.width)
    both = smoother.steady([later, beside], 22 / FPS + 1.0, ON)
    assert both[1] is beside


def test_off_gives_the_tracker_s_faces_and_a_settled_still_face_keeps_its_object(newton_face):
    smoother = FaceSmoother()
    faces = [newton_face]
    assert smoother.steady(faces, 0.0, SmoothingConfig(enabled=False))[0] is newton_face
    # an unchanged detection (the tracker followed a still face: the same object) settles into
    # one output object, so the loop replays its paste instead of pasting anew
    outs = [smoother.steady(faces, i / FPS, ON)[0] for i in range(5)]
    assert all(o is outs[0] for o in outs)


def test_the_engine_pastes_the_filtered_position(live_config, tmp_path, newton, newton_face, run_live):
    """A still face whose detections shimmer (the detector wrapped to jitter them by SHIMMER of the
    face's width): with smoothing on, the places the engine pastes the face at move much less from
    one frame to the next, and spread no more.

    Both runs must see the same detections, so that only the smoothing differs between them: the
    watchdog's budget is out of reach. On a busy machine it lowered the level in one run and not
    the other (or halfway through one), and the detector at low_res places this face elsewhere —
    its crops at 128 ~0.6 px to the right, the tracker's full-frame detection at 160 (chosen when
    it costs less than the crops) 3.5 px higher — so the runs compared detector sizes, not the
    filter (spread ratios 0.27–1.5 from run to run)."""
    from vcamd.bench.clips import write_sliding_clip
    from vcamd.common.quality import Level

    x1, y1, x2, y2 = (int(v) for v in newton_face.box)
    pad = int(0.6 * newton_face.width)
    head = newton[max(0, y1 - pad) : y2 + pad, max(0, x1 - pad) : x2 + pad]
    clip = write_sliding_clip(tmp_path / "still.avi", head, size=(640, 480), fps=20.0, frames=10, step_px=0)
    shimmer, spread = {}, {}
    for enabled in (False, True):
        rng = np.random.default_rng(9)
        pasted: list[Face] = []

        def wrap(faces, rng=rng, pasted=pasted):
            def detect(frame, *args, **kw):
                return [moved(f, 0.0, 0.0, rng, noise=SHIMMER * f.width) for f in faces.detect(frame, *args, **kw)]

            def composite(frame, swapped, face, **kw):
                pasted.append(face)
                return faces.composite(frame, swapped, face, **kw)

            return Wrapped(faces, detect=detect, composite=composite)

        cfg = live_config(smoothing={"enabled": enabled}, watchdog={"budget_ms": 1000.0})
        # Every frame detected (not followed by its pixels: a followed face keeps its detection's
        # place, and its paste is put back unchanged), so every frame's paste is a filtered detection.
        _, _, engine = run_live(cfg, clip, frames=600, wrap=wrap, until=lambda sink, p=pasted: len(p) >= 100,
                                before_run=lambda engine: setattr(engine.parts.tracker, "follow_motion", False))
        assert len(pasted) >= 100
        assert engine.parts.watchdog.level is Level.full  # the detector's sizes of the other run
        centres = np.array([centre(f) for f in pasted[20:]])
        shimmer[enabled] = float(np.sqrt(np.mean(np.sum(np.diff(centres, axis=0) ** 2, axis=1))))
        spread[enabled] = float(np.linalg.norm(centres.std(axis=0)))
    assert shimmer[False] > 0.3  # px from one paste to the next (rms): the shimmer is there to be filtered
    # The paste stands still: the steps from frame to frame are filtered away (0.20–0.26 of the
    # raw ones here) ...
    assert shimmer[True] < 0.5 * shimmer[False], shimmer
    # ... not traded for a wander. With the filter's ~1 s time constant these 4 s hold only a few
    # independent positions, so the spread's ratio varies more (0.35–0.56 here, 0.44–0.53 in a
    # simulation of the filter alone).
    assert spread[True] < 0.8 * spread[False], spread
