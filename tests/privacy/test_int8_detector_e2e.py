"""The privacy rule end to end with the detector's int8 copy in use — what a user gets by default
(`[models] precision = "auto"` with SCRFD-2.5G: its checked int8 copy finds the faces).

The other end-to-end privacy tests run SCRFD-500M, whose int8 copy gains too little to be kept (the
copy's speed rule, `vcamd.inference.detectcheck`): their detector is float. Here the daemon runs
SCRFD-2.5G at precision "auto" with its copy already built and checked in the run's cache folder, as
an earlier start would have left it (`vcamd.bench.scenarios.prepare_detector_int8`: calibrated on the
source photo and frames of the newcomer's clip, checked at the config's looks), once for the module.
Each run first shows the copy really was the detector, from the first frame to the last (its stats
say int8 and no switch of the detector's precision), then every published frame is checked as the
other leak tests check it (`leaks.find_leaks`, the real SCRFD and MobileFaceNet): no raw face is
recognisable where the camera showed one.

The cases a quantised detector puts at risk: small faces (the 29-face group photo, ~25-px faces, a
scene the copy was not calibrated on), a newcomer sliding in beside a tracked face and later there at
once (the looks between full detections), and a face moving (sliding across the frame, then jumping
back: crop looks at new places). The real CLI (`leaks.run_daemon_until`), the stand-in swapper that
pastes a stranger's real face; each run goes on until faces were swapped, never for a time.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import pytest

from vcamd.bench import leaks
from vcamd.bench.clips import fitted_frame

DETECTOR = "scrfd_2.5g_kps.onnx"
SIZE = (1280, 720)
FPS = 15.0
NEWCOMER = [None] * 8 + [round(1.12 - 0.05 * i, 2) for i in range(9)] + [0.72] * 10 + [None] * 8 + [0.72] * 10
"""The newcomer's centre, frame by frame (× the width): alone, sliding in from past the right edge,
standing beside, gone, there at once (3 s a loop)."""
MOVING = [0.3 + 0.04 * i for i in range(11)] + [0.7] * 4 + [0.3] * 4
"""The face's centre: sliding 0.3 → 0.7 of the width (51 px a frame), held, then back at once."""


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("int8-detector-e2e")


@pytest.fixture(scope="module")
def clips(work: Path, assets: Path, checkers, beside_heads) -> dict[str, leaks.Clip]:
    both, recognizer = checkers
    newton = cv2.imread(str(assets / "images" / "newton.png"))
    (face,) = both[1].detect(newton)
    frames = leaks.beside_frames(*beside_heads(SIZE[1]), NEWCOMER, SIZE)
    newcomer = leaks.placements_in(frames[0], both, recognizer)  # the tracked face, alone
    assert len(newcomer) == 1, newcomer
    for centre in dict.fromkeys(c for c in NEWCOMER if c is not None):  # each place once (rounded: 0.72 is one place)
        frame = frames[NEWCOMER.index(centre)]
        newcomer += [p for p in leaks.placements_in(frame, both, recognizer) if p.face.box[0] > 0.5 * SIZE[0]]
    assert len(newcomer) >= 4, f"the newcomer should be found at 3 or more places of the slide, got {len(newcomer) - 1}"
    group = fitted_frame(cv2.imread(str(assets / "images" / "solvay_conference_1927.png")), SIZE)
    return {
        "newcomer": leaks.Clip(leaks.write_clip(work / "newcomer.avi", frames, FPS), SIZE, FPS, frames, newcomer),
        "group": leaks.still_clip(work / "group.avi", group, frames=10, fps=FPS, detectors=both, recognizer=recognizer),
        "moving": leaks.portrait_clip(work / "moving.avi", newton, face, MOVING, size=SIZE, fps=FPS, face_height=1 / 4,
                                      detectors=both, recognizer=recognizer),
    }


@pytest.fixture(scope="module")
def int8_run(work: Path, assets: Path, clips, stranger_config):
    """(the daemon's config, env): SCRFD-2.5G at precision "auto", face_selection "all", its int8 copy
    built, checked and kept in a cache folder of the module's own, which the daemon is pointed at."""
    from vcamd.bench.scenarios import prepare_detector_int8

    cache = work / "cache"
    cfg = stranger_config(work, models={"detector": str(assets / "models" / DETECTOR), "precision": "auto"},
                          swap={"face_selection": "all"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VCAMD_CACHE_DIR", str(cache))
        copy = prepare_detector_int8(cfg, clips["newcomer"].path, FPS)
    assert copy["passed"], f"the int8 copy of {DETECTOR} failed its check here, so no run below would use it: {copy['summary']}"
    return cfg, {"VCAMD_CACHE_DIR": str(cache)}


def _run_on_the_copy(work: Path, name: str, int8_run, clip: leaks.Clip, *, frames: int, swapped_faces: int) -> list:
    """The daemon on `clip` until `frames` published and `swapped_faces` swapped; asserts the detector
    ran its int8 copy throughout; returns the published frames."""
    cfg, env = int8_run
    published, stats = leaks.run_daemon_until(work, name, cfg, clip, frames=frames, swapped_faces=swapped_faces, env=env)
    assert stats["precision"].get("detector") == "int8", f"the detector ran {stats['precision']}: {stats.get('precision_why')}"
    switches = [c for c in stats.get("precision_changes", []) if c.get("model") == "detector"]
    assert not switches, f"the detector's precision changed during the run: {switches}"
    assert stats["faces"]["swapped"] >= swapped_faces
    return published


def _assert_none_recognisable(published: list, clip: leaks.Clip, checkers, stranger) -> None:
    both, recognizer = checkers
    found = leaks.find_leaks(published, clip.placements, both[:1], recognizer, swapped_identity=stranger[1])
    frames_raw = sorted({leak.frame for leak in found})
    assert not found, f"raw faces recognisable in {len(frames_raw)} of {len(published)} frames {frames_raw}:\n" + \
        "\n".join(map(str, found[:12]))


def test_small_faces_of_a_group_photo_are_never_shown_raw_on_the_int8_detector(work, int8_run, clips, checkers, stranger):
    clip = clips["group"]
    assert len(clip.placements) >= 25, len(clip.placements)  # the group's small faces, found by the checkers
    published = _run_on_the_copy(work, "group", int8_run, clip, frames=15, swapped_faces=3 * 25)
    _assert_none_recognisable(published, clip, checkers, stranger)


def test_a_newcomer_is_never_shown_raw_on_the_int8_detector(work, int8_run, clips, checkers, stranger):
    clip = clips["newcomer"]
    published = _run_on_the_copy(work, "newcomer", int8_run, clip, frames=2 * len(NEWCOMER), swapped_faces=30)
    _assert_none_recognisable(published, clip, checkers, stranger)


def test_a_moving_face_is_never_shown_raw_on_the_int8_detector(work, int8_run, clips, checkers, stranger):
    clip = clips["moving"]
    published = _run_on_the_copy(work, "moving", int8_run, clip, frames=2 * len(MOVING), swapped_faces=20)
    _assert_none_recognisable(published, clip, checkers, stranger)
