"""A panning crowd at a reduced rung (low_res, frame_skip: detection at half the input size) is never
published with a face shown as the camera showed it (docs/reliability.md, "A newcomer beside a
tracked face"; benchmarks/newcomer_rungs.py, crowd).

There the tracker runs one full detection of each frame at 320 px instead of ~45 crops, and each
such look used to vouch for the whole picture (`live/tracking/unseen.py`): the faces it missed —
a 65-px face cut by the bottom edge, 40-px faces that score 0.6–0.8 at 640 and under 0.5 at 320 —
were neither tracked nor covered, and published raw. Now only a look at the best rung's size
vouches: what changed stays covered until one lands.

The loop's per-frame rule, with the real SCRFD-500M (the engine's detector) on real frames of
crowd_selfie.jpg panned 8 px a frame: each frame's own detection at 320 lands, `UnseenChanges`
says what to cover, `compose` covers it (the faces found: obscured as misses, the stand-in for a
swap). Every face either checker finds (both SCRFD models at 640, at least MIN_FACE_PX wide) must
not be published as the camera showed it and recognised by the real MobileFaceNet.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from vcamd.bench import leaks
from vcamd.config.schema import OnMiss
from vcamd.live.tracking.full import FullDetection
from vcamd.live.tracking.unseen import UnseenChanges
from vcamd.privacy.rule import Scene, compose

SIZE = (1280, 720)
PAN_PX = 8
FRAMES = 4
REDUCED, FULL = 320, 640
"""The full detection's input size at low_res / frame_skip, and at the best rung (`sizes.vouch_size`)."""
MIN_FACE_PX = 40
"""Faces narrower than this are not checked (raw, MobileFaceNet hardly knows them: benchmarks/newcomer_rungs.py)."""
UNCHANGED = 0.5
"""A face is published as the camera showed it when at least this share of its box is unchanged.
(MobileFaceNet alone cannot tell here: on these 40–70-px faces a wholly obscured frame still
scores 0.3–0.6 against the raw face at some of them — measured — so "recognised" counts only
where the pixels are the camera's.)"""


def _pan(crowd: np.ndarray) -> list[np.ndarray]:
    y0 = (crowd.shape[0] - SIZE[1]) // 2
    return [np.ascontiguousarray(crowd[y0 : y0 + SIZE[1], x : x + SIZE[0]]) for x in range(0, PAN_PX * FRAMES, PAN_PX)]


def test_faces_a_reduced_look_missed_are_never_published_raw(assets: Path, checkers):
    both, recognizer = checkers
    detector = both[0]  # scrfd_500m_kps: the engine's
    frames = _pan(cv2.imread(str(assets / "images" / "crowd_selfie.jpg")))
    unseen = UnseenChanges()
    missed_at_reduced, shown = 0, []
    for index, frame in enumerate(frames, 1):
        thumb = unseen.remember(frame, index)
        found = detector.detect(frame, REDUCED)
        unseen.looked([FullDetection(found, index, REDUCED)], vouch_size=FULL)
        out = frame.copy()
        compose(Scene(frame=out, enabled=True, on_miss=OnMiss.blur, known=True, targets=found, swaps=[None] * len(found),
                      unseen=unseen.covers(thumb, found)), lambda *_: None)
        unchanged = np.abs(out.astype(np.int16) - frame).max(axis=2) <= 2
        for p in leaks.placements_in(frame, both, recognizer, MIN_FACE_PX):
            missed_at_reduced += not any(_overlaps(p.face.box, f.box) for f in found)
            x0, y0, x1, y1 = (max(0, int(v)) for v in p.face.box)
            cosine = leaks.recognised_as(recognizer.embed(out, p.face), p.embedding)
            if unchanged[y0:y1, x0:x1].mean() >= UNCHANGED and cosine is not None:
                shown.append(f"frame {index}: {p.face.width:.0f}-px face at x={x0},y={y0} shown raw (cosine {cosine:.2f})")
    assert missed_at_reduced >= FRAMES, "the 320-px detection should miss faces the checkers find (else this proves nothing)"
    assert shown == [], "\n".join(shown)

    # Once the picture holds still, one look at the full size vouches for it: the cover is lifted.
    last = frames[-1]
    unseen.covers(unseen.remember(last, FRAMES + 1), [])
    assert unseen.settled
    unseen.looked([FullDetection(detector.detect(last, FULL), FRAMES + 1, FULL)], vouch_size=FULL)
    assert unseen.covers(unseen.remember(last, FRAMES + 2), []) == []


def _overlaps(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])
