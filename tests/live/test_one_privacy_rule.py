"""The camera and `vcamd swap` share one privacy rule (`vcamd.privacy.rule.compose`): a test that
changes the rule changes both. The change here is a rule that pastes no swap (every face it is told
of counts as a miss): with it, the live engine publishes no swapped frame and `vcamd swap`'s
`FaceEngine.process_frame` swaps no face and leaves no raw one; without it, both swap."""

from __future__ import annotations

import dataclasses

import numpy as np

from vcamd.privacy import rule


def _a_rule_that_pastes_no_swap(calls: list[str]):
    original = rule.compose

    def changed(scene, paste, painter=None):
        calls.append("called")
        return original(dataclasses.replace(scene, swaps=[None] * len(scene.swaps)), paste, painter)

    return changed


def _face_pixels(frame: np.ndarray, face) -> np.ndarray:
    x0, y0, x1, y1 = (int(v) for v in face.box)
    return frame[y0:y1, x0:x1]


def test_vcamd_swap_follows_the_rule_the_camera_follows(live_config, face_engine_factory, newton, monkeypatch) -> None:
    engine = face_engine_factory(live_config())
    as_is = engine.process_frame(newton.copy())
    assert as_is.swapped == 1
    face = as_is.faces[0]

    calls: list[str] = []
    monkeypatch.setattr(rule, "compose", _a_rule_that_pastes_no_swap(calls))
    changed = engine.process_frame(newton.copy())
    assert calls == ["called"]
    assert changed.swapped == 0, "vcamd swap pasted a swap the rule did not"
    # The face became a miss: obscured (the rule's cover), neither swapped nor raw.
    assert not np.array_equal(_face_pixels(changed.frame, face), _face_pixels(newton, face))
    assert not np.array_equal(_face_pixels(changed.frame, face), _face_pixels(as_is.frame, face))


def test_the_camera_follows_the_rule_vcamd_swap_follows(live_config, clip_20fps, run_live, monkeypatch) -> None:
    cfg = live_config()
    engines: list = []

    def swapped_frames(_sink) -> bool:
        return bool(engines) and engines[0].status()["frames"]["swapped"] >= 3

    stats, _, _ = run_live(cfg, clip_20fps, frames=3000, before_run=engines.append, until=swapped_frames)
    assert stats["frames"]["swapped"] >= 3, stats["frames"]

    calls: list[str] = []
    monkeypatch.setattr(rule, "compose", _a_rule_that_pastes_no_swap(calls))
    engines.clear()
    stats, _, _ = run_live(cfg, clip_20fps, frames=60, before_run=engines.append)
    assert len(calls) >= 50, "the live loop did not ask the one rule"
    assert stats["frames"]["swapped"] == 0 and stats["faces"]["swapped"] == 0, stats
    assert stats["frames"]["passthrough"] == 0 and stats["frames"]["held"] + stats["frames"]["blurred"] > 0, stats["frames"]
