"""Hot reload per section on a running engine: enhancer toggle applies from the next swap, and
output settings reopen the sink — without restarting the engine; a change that fails keeps the
stream, a pinned quality survives an edit."""

from __future__ import annotations

import threading

import tomli_w
from support.live import Wrapped, make_engine
from support.waiting import wait_for

from vcamd.common.quality import Level
from vcamd.common.types import Outcome
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine


def test_enhancer_toggle_and_output_settings_apply_without_restart(
    tmp_path, tmp_path_factory, live_config, clip_20fps, face_engine_factory, recording_sink
):
    from vcamd.bench.standins import build_enhancer

    enhancer = build_enhancer(tmp_path_factory.mktemp("enh") / "gfpgan_light.onnx")
    cfg = live_config(models={"enhancer": str(enhancer)}, enhancer={"enabled": False})
    config_path = tmp_path / "config.toml"
    data = cfg.model_dump(mode="json", exclude_none=True)
    config_path.write_text(tomli_w.dumps(data))
    sinks = []

    def sink_factory(w, h, fps):
        sinks.append(recording_sink(keep_every=1000))
        return sinks[-1]

    faces = face_engine_factory(cfg)
    assert faces.enhancer is None
    engine = LiveEngine(
        cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=sink_factory,
        faces=faces, config_path=config_path,
    )
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("stats", engine.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 3, what="swapping")

        data["enhancer"]["enabled"] = True
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: faces.enhancer is not None, what="the enhancer to switch on")
        assert engine.parts.watchdog.enhancer_enabled
        # The next swaps come out of the enhancer: restored crops are in FFHQ-512 space.
        wait_for(lambda: (r := engine.parts.worker.latest()[0]) is not None and r.swapped and r.swapped[0].template == "ffhq",
                 what="an enhanced swap")
        assert engine.status()["config_error"] is None

        data["enhancer"]["enabled"] = False
        data["virtual_camera"]["name"] = "FaceLive Camera 2"
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: faces.enhancer is None and len(sinks) == 2, what="enhancer off and the sink reopened")
        assert sinks[0].closed and sinks[1].opened and not sinks[1].closed
        published_on_new = len(sinks[1].times)
        wait_for(lambda: len(sinks[1].times) > published_on_new + 5, what="frames on the reopened sink")
    finally:
        engine.request_quit()
        thread.join(10)
    assert not thread.is_alive()
    assert result["stats"]["frames"]["passthrough"] == 0


def test_a_models_change_loads_the_new_pipeline_in_the_background(
    tmp_path, tmp_path_factory, live_config, clip_20fps, face_engine_factory, recording_sink, assets
):
    from vcamd.live.loading import build_face_pipeline

    cfg = live_config()
    config_path = tmp_path / "config.toml"
    data = cfg.model_dump(mode="json", exclude_none=True)
    config_path.write_text(tomli_w.dumps(data))
    built: list = []

    def pipeline_factory(new_cfg, warm_up):
        faces, providers = build_face_pipeline(new_cfg, warm_up)
        built.append(new_cfg)
        return faces, providers()

    sink = recording_sink(keep_every=1000)
    engine = LiveEngine(
        cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
        faces=face_engine_factory(cfg), config_path=config_path, pipeline_factory=pipeline_factory,
    )
    first_faces = engine.parts.faces
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("stats", engine.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 3, what="swapping")
        # A missing model: reported, the running pipeline stays and keeps swapping.
        data["models"]["detector"] = str(tmp_path / "missing.onnx")
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: "missing.onnx" in (engine.status()["config_error"] or ""), what="the load error")
        assert engine.parts.faces is first_faces
        swapped = engine.parts.stats.outcomes[Outcome.swapped]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] > swapped + 5, what="swapping on the old pipeline")
        # An unrelated edit while the models are still missing does not hide the problem.
        data["swap"]["on_miss"] = "blur"
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: engine.cfg.swap.on_miss == "blur", what="the unrelated edit")
        wait_for(lambda: "missing.onnx" in (engine.status()["config_error"] or ""), what="the load error, again")
        # Another real detector: loaded beside the running one, then swapped in.
        data["models"]["detector"] = str(assets / "models" / "scrfd_2.5g_kps.onnx")
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: engine.parts.faces is not first_faces, timeout_s=20, what="the new pipeline")
        assert built[-1].models.detector.endswith("scrfd_2.5g_kps.onnx")
        # The status snapshot is refreshed right after the install's command: wait for it, not a clock.
        wait_for(lambda: "scrfd_2.5g_kps.onnx" in engine.status()["providers"], what="the new models' providers in status")
        assert engine.status()["config_error"] is None
        swapped = engine.parts.stats.outcomes[Outcome.swapped]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] > swapped + 5, what="swapping on the new pipeline")
    finally:
        engine.request_quit()
        thread.join(10)
    assert not thread.is_alive()
    assert result["stats"]["frames"]["passthrough"] == 0


