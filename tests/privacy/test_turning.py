"""A face that read side-on in a recent look stays covered (`vcamd.privacy.turning.TurnedFaces`).

crowd_selfie's profile at 720p, looked at by SCRFD-500M in crops around it as the tracker cuts them,
reads side-on in most looks and facing in some; each look that read it facing had its swap pasted
on half of it, the rest recognisable (`benchmarks/loop_cost.py`'s crowd row at 720p with that
detector: 7–48 of 48 checked frames before).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from vcamd.bench.clips import fitted_frame
from vcamd.common.types import Face
from vcamd.faces.align import template_points
from vcamd.faces.detect import FaceDetector
from vcamd.inference.runtime import Sessions
from vcamd.privacy.rule import side_on
from vcamd.privacy.turning import TURNED_KEEP_S, TurnedFaces

PROFILE_720P = (258, 435, 283, 469)
"""Where SCRFD-2.5G's whole look at 640 boxes the crowd's profile (crowd_selfie fitted to 1280×720)."""


def _face(kps: np.ndarray) -> Face:
    x0, y0 = kps.min(axis=0) - 10
    x1, y1 = kps.max(axis=0) + 10
    return Face(box=(float(x0), float(y0), float(x1), float(y1)), score=0.9, kps=kps.astype(np.float32))


FACING = template_points(112).astype(np.float64)


def _profile(kps: np.ndarray) -> np.ndarray:
    out = kps.copy()
    for a, b in ((0, 1), (3, 4)):
        middle = (kps[a] + kps[b]) / 2
        out[a], out[b] = middle + (kps[a] - middle) * 0.2, middle + (kps[b] - middle) * 0.2
    return out


def test_a_face_stays_side_on_for_the_keep_time_after_a_look_read_it_so_and_a_neighbour_is_its_own():
    turned, beside = TurnedFaces(), FACING + [400.0, 0.0]
    fps = 30.0
    frames = [(_profile(FACING) if k == 3 else FACING) + [0.2 * k, 0.0] for k in range(int(3 * fps))]
    flags = [turned.update([_face(kps), _face(beside)], k / fps) for k, kps in enumerate(frames)]
    assert all(not f[0] for f in flags[:3])  # facing before the look that read it side-on
    kept = [k for k, f in enumerate(flags) if f[0]]
    assert kept == list(range(3, 3 + int(TURNED_KEEP_S * fps) + 1))  # from that look on, for the keep time, then swapped again
    assert not any(f[1] for f in flags)  # the face beside it was never side-on: its own track
    assert turned.update([], 10.0) == [] and turned.update([_face(FACING)], 10.1) == [False]  # gone and back: a new face


def test_a_side_on_face_missing_for_a_few_frames_is_still_side_on_when_it_comes_back_facing():
    """Lost or unsure for a frame or two (not a target), the face is remembered at its last place: back
    within TURNED_KEEP_S reading facing, it stays covered; back later, it is swapped again."""
    fps = 30.0
    turned = TurnedFaces()
    assert turned.update([_face(_profile(FACING))], 0.0) == [True]
    for k in range(1, 4):
        assert turned.update([], k / fps) == []
    assert turned.update([_face(FACING + [1.0, 0.0])], 4 / fps) == [True]
    later = TurnedFaces()
    later.update([_face(_profile(FACING))], 0.0)
    later.update([], 0.5)
    assert later.update([_face(FACING)], TURNED_KEEP_S + 0.1) == [False]


@pytest.fixture(scope="module")
def profile_looks(assets: Path) -> list[Face]:
    """SCRFD-500M's looks at the profile in crops around it (centres ±6 px, 1.6–2.4× its width, at 64 and 96),
    as the tracker's crop looks see it from frame to frame."""
    detector = FaceDetector(assets / "models" / "scrfd_500m_kps.onnx", Sessions(["cpu"], threads=1))
    frame = fitted_frame(cv2.imread(str(assets / "images" / "crowd_selfie.jpg")), (1280, 720))
    cx, cy = (PROFILE_720P[0] + PROFILE_720P[2]) / 2, (PROFILE_720P[1] + PROFILE_720P[3]) / 2
    width = PROFILE_720P[2] - PROFILE_720P[0]
    looks = []
    for dx in (-6, -2, 2, 6):
        for dy in (-6, 0, 6):
            for scale in (1.6, 2.0, 2.4):
                half = int(width * scale / 2)
                x0, y0 = int(cx + dx) - half, int(cy + dy) - half
                for size in (64, 96):
                    found = [f for f in detector.detect(frame[y0 : y0 + 2 * half, x0 : x0 + 2 * half], size, threshold=0.3)
                             if abs((f.box[0] + f.box[2]) / 2 - (cx - x0)) < 0.6 * width]
                    if found:
                        f = found[0]
                        looks.append(Face(box=(f.box[0] + x0, f.box[1] + y0, f.box[2] + x0, f.box[3] + y0), score=f.score,
                                          kps=(f.kps + np.float32([x0, y0])).astype(np.float32)))
    assert len(looks) >= 40
    return looks


def test_the_crowds_profile_reads_facing_in_some_looks_and_is_covered_in_every_frame_after_its_first_side_on_one(profile_looks):
    alone = side_on(profile_looks)
    assert alone.mean() >= 0.5 and not alone.all()  # one look's keypoints do not say it for sure
    turned = TurnedFaces()
    first = int(np.argmax(alone))
    flags = [turned.update([look], k / 30.0)[0] for k, look in enumerate(profile_looks)]
    assert all(flags[first:])  # frame after frame (a look each), never read facing for a whole second
