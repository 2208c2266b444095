"""A second person comes in beside a tracked face — sliding in from the edge, and later there at
once — and is never published recognisable before a detection has looked at them
(face_selection = "all"; docs/reliability.md, "A newcomer beside a tracked face").

Before `live/tracking/unseen.py` nothing looked for faces between the periodic full detections while the
tracked face was found in its crop: the newcomer was published raw until the next one landed
(4 frames at 15 fps, 12 at 30 fps in benchmarks/newcomer.py). Now what changes away from the known
faces is covered until a detection has looked there.

The real CLI (`leaks.run_daemon_until`) with the stand-in swapper that puts a stranger's real face
on every face it is given; every published frame checked with the real SCRFD and MobileFaceNet at
each place the camera showed the newcomer (`leaks.find_leaks`).
"""

from __future__ import annotations

import pytest

from vcamd.bench import leaks

SIZE = (1280, 720)
FPS = 15.0
SLIDE = [1.12 - 0.05 * i for i in range(9)]
"""The newcomer's centre, frame by frame, sliding in from past the right edge to 72 % (0.6 s)."""
CENTRES = [None] * 15 + SLIDE + [0.72] * 21 + [None] * 15 + [0.72] * 20 + [None] * 10
"""One loop of the camera (6 s): alone, the slide-in, standing beside, gone, there at once, gone."""
PUBLISHED = 2 * len(CENTRES)
"""Two loops: four entries."""
SWAPPED_FACES = 40
"""...and until faces were swapped (the run proves nothing otherwise)."""


@pytest.fixture(scope="module")
def scene(tmp_path_factory, checkers, beside_heads):
    """(work folder, the clip with the newcomer's placements only)."""
    work = tmp_path_factory.mktemp("newcomer")
    both, recognizer = checkers
    frames = leaks.beside_frames(*beside_heads(SIZE[1]), CENTRES, SIZE)
    placements = []
    for centre in dict.fromkeys(c for c in CENTRES if c is not None):  # each place once
        frame = frames[CENTRES.index(centre)]
        placements += [p for p in leaks.placements_in(frame, both, recognizer) if p.face.box[0] > 0.5 * SIZE[0]]
    assert len(placements) >= 3, f"the newcomer should be found at several places of the slide, got {len(placements)}"
    clip = leaks.Clip(leaks.write_clip(work / "camera.avi", frames, FPS), SIZE, FPS, frames, placements)
    return work, clip


def test_a_newcomer_beside_a_tracked_face_is_never_published_recognisable(scene, checkers, stranger, stranger_config):
    work, clip = scene
    both, recognizer = checkers
    cfg = stranger_config(work, swap={"face_selection": "all"})
    published, stats = leaks.run_daemon_until(work, "beside", cfg, clip, frames=PUBLISHED, swapped_faces=SWAPPED_FACES)
    assert stats["faces"]["swapped"] >= SWAPPED_FACES
    found = leaks.find_leaks(published, clip.placements, both[:1], recognizer, swapped_identity=stranger[1])
    frames_raw = sorted({leak.frame for leak in found})
    assert not found, f"the newcomer recognisable in {len(frames_raw)} of {len(published)} frames {frames_raw}:\n" + \
        "\n".join(map(str, found[:10]))