def test_a_face_chosen_at_run_time_survives_unrelated_edits_until_the_file_changes_its_face(
    tmp_path, live_config, clip_20fps, face_engine_factory, recording_sink, assets
):
    cfg = live_config()
    config_path = tmp_path / "config.toml"
    data = cfg.model_dump(mode="json", exclude_none=True)
    config_path.write_text(tomli_w.dumps(data))
    engine = LiveEngine(
        cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=lambda w, h, fps: recording_sink(1000),
        faces=face_engine_factory(cfg), config_path=config_path,
    )
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    chosen = assets / "images" / "solvay_conference_1927.png"
    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 3, what="swapping")
        engine.set_source_face(chosen)  # what `vcamd set-face` and the tray do
        wait_for(lambda: engine.status()["source_face"] == str(chosen), what="the chosen face")

        data["swap"]["on_miss"] = "blur"  # an unrelated edit of the file
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: engine.cfg.swap.on_miss == "blur", what="the unrelated edit")
        assert engine.status()["source_face"] == str(chosen) and engine.parts.faces.source.path == chosen

        own_face = tmp_path / "me.png"
        own_face.write_bytes((assets / "images" / "newton.png").read_bytes())
        data["swap"]["source_face"] = str(own_face)  # the file's own face edited: the file wins
        config_path.write_text(tomli_w.dumps(data))
        engine.reload_config()
        wait_for(lambda: engine.parts.faces.source.path == own_face, what="the file's face")
        assert engine.status()["source_face"] == str(own_face)
    finally:
        engine.request_quit()
        thread.join(10)


def test_a_config_change_that_fails_unexpectedly_does_not_end_the_stream(
    live_config, clip_20fps, face_engine_factory, recording_sink, assets
):
    """apply_config only caught VcamdError from the source-face setter: an ONNX Runtime error while
    embedding the new photo propagated out of the loop and ended `vcamd run`."""
    cfg = live_config()

    def failing_set_source_face(path):
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION (test)")

    faces = Wrapped(face_engine_factory(cfg), set_source_face=failing_set_source_face)
    sink = recording_sink(keep_every=100)
    engine = make_engine(cfg, clip_20fps, faces, sink)
    new = live_config(swap={"source_face": str(assets / "images" / "crowd_selfie.jpg")})
    engine.on_config_change(new)  # applied by the loop, between frames
    stats = engine.run(max_frames=10)
    assert stats["frames"]["published"] == 10
    assert "RUNTIME_EXCEPTION" in (engine.status()["config_error"] or "")


def test_switching_the_enhancer_off_during_a_swap_is_not_a_model_error(live_config, face_engine_factory, newton, tmp_path):
    """swap_faces checked `self.enhancer` and then used it again later: a hot reload switching the
    enhancer off (loop thread) in between made the swap worker fail (None has no enhance_aligned),
    a spurious model error — a miss frame and an error in the log."""
    from vcamd.bench.standins import build_enhancer

    enhancer = build_enhancer(tmp_path / "enhancer.onnx")
    cfg = live_config(enhancer={"enabled": True}, models={"enhancer": str(enhancer)})
    engine = face_engine_factory(cfg)
    assert engine.enhancer is not None
    faces = engine.detect(newton, 320)
    assert faces
    real_swap = engine.swapper.swap

    def swap_while_reload_switches_enhancer_off(crops, latent):
        out = real_swap(crops, latent)
        engine.set_enhancer(False, 0.8)  # what apply_config does on the loop's thread meanwhile
        return out

    engine.swapper.swap = swap_while_reload_switches_enhancer_off
    swapped = engine.swap_faces(newton, faces[:1], Level.full)
    assert len(swapped) == 1 and swapped[0].enhanced  # this swap finishes as it started
    assert engine.enhancer is None
    assert not engine.swap_faces(newton, faces[:1], Level.full)[0].enhanced  # the next one without


def test_a_pinned_quality_survives_an_edit_of_the_watchdog_section(live_config, clip_20fps, face_engine_factory, recording_sink):
    """A [watchdog] edit rebuilt the watchdog and silently dropped the quality the user pinned
    (tray / `vcamd quality low_res`): back to automatic without anyone asking."""
    cfg = live_config()
    engine = make_engine(cfg, clip_20fps, face_engine_factory(cfg), recording_sink(keep_every=100))
    engine.set_quality(Level.low_res)
    engine.on_config_change(live_config(watchdog={"budget_ms": 120.0}))
    engine.run(max_frames=3)
    assert engine.cfg.watchdog.budget_ms == 120.0  # the edit was applied
    assert engine.status()["quality"] == "low_res" and engine.parts.watchdog.level is Level.low_res
