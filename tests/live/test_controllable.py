"""The control surface (what the control socket and the tray call) on a running engine."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest
import tomli_w
from support.waiting import wait_for

from vcamd.common.errors import ConfigError
from vcamd.common.quality import Level
from vcamd.common.types import Outcome
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine


def test_status_toggle_quality_snapshot_reload_and_quit(tmp_path, live_config, clip_20fps, make_clip, face_engine_factory, recording_sink):
    cfg = live_config()
    config_path = tmp_path / "config.toml"
    config_path.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)))
    other_clip = make_clip("small.avi", fps=20.0, frames=20, size=(320, 240))
    sink = recording_sink(keep_every=1000)
    engine = LiveEngine(
        cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
        faces=face_engine_factory(cfg), config_path=config_path,
        source_factory=lambda camera: open_source(camera.device if camera.device != "0" else str(clip_20fps), camera, loop=True),
    )
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("stats", engine.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 5, what="swapping")
        # status() is a snapshot the loop refreshes every few frames: wait for one with a rate in it.
        wait_for(lambda: engine.status()["fps"] > 0, what="a status snapshot with the frame rate")
        status = engine.status()
        assert status["enabled"] and status["state"] == "running" and status["camera"] == "live"
        # The level is the watchdog's (a busy machine may have lowered it); the rate is the bench's.
        assert status["level"] in {level.name for level in Level} and status["quality"] == "auto"
        assert status["fps"] > 0 and status["config_error"] is None
        assert status["source_face"].endswith("newton.png")

        png = engine.snapshot_png()
        image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
        assert image.shape == (480, 640, 3)

        engine.set_enabled(False)
        off = engine.parts.stats.outcomes[Outcome.off]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.off] >= off + 5, what="raw frames while off")
        engine.set_enabled(True)

        engine.set_quality(Level.frame_skip)
        wait_for(lambda: engine.status()["quality"] == "frame_skip", what="the pinned level")
        engine.set_quality(None)
        wait_for(lambda: engine.status()["quality"] == "auto", what="automatic quality")

        # A broken file fails the reload with its reason, is reported and the running settings stay.
        config_path.write_text("[swap]\non_miss = 'sometimes'\n")
        with pytest.raises(ConfigError, match="on_miss"):
            engine.reload_config()
        assert "on_miss" in engine.status()["config_error"] and engine.cfg.swap.on_miss == "hold"
        # A valid change to [swap] and [camera] applies without a restart: the camera is reopened.
        data = cfg.model_dump(mode="json", exclude_none=True)
        data["swap"]["on_miss"] = "blur"
        data["camera"]["device"] = str(other_clip)
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: engine.cfg.swap.on_miss == "blur", what="the reload")
        assert engine.status()["config_error"] is None
        wait_for(lambda: engine.parts.source.description.endswith("small.avi") and engine.parts.reader.captured > 5, what="the new camera")
    finally:
        engine.request_quit()
        thread.join(10)
    assert not thread.is_alive()
    stats = result["stats"]
    assert stats["frames"]["passthrough"] == 0 and stats["frames"]["off"] >= 5
    assert [t["reason"] for t in stats["degradation"]["transitions"]][:2] == ["manual", "manual"]


@pytest.mark.parametrize("reload_by", ["vcamd reload", "SIGHUP"])
def test_withdrawn_consent_turns_swapping_off_at_once_and_refuses_on_and_set_face(
        reload_by, tmp_path, live_config, clip_20fps, face_engine_factory, recording_sink, assets):
    """[swap] source_consent = false while running: before the fix it waited for a restart, swapping
    stayed on and set-face took a new photo."""
    from vcamd.common.errors import VcamdError

    cfg = live_config()
    config_path = tmp_path / "config.toml"
    data = cfg.model_dump(mode="json", exclude_none=True)
    config_path.write_text(tomli_w.dumps(data))
    sink = recording_sink(keep_every=1000)
    engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
                        faces=face_engine_factory(cfg), config_path=config_path)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()

    def reload() -> None:
        if reload_by == "SIGHUP":
            engine.request_reload()
        else:
            engine.reload_config()

    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 3, what="swapping")
        data["swap"]["source_consent"] = False
        config_path.write_text(tomli_w.dumps(data))
        reload()
        wait_for(lambda: not engine.status()["enabled"], what="swapping off")
        swapped = engine.parts.stats.outcomes[Outcome.swapped]
        off = engine.parts.stats.outcomes[Outcome.off]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.off] >= off + 5, what="frames with swapping off")
        assert engine.parts.stats.outcomes[Outcome.swapped] == swapped
        assert "source_consent" in engine.status()["config_error"]
        for refused in (lambda: engine.set_enabled(True), engine.toggle,
                        lambda: engine.set_source_face(assets / "images" / "newton.png")):
            with pytest.raises(VcamdError, match="consent withdrawn") as caught:
                refused()
            assert "source_consent = true" in caught.value.fix
        assert not engine.status()["enabled"]
        # Given back: the problem is gone and swapping can be switched on again.
        data["swap"]["source_consent"] = True
        config_path.write_text(tomli_w.dumps(data))
        reload()
        wait_for(lambda: engine.status()["config_error"] is None, what="consent given back")
        assert engine.set_enabled(True)["enabled"]
    finally:
        engine.request_quit()
        thread.join(10)
    assert not thread.is_alive()
