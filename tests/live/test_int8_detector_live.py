"""The detector's int8 copy in the live daemon (`vcamd.live.int8upgrade.Int8Upgrade`): calibrated on the source photo and
the camera's frames, checked, then switched to between two frames — the full looks and every crop and tile shape the
tracker runs — with no raw frame; the next start runs it from the first frame. Real SCRFD-2.5G from ../shared/assets."""

from __future__ import annotations

import threading
from pathlib import Path

import cv2
import numpy as np
from support.waiting import wait_for

from vcamd.common.types import Outcome
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine
from vcamd.live.int8upgrade import Int8Built
from vcamd.live.loading import load_face_pipeline

STILL_FRAMES = 80
"""The still camera's frames (4 s at 20 fps, played in a loop)."""


def _still_camera(path: Path, newton: np.ndarray) -> Path:
    """The newton photo fitted into 640×480 as a still camera (MJPG: every frame decodes to the same
    pixels). The copy is calibrated on camera frames taken at the loop's pace: on the sliding clip
    which frames it got changed the copy, and one run's copy failed its check (keypoints 0.101 of
    the face's width off, limit 0.1; the still picture's copy: 0.034). A failing copy leaves float, as
    it must (tests/test_int8_detector.py); here every run calibrates and checks on the same pixels."""
    from vcamd.bench.clips import fitted_frame

    frame = fitted_frame(newton, (640, 480))
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), 20.0, (640, 480))
    assert writer.isOpened()
    for _ in range(STILL_FRAMES):
        writer.write(frame)
    writer.release()
    return path


def _detector(engine) -> tuple[str | None, str]:
    status = engine.status()
    return (status.get("precision") or {}).get("detector"), (status.get("precision_why") or {}).get("detector", "")


def test_the_detector_switches_to_its_checked_int8_copy_for_every_shape_it_runs(
        tmp_path, cache, live_config, newton, recording_sink, monkeypatch, assets):
    from vcamd.faces.detect import letterbox_blob
    from vcamd.inference.runtime import Sessions
    from vcamd.live import int8upgrade
    from vcamd.models.quantize import Job

    asked, release = threading.Event(), threading.Event()
    requests: list[Job] = []

    def held_build(request: Job, stop: threading.Event) -> Int8Built:  # in this process: its result is the real build's
        requests.append(request)
        if request.role == "detector":
            asked.set()
            release.wait(120)
        built = request.run()
        return Int8Built(built.kept.verdict, built.kept.model)

    monkeypatch.setattr(int8upgrade, "build_in_child", held_build)
    model = assets / "models" / "scrfd_2.5g_kps.onnx"
    cfg = live_config(models={"detector": str(model), "precision": "int8"})
    engine = LiveEngine(cfg, source=open_source(str(_still_camera(tmp_path / "still.avi", newton)), cfg.camera, loop=True), sink_factory=lambda w, h, fps: recording_sink(keep_every=1000),
                        faces=None, pipeline_factory=load_face_pipeline)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("stats", engine.run()), daemon=True)
    thread.start()
    try:
        wait_for(asked.is_set, timeout_s=120, what="the detector's int8 build asked for")
        runs, why = _detector(engine)
        assert runs == "float" and "being built" in why
        images = requests[-1].faces.crops  # the source photo letterboxed into the camera's frame, and camera frames
        assert len(images) >= 2 and images[0].shape == images[1].shape == (480, 640, 3)  # the clip is 640×480
        assert requests[-1].looks is not None and requests[-1].looks.size == 320 and requests[-1].looks.track_size == 160
        release.set()
        wait_for(lambda: _detector(engine)[0] == "int8", timeout_s=120, what="the detector on its int8 copy")
        assert "faces found" in _detector(engine)[1]
        faces = engine.parts.faces
        shapes_then = set(faces.detector._sessions_by_hw)
        looked = engine.parts.stats.outcomes[Outcome.swapped]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] > looked + 20, what="swaps on the copy's detections")
    finally:
        release.set()
        engine.request_quit()
        thread.join(30)
    stats = result["stats"]
    assert stats["frames"]["passthrough"] == 0 and stats["precision"]["detector"] == "int8"
    assert any(c["model"] == "detector" and c["to"] == "int8" for c in stats["precision_changes"])
    detector = engine.parts.faces.detector
    assert detector.sessions.runs_copy(model)
    shapes = set(detector._sessions_by_hw)
    assert len(shapes) >= 2 and shapes_then <= shapes  # the full look's shape and crop shapes, all on the copy
    float_sessions = Sessions(["cpu"], 1)
    frame = images[1]
    for hw, session in detector._sessions_by_hw.items():
        blob = letterbox_blob(frame, hw)
        name = session.get_inputs()[0].name
        float_session = float_sessions.get(model) if hw == detector.native_hw else float_sessions.get_resized(model, hw)
        assert not np.array_equal(session.run(None, {name: blob})[0], float_session.run(None, {name: blob})[0]), hw

    # The next start (the copy kept): the detector on int8 from its first look, nothing to build.
    again, _ = load_face_pipeline(cfg)
    assert again.precisions["detector"].runs == "int8" and again.sessions.runs_copy(model)
