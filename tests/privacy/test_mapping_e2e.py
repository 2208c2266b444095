"""End to end, issue 41's face mapping live: the real CLI (`vcamd run --source CLIP --loop --sink
file:OUT`, `leaks.run_daemon_until`) with two `[[swap.map]]` entries, on a clip of three real people
(Newton and two of the Solvay conference, each moving in their own third of the frame; the third,
unmapped, comes in after a fifth of the clip; the first leaves for a sixth of it and comes back),
every published frame checked with both real SCRFD detectors and the real MobileFaceNet: a face
in a mapped person's third shows that person's source or nothing recognisable — never the person
themselves, never the other mapping's source; nothing recognisable in the unmapped person's third
(`[swap] others = "obscure"`). The stand-in swapper returns the source face itself
(`support.mapping`), so which source a face shows is measurable. Both mapped people must be shown
with their source on most frames (a run that covers everything fails)."""

from __future__ import annotations

from pathlib import Path

from support.mapping import Case, check_frames, clip_frames, make_case

from vcamd.bench import leaks
from vcamd.config.reading import config_from_dict

FRAMES = 90
FPS = 15.0
PUBLISHED = 150
SWAPPED_FACES = 150


def test_live_three_people_two_mapped_show_only_their_own_source(tmp_path: Path, assets: Path, checkers):
    both, recognizer = checkers
    case: Case = make_case(tmp_path, assets, both[1], recognizer)
    clip = leaks.Clip(leaks.write_clip(tmp_path / "three.avi", clip_frames(case.heads[:3], FRAMES), FPS), (960, 540), FPS, [], [])
    data = {**case.config, "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5}}
    published, stats = leaks.run_daemon_until(tmp_path, "mapping", config_from_dict(data), clip, frames=PUBLISHED,
                                              swapped_faces=SWAPPED_FACES)
    failures, right = check_frames(published, both, recognizer, case)
    print(f"\nmapping live: {len(published)} frames published, {right} mapped faces shown with their own source, {len(failures)} failures, stats faces {stats['faces']}")
    assert failures == [], "\n".join(failures[:20])
    assert right >= 0.5 * len(published), f"only {right} mapped faces shown with their source in {len(published)} frames"
    assert stats["faces"]["swapped"] >= SWAPPED_FACES
