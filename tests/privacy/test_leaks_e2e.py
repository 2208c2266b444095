"""ACCEPTANCE TESTS for issue 8 item 4 (end to end): no recognisable real face is ever published
while swapping is on. Expected to fail against the engine as it was when they were written (a face
that jumps or returns is shown raw for a few frames; a group loses faces), and to pass once the
engine covers every face in every frame (issue 8 item 2).

Each test runs the real CLI — `vcamd run --source CLIP --loop --sink file:OUT.mp4` in a subprocess,
until its status shows enough frames published and enough faces swapped, then `vcamd quit` — on a
clip generated here, and checks EVERY frame of OUT.mp4 with the real SCRFD
detector and the real MobileFaceNet recogniser (vcamd/bench/leaks.py, `find_leaks`): at every
place the clip ever shows a raw face, the published pixels must not match that raw face (cosine
≤ 0.3), and no face SCRFD finds at 0.5 may match the raw person either.

The swapper is a stand-in that returns a stranger's real face (the largest face of
crowd_selfie.jpg), what a perfect swapper would show: a correctly swapped face is a face, of
someone else, so the check tells a swap from a leak. The bare stranger scores ≤ 0.2 against every
raw face here; pasted, it keeps the person's hair and outline, which on the group's 25-px faces
scores up to ~0.3 against the raw person while the face is recognised as the stranger (~0.5): a
face recognised as the stranger at least as well as the raw person is a swap (`find_leaks`). For
the moving-face clips it is made slow (≈ 4 convolutions of busy work per swap) so swaps come late
and misses happen; the stats must show swaps and misses, so a run that never swapped cannot pass
by accident. `test_the_check_finds_raw_faces` runs the same check on the raw clips: it flags them.

Clips (1280×720 for the portrait, the Solvay photo at 720p for the group; lossless FFV1):
- jump: Newton's face a third of the frame high, 6 frames at 30 % of the width, 6 at 70 % (a
  40 %-of-the-width jump between two frames), looped: a jump there or back every 0.4 s;
- vanish: 12 frames at 30 %, 6 of empty grey, 12 at 70 %, 6 of grey, looped: the face returns
  somewhere else every time (present long enough for a swap in between);
- group: the 29-face Solvay photo as a still camera with face_selection = "all".
"""

from __future__ import annotations

from pathlib import Path

import cv2
import pytest

from vcamd.bench import leaks, standins
from vcamd.config.reading import config_from_dict

FPS = 15.0
PORTRAIT_FRAMES = 36
"""Published frames per portrait run at least: 2.4 s: five or six jumps, or two vanishings and returns."""
PORTRAIT_SWAPS = 12
"""...and the run goes on until this many frames showed the face swapped: swaps on both sides of
the jumps, however late the first swap lands on a busy machine."""
GROUP_FPS = 10.0
GROUP_FRAMES = 30
"""3 s at least: long enough for the watchdog to lower the detection size."""
GROUP_SWAPS = 5 * 29
"""...and until five frames' worth of group faces were swapped (the first swaps of 29 faces land
seconds later on a busy CPU; a run without them proves nothing)."""
SLOW_CONVS = 2
"""Busy work in the portrait runs' swapper: ≈ 20 ms per swap on one idle core, far more on a busy one."""
DAEMON_DETECTOR = "scrfd_500m_kps.onnx"
"""The daemon's detector. (With scrfd_2.5g the engine before the split leaked under `hold` more
often, its tracker being late, but an engine that covers everything then rarely swapped within
the run on a busy 2-core machine, and a run without swaps proves nothing.)"""
QUICK_WATCHDOG = {"window": 5, "cooldown_s": 0.3}
"""The group run lets the watchdog act within the run's 3 s (a user may set this too): 29 faces are
over budget on a CPU, so it lowers the detection size, and faces too small for it are lost."""


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("leaks")


@pytest.fixture(scope="module")
def newton(assets: Path, checkers):
    both, _ = checkers
    image = cv2.imread(str(assets / "images" / "newton.png"))
    (face,) = both[1].detect(image)
    return image, face


