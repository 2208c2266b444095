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

import threading
from pathlib import Path

import numpy as np
from support.live import KeepAll
from support.mapping import Case, check_frames, clip_frames, lane_of, make_case, verdicts
from support.waiting import wait_for

from vcamd.bench import leaks
from vcamd.config.reading import config_from_dict
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine
from vcamd.live.loading import load_face_pipeline

FRAMES = 90
FPS = 15.0
PUBLISHED = 150
SWAPPED_FACES = 150
AFTER_EDIT = 60
"""Frames checked after the edited mapping first shows (a pass of the clip and some)."""


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


def test_an_edit_of_the_map_applies_live_and_no_frame_after_it_shows_the_old_mapping(tmp_path: Path, assets: Path, checkers):
    """The two sources swapped in the config while it runs (`[swap] map` rebuilds the face pipeline):
    the new mapping shows, and from its first frame on no frame shows the old one."""
    both, recognizer = checkers
    case: Case = make_case(tmp_path, assets, both[1], recognizer)
    clip = leaks.write_clip(tmp_path / "three.avi", clip_frames(case.heads[:3], FRAMES), FPS)
    data = {**case.config, "camera": {"reopen_interval_s": 0.3, "stall_timeout_s": 0.5}}
    cfg = config_from_dict(data)
    sink = KeepAll()
    engine = LiveEngine(cfg, source=open_source(str(clip), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
                        faces=load_face_pipeline(cfg)[0], pipeline_factory=load_face_pipeline)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()

    def shows(wants: tuple[int, int]) -> tuple[int] | None:
        """(the index of a frame among the newest few whose first two thirds show `wants`,), or None."""
        frames = sink.since(0)
        for i in range(len(frames) - 1, max(-1, len(frames) - 4), -1):
            shown = {lane_of(f): int(np.argmax(case.people @ recognizer.embed(frames[i], f))) for f in both[0].detect(frames[i])}
            if shown.get(0) == wants[0] and shown.get(1) == wants[1]:
                return (i,)
        return None

    try:
        wait_for(lambda: shows((3, 4)), what="the first mapping shown", poll_s=0.5)
        swapped = [{"reference": str(case.photos[0]), "source": str(case.photos[4])},
                   {"reference": str(case.photos[1]), "source": str(case.photos[3])}]
        engine.on_config_change(config_from_dict({**data, "swap": {**data["swap"], "map": swapped}}))
        (first,) = wait_for(lambda: shows((4, 3)), what="the edited mapping shown", poll_s=0.5)
        wait_for(lambda: len(sink.since(first)) >= AFTER_EDIT, what=f"{AFTER_EDIT} frames after the edited mapping showed", poll_s=0.2)
    finally:
        engine.request_quit()
        thread.join(timeout=60)
    after = sink.since(first)
    failures: list[str] = []
    for i, frame in enumerate(after):
        faces = [f for d in both for f in d.detect(frame) if f.score >= 0.5]
        failures += [f"frame {first + i}: {line}" for line in verdicts(frame, faces, recognizer.embed, case.people, [4, 3, None])]
    print(f"\nmapping edited live: new mapping from frame {first}, {len(after)} frames after it checked, {len(failures)} failures")
    assert failures == [], "\n".join(failures[:20])
