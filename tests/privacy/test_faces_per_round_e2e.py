"""Two faces, each too old: the watchdog swaps one face per round, and the one it leaves out is
obscured, never shown raw — even with `[swap] others = "show"`, which is for faces the selection
does not swap, not for faces it wants swapped and has no time for (docs/performance.md, "The
watchdog watches the face's age").

The real CLI (`leaks.run_daemon_until`) with the stand-in swapper that pastes a stranger's real face,
`face_selection = "all"` and a swap-age budget of 1 ms (any swap is older: the cap comes on at
the first window, on any machine). Every published frame is checked with the real SCRFD and
MobileFaceNet at both faces' places (`leaks.find_leaks`).
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import insightface
import pytest

from vcamd.bench import leaks, standins
from vcamd.config import config_from_dict

SIZE = (1280, 720)
FPS = 15.0
FRAMES = 45
PUBLISHED = 150
SWAPPED_FACES = 120
"""Faces swapped by the end: at most 30 before the cap (two a frame over a 15-frame window), so
at least 90 frames are published with one face a round."""


@pytest.fixture(scope="module")
def scene(tmp_path_factory, assets: Path, checkers):
    """(work folder, the clip: Newton at 30 % and a second person at 72 % of the width in every frame)."""
    work = tmp_path_factory.mktemp("faces_per_round")
    both, recognizer = checkers

    def head(image, face_px):
        return leaks.head_cut(image, max(both[1].detect(image), key=lambda f: f.area), face_px)

    newton = head(cv2.imread(str(assets / "images" / "newton.png")), SIZE[1] / 3)
    second = head(cv2.imread(str(Path(insightface.__file__).parent / "data" / "images" / "t1.jpg")), SIZE[1] / 4)
    frames = leaks.beside_frames(newton, second, [0.72] * FRAMES, SIZE)
    placements = leaks.placements_in(frames[0], both, recognizer)
    assert len(placements) >= 2, f"both faces should be found in the clip, got {len(placements)} places"
    return work, leaks.Clip(leaks.write_clip(work / "camera.avi", frames, FPS), SIZE, FPS, frames, placements)


def test_the_face_left_out_of_a_round_is_obscured_even_when_others_are_shown(scene, checkers, stranger, assets):
    work, clip = scene
    both, recognizer = checkers
    cfg = config_from_dict({
        "models": {"detector": str(assets / "models" / "scrfd_500m_kps.onnx"),
                   "swapper": str(leaks.build_identity_swapper(work / "stranger.onnx", stranger[0])),
                   "recognizer": str(standins.build_recognizer(work / "recognizer.onnx")), "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True, "face_selection": "all",
                 "others": "show", "on_miss": "blur"},
        "watchdog": {"swap_age_budget_ms": 1.0},
        "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
    })
    published, stats = leaks.run_daemon_until(work, "capped", cfg, clip, frames=PUBLISHED, swapped_faces=SWAPPED_FACES)
    caps = [t for t in stats["degradation"]["transitions"] if "faces_per_round" in t]
    assert caps and caps[0]["faces_per_round"] == {"from": "all", "to": "1"} and caps[0]["reason"] == "swap_age", \
        json.dumps(stats["degradation"]["transitions"], indent=1)[:2000]
    found = leaks.find_leaks(published, clip.placements, both[:1], recognizer, swapped_identity=stranger[1])
    frames_raw = sorted({leak.frame for leak in found})
    assert not found, f"a face recognisable in {len(frames_raw)} of {len(published)} frames {frames_raw}:\n" + \
        "\n".join(map(str, found[:10]))