@pytest.fixture(scope="module")
def clips(work: Path, newton, assets: Path, checkers) -> dict:
    both, recognizer = checkers
    image, face = newton
    portrait = dict(size=(1280, 720), fps=FPS, face_height=1 / 3, detectors=both, recognizer=recognizer)
    solvay = cv2.imread(str(assets / "images" / "solvay_conference_1927.png"))
    h, w = solvay.shape[:2]
    group = cv2.resize(solvay, (round(w * 720 / h) // 2 * 2, 720), interpolation=cv2.INTER_AREA)
    return {
        "jump": leaks.portrait_clip(work / "jump.avi", image, face, [0.3] * 6 + [0.7] * 6, **portrait),
        "vanish": leaks.portrait_clip(work / "vanish.avi", image, face, [0.3] * 12 + [None] * 6 + [0.7] * 12 + [None] * 6, **portrait),
        "group": leaks.still_clip(work / "group.avi", group, frames=20, fps=GROUP_FPS, detectors=both, recognizer=recognizer),
    }


def _run(work: Path, name: str, clip, swapper: Path, recognizer: Path, assets: Path, *, frames: int, swapped_faces: int,
         watchdog: dict | None = None, **swap) -> tuple[list, dict]:
    """`vcamd run` on `clip` until it published `frames` frames and `swapped_faces` swapped faces
    (`leaks.run_daemon_until`); returns every published frame and the run's stats."""
    cfg = config_from_dict({
        "watchdog": watchdog or {},
        "models": {"detector": str(assets / "models" / DAEMON_DETECTOR), "swapper": str(swapper),
                   "recognizer": str(recognizer), "providers": ["cpu"], "threads": 1},
        "swap": {"source_face": str(assets / "images" / "newton.png"), "source_consent": True, **swap},
        "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5},
    })
    return leaks.run_daemon_until(work, name, cfg, clip, frames=frames, swapped_faces=swapped_faces)


def _assert_no_leak(published, clip, stats, checkers, stranger) -> None:
    both, recognizer = checkers
    check_with = both[:1]  # scrfd_500m checks every frame (both placed the raw faces)
    counts = stats["frames"]
    misses = sum(counts.get(k, 0) for k in ("held", "blurred", "obscured"))
    # Swaps must have been published, or the run proves nothing. Per face where the stats say it
    # (issue 8 item 6: a frame with one face swapped and a lost one held counts as held).
    swapped = stats.get("faces", {}).get("swapped", counts["swapped"])
    assert swapped > 0, f"no face was swapped: the run proves nothing (frames {counts}, faces {stats.get('faces')})"
    found = leaks.find_leaks(published, clip.placements, check_with, recognizer, swapped_identity=stranger[1])
    print(f"\n{clip.path.stem}: {len(published)} frames checked, frames {counts}, faces {stats.get('faces')}, {len(found)} leaks")
    per_frame = {i: sum(1 for leak in found if leak.frame == i and "in place" in leak.how) for i in sorted({leak.frame for leak in found})}
    assert not found, (
        f"raw faces published in {len(per_frame)} of {len(published)} frames (frame: raw faces recognised in place "
        f"{per_frame}; stats {counts}, misses {misses}):\n" + "\n".join(map(str, found[:12]))
    )


@pytest.fixture(scope="module")
def models(work: Path, stranger) -> dict[str, Path]:
    return {
        "slow": leaks.build_identity_swapper(work / "stranger_slow.onnx", stranger[0], slow_convs=SLOW_CONVS),
        "light": leaks.build_identity_swapper(work / "stranger_light.onnx", stranger[0]),
        "recognizer": standins.build_recognizer(work / "recognizer.onnx"),
    }


@pytest.mark.parametrize("on_miss", ["hold", "blur"])
@pytest.mark.parametrize("clip_name", ["jump", "vanish"])
def test_a_face_that_jumps_or_vanishes_and_returns_is_never_published_raw(work, clips, models, checkers, stranger, assets, clip_name,
                                                                          on_miss):
    clip = clips[clip_name]
    published, stats = _run(work, f"{clip_name}-{on_miss}", clip, models["slow"], models["recognizer"], assets,
                            frames=PORTRAIT_FRAMES, swapped_faces=PORTRAIT_SWAPS, on_miss=on_miss)
    _assert_no_leak(published, clip, stats, checkers, stranger)


@pytest.mark.parametrize("on_miss", ["hold", "blur"])
def test_no_face_of_a_group_is_ever_published_raw(work, clips, models, checkers, stranger, assets, on_miss):
    clip = clips["group"]
    assert len(clip.placements) == 29
    published, stats = _run(work, f"group-{on_miss}", clip, models["light"], models["recognizer"], assets,
                            frames=GROUP_FRAMES, swapped_faces=GROUP_SWAPS, watchdog=QUICK_WATCHDOG, on_miss=on_miss,
                            face_selection="all")
    _assert_no_leak(published, clip, stats, checkers, stranger)


def test_the_check_finds_raw_faces(work, clips, checkers, stranger):
    """The same check on the raw clips, after the file sink's own MP4 encoding: every frame that
    shows a face is flagged, each raw face is recognised in place, so the tests above can fail."""
    from vcamd.sinks.file import FileSink

    both, recognizer = checkers
    check_with = both[:1]  # scrfd_500m checks every frame (both placed the raw faces)
    for name in ("jump", "vanish", "group"):
        clip = clips[name]
        sample = clip.frames[::4]
        sink = FileSink(work / f"raw-{name}.mp4", clip.size[0], clip.size[1], clip.fps)
        sink.open()
        for frame in sample:
            sink.send(frame)
        sink.close()
        encoded = leaks.read_video(work / f"raw-{name}.mp4")
        found = leaks.find_leaks(encoded, clip.placements, check_with, recognizer, swapped_identity=stranger[1])
        with_face = [i for i, frame in enumerate(sample) if (frame != leaks.BACKGROUND).any()]
        assert sorted({leak.frame for leak in found}) == with_face, name
        in_place = {(leak.frame, leak.how) for leak in found if "in place" in leak.how}
        assert len(in_place) >= 0.9 * len(with_face) * (len(clip.placements) if name == "group" else 1), name
