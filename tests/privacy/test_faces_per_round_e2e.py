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

import pytest

from vcamd.bench import leaks

SIZE = (1280, 720)
FPS = 15.0
FRAMES = 45
PUBLISHED = 150
SWAPPED_FACES = 120
"""Faces swapped by the end: at most 30 before the cap (two a frame over a 15-frame window), so
at least 90 frames are published with one face a round."""


@pytest.fixture(scope="module")
def scene(tmp_path_factory, checkers, beside_heads):
    """(work folder, the clip: Newton at 30 % and a second person at 72 % of the width in every frame)."""
    work = tmp_path_factory.mktemp("faces_per_round")
    both, recognizer = checkers
    frames = leaks.beside_frames(*beside_heads(SIZE[1]), [0.72] * FRAMES, SIZE)
    placements = leaks.placements_in(frames[0], both, recognizer)
    assert len(placements) >= 2, f"both faces should be found in the clip, got {len(placements)} places"
    return work, leaks.Clip(leaks.write_clip(work / "camera.avi", frames, FPS), SIZE, FPS, frames, placements)


def test_the_face_left_out_of_a_round_is_obscured_even_when_others_are_shown(scene, checkers, stranger, stranger_config):
    work, clip = scene
    both, recognizer = checkers
    cfg = stranger_config(work, swap={"face_selection": "all", "others": "show"}, watchdog={"swap_age_budget_ms": 1.0})
    published, stats = leaks.run_daemon_until(work, "capped", cfg, clip, frames=PUBLISHED, swapped_faces=SWAPPED_FACES)
    caps = [t for t in stats["degradation"]["transitions"] if "faces_per_round" in t]
    assert caps and caps[0]["faces_per_round"] == {"from": "all", "to": "1"} and caps[0]["reason"] == "swap_age", \
        json.dumps(stats["degradation"]["transitions"], indent=1)[:2000]
    found = leaks.find_leaks(published, clip.placements, both[:1], recognizer, swapped_identity=stranger[1])
    frames_raw = sorted({leak.frame for leak in found})
    assert not found, f"a face recognisable in {len(frames_raw)} of {len(published)} frames {frames_raw}:\n" + \
        "\n".join(map(str, found[:10]))
