"""Small faces in a big frame: every face the checker recognises is swapped or covered, never left raw.

A crowd photo as a 1080p camera, face_selection "all": the full look runs at [detection] size 640,
÷3 — a 36-px face is 12 px at the detector's input, under SCRFD's smallest anchor, so whether it
is found at all is the detector's luck on that face. With the unsure band from 0.3, the benchmark's
crowd row published one such face raw in every checked frame (SCRFD-2.5G scored it 0.27, the
checker's SCRFD-500M 0.56). The places a look reports — sure faces and unsure ones, both with the
default config — must reach every face the checkers (both real SCRFD models at 0.5, at least 20 px,
`vcamd.bench.leaks.placements_in`) find and the real MobileFaceNet identifies among the crowd
(`Crowd.identified`), with either detector as the product's. Conditions only: the look lands when
it lands.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import pytest

from vcamd.bench.clips import fitted_frame
from vcamd.bench.leaks import Crowd, Placement, load_checkers
from vcamd.common.quality import BEST
from vcamd.common.types import Face, Frame
from vcamd.config.reading import config_from_dict
from vcamd.faces.detect import FaceDetector
from vcamd.inference.runtime import Sessions
from vcamd.live.measures.stats import LiveStats
from vcamd.live.tracking.full import FullDetector
from vcamd.live.tracking.sizes import TrackerSettings
from vcamd.live.tracking.tracker import LiveTracker

RECOGNISABLE_PX = 20
"""The smallest face the benchmarks' raw check counts (benchmarks/loop_cost.py MIN_FACE_PX)."""


@pytest.fixture(scope="module")
def crowd_1080p(assets: Path) -> Frame:
    return fitted_frame(cv2.imread(str(assets / "images" / "crowd_selfie.jpg")), (1920, 1080))


@pytest.fixture(scope="module")
def recognisable(assets: Path, crowd_1080p: Frame) -> list[Placement]:
    """The faces the checkers find and identify among the crowd, as the camera shows them."""
    detectors, recognizer = load_checkers(assets / "models")
    crowd = Crowd.of(crowd_1080p, detectors, recognizer)
    faces = [p for p in crowd.places if p.face.width >= RECOGNISABLE_PX and crowd.identified(p.embedding, p, (0, 0)) is not None]
    assert len(faces) >= 100, len(faces)
    return faces


def _reaches(place: Face, face: Face) -> bool:
    """Whether a reported place covers the face: its centre inside the place's box."""
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    return place.box[0] <= cx <= place.box[2] and place.box[1] <= cy <= place.box[3]


@pytest.mark.parametrize("detector", ["scrfd_2.5g_kps.onnx", "scrfd_500m_kps.onnx"])
def test_every_face_the_checker_recognises_in_a_1080p_crowd_is_swapped_or_covered(assets, crowd_1080p, recognisable, detector):
    product = FaceDetector(assets / "models" / detector, Sessions(["cpu"], threads=1))
    settings = TrackerSettings.of(config_from_dict({"swap": {"face_selection": "all"}}))
    full = FullDetector(product, LiveStats(), time.monotonic)
    full.start()
    tracker = LiveTracker(product, full, full_every=settings.full_every)
    tracker.configure(settings)
    try:
        tracker.locate(crowd_1080p, 1, BEST, deadline_s=30.0)  # no face yet: the whole look is asked for
        for _ in range(3000):  # a bound for a broken thread, not a timing
            if full.idle:
                break
            time.sleep(0.01)
        report = tracker.locate(crowd_1080p, 2, BEST, deadline_s=30.0)
    finally:
        tracker.stop()
        full.stop()
    assert report.full, "the whole look did not land"
    places = report.faces + report.unsure
    raw = [p.face for p in recognisable if not any(_reaches(place, p.face) for place in places)]
    assert not raw, f"{len(raw)} of {len(recognisable)} recognisable faces left raw: " + ", ".join(
        f"x {f.box[0]:.0f}–{f.box[2]:.0f} y {f.box[1]:.0f}–{f.box[3]:.0f}" for f in raw)
