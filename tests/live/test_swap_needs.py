"""The daemon runs before the models, consent and a source face are there (issue 42, item 1).

Started without any of them it publishes the camera with swapping off, says what is missing (each
with its fix) in the status, and `on` is refused with the same list; once the missing piece
arrives — model files copied in, consent set in the config and reloaded, a face set — `on` works
without a restart, the models loading in the background as at start-up. Nothing here switches
swapping on by itself; while swapping is on nothing changes (a failed load keeps every frame
covered, never the raw face)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from support.waiting import wait_for

from vcamd.common.errors import ModelError, VcamdError
from vcamd.common.types import Outcome
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine
from vcamd.live.loading import load_face_pipeline
from vcamd.live.readiness import SwapNotReady, look_at_model_files


class Running:
    """An engine on its own thread, stopped at the end of the test."""

    def __init__(self, engine: LiveEngine) -> None:
        self.engine = engine
        self.thread = threading.Thread(target=engine.run, daemon=True)
        self.thread.start()

    def outcomes(self) -> dict:
        return dict(self.engine.parts.stats.outcomes)

    def stop(self) -> None:
        self.engine.request_quit()
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.fixture
def daemon(clip_20fps, recording_sink, tmp_path):
    """`daemon(cfg, consent=, look=)`: a LiveEngine started as `vcamd run` starts it — no face
    pipeline, the real loader and the real look at the model files, the config in a file."""
    running: list[Running] = []

    def start(cfg, *, consent: bool | None = None, pipeline_factory=load_face_pipeline) -> Running:
        config_path = tmp_path / "config.toml"
        config_path.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)))
        sink = recording_sink(keep_every=1000)
        engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
                            faces=None, config_path=config_path, pipeline_factory=pipeline_factory,
                            consent_given=consent, look_at_models=look_at_model_files)
        running.append(Running(engine))
        return running[-1]

    yield start
    for run in running:
        if run.thread.is_alive():
            run.stop()


def topics(engine: LiveEngine) -> list[str]:
    return [need["topic"] for need in engine.status()["swap_needs"]]


def write(path: Path, cfg) -> None:
    path.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)))


@pytest.fixture
def incoming(tmp_path, models):
    """Model paths in a folder that starts empty; `arrive()` copies the stand-ins in (a user
    copying the files in by hand, or a pull finishing)."""
    folder = tmp_path / "incoming"
    folder.mkdir()
    paths = {role: folder / source.name for role, source in models.items()}

    def arrive() -> None:
        for role, source in models.items():
            shutil.copyfile(source, paths[role])

    return {"models": {role: str(path) for role, path in paths.items()}, "arrive": arrive, "paths": paths}


def test_without_the_models_the_camera_goes_out_and_on_works_once_they_arrive(daemon, live_config, incoming):
    # `[swap] enabled = true` (the default) and the models missing: started, swapping off, and why.
    cfg = live_config(models=incoming["models"])
    run = daemon(cfg)
    engine = run.engine
    wait_for(lambda: run.outcomes().get(Outcome.off, 0) >= 10, what="the camera published with swapping off")
    status = engine.status()
    assert status["enabled"] is False and status["config_error"] is None
    assert topics(engine) == ["models"], status["swap_needs"]
    need = status["swap_needs"][0]
    assert str(incoming["paths"]["detector"]) in need["what"] and "no such file" in need["what"]
    assert "[models] detector" in need["fix"]
    # Nothing but the plain camera went out: no swap, no cover, no model ran.
    assert set(k for k, v in run.outcomes().items() if v) <= {Outcome.off, Outcome.starting}
    assert engine.parts.faces is None and status["providers"] == {}

    # `on` is refused with that same list, and swapping stays off.
    with pytest.raises(SwapNotReady) as refused:
        engine.set_enabled(True)
    assert refused.value.needs[0].what == need["what"] and refused.value.fix == need["fix"]
    with pytest.raises(SwapNotReady):
        engine.toggle()
    assert engine.status()["enabled"] is False
    # A photo cannot be read without the models: said as such, not "still loading".
    with pytest.raises(VcamdError, match="not there") as no_models:
        engine.set_source_face(Path(cfg.swap.source_face))
    assert no_models.value.fix == need["fix"]

    # The files arrive; `on` right away works (the look is made when it is asked), no restart:
    # the models load in the background, every frame covered meanwhile, then faces are swapped.
    incoming["arrive"]()
    answer = engine.set_enabled(True)
    assert answer["enabled"] is True and answer["swap_needs"] == []
    wait_for(lambda: run.outcomes().get(Outcome.swapped, 0) >= 3, what="faces swapped after the models arrived")
    assert engine.parts.faces is not None and engine.status()["providers"]
    run.stop()


def test_the_models_load_in_the_background_as_soon_as_their_files_are_there(daemon, live_config, incoming):
    """No `on` needed to load them: the status stops naming them within a look or two, and the
    models are ready when the user switches on."""
    run = daemon(live_config(models=incoming["models"], swap={"enabled": False}))
    engine = run.engine
    wait_for(lambda: topics(engine) == ["models"], what="the models named as missing")
    incoming["arrive"]()
    wait_for(lambda: engine.parts.faces is not None, what="the models loaded after the files arrived")
    assert topics(engine) == [] and engine.status()["enabled"] is False  # loaded, not switched on by it
    assert engine.set_enabled(True)["enabled"] is True
    wait_for(lambda: run.outcomes().get(Outcome.swapped, 0) >= 3, what="faces swapped")
    run.stop()


def test_without_consent_it_runs_swapping_off_until_the_config_gives_it(daemon, live_config):
    cfg = live_config(swap={"source_consent": False})
    run = daemon(cfg)
    engine = run.engine
    wait_for(lambda: engine.parts.faces is not None, what="the models loaded (they are there)")
    assert topics(engine) == ["consent"] and engine.status()["enabled"] is False
    with pytest.raises(SwapNotReady, match="no consent for the source face yet") as refused:
        engine.set_enabled(True)
    assert "source_consent = true" in (refused.value.fix or "") and "--i-have-consent" in refused.value.fix
    with pytest.raises(VcamdError, match="no consent"):
        engine.set_source_face(Path(cfg.swap.source_face))
    # Consent set in the file and reloaded: `on` works, no restart.
    write(engine.config_path, live_config(swap={"source_consent": True}))
    assert engine.reload_config()["swap_needs"] == []
    assert engine.set_enabled(True)["enabled"] is True
    wait_for(lambda: run.outcomes().get(Outcome.swapped, 0) >= 3, what="faces swapped once consent was given")
    run.stop()


def test_consent_on_the_command_line_counts_at_start(daemon, live_config):
    run = daemon(live_config(swap={"source_consent": False}), consent=True)
    wait_for(lambda: run.outcomes().get(Outcome.swapped, 0) >= 3, what="swapping from the start")
    assert topics(run.engine) == []
    run.stop()


def test_without_a_source_face_it_runs_swapping_off_until_one_is_set(daemon, live_config, newton, tmp_path):
    import cv2

    run = daemon(live_config(swap={"source_face": None}))
    engine = run.engine
    wait_for(lambda: engine.parts.faces is not None, what="the models loaded")
    assert topics(engine) == ["face"] and engine.status()["enabled"] is False
    assert engine.status()["config_error"] is None  # not a config problem: a step still to take
    with pytest.raises(SwapNotReady, match="no source face is set") as refused:
        engine.set_enabled(True)
    assert "vcamd set-face PHOTO" in (refused.value.fix or "")
    photo = tmp_path / "me.png"
    cv2.imwrite(str(photo), newton)
    assert engine.set_source_face(photo)["swap_needs"] == []
    assert engine.set_enabled(True)["enabled"] is True
    wait_for(lambda: run.outcomes().get(Outcome.swapped, 0) >= 3, what="faces swapped once a face was set")
    run.stop()


def test_a_deepfacelab_model_needs_no_source_face(daemon, live_config, tmp_path):
    """A `.dfm` swaps in its own trained face: no source face is missing, before its load or after."""
    from vcamd.bench.families import build_family_swapper
    from vcamd.faces.specs import family_named

    dfm = build_family_swapper(tmp_path / "own_identity.dfm", family_named("own_identity.dfm").sized(224))
    run = daemon(live_config(models={"swapper": str(dfm)}, swap={"source_face": None}))
    engine = run.engine
    assert "face" not in topics(engine)  # before the models loaded: told from the config
    wait_for(lambda: run.outcomes().get(Outcome.swapped, 0) >= 3, what="the .dfm model swapping without a source face")
    assert topics(engine) == [] and engine.status()["enabled"] is True
    run.stop()


def test_every_missing_piece_is_listed_and_on_names_them_all(daemon, live_config, incoming):
    run = daemon(live_config(models=incoming["models"], swap={"source_consent": False, "source_face": None}))
    engine = run.engine
    wait_for(lambda: run.outcomes().get(Outcome.off, 0) >= 3, what="frames published")
    assert topics(engine) == ["models", "consent", "face"]
    with pytest.raises(SwapNotReady) as refused:
        engine.set_enabled(True)
    text = str(refused.value)
    assert text.startswith("swapping stays off: it needs 3 things first: (1) ")
    for need in engine.status()["swap_needs"]:
        assert need["what"] in text and need["fix"] in text
    run.stop()


def test_a_failed_first_load_keeps_the_daemon_up_covered_and_is_tried_again_when_the_files_change(
        daemon, live_config, face_engine_factory, incoming):
    """Before: a model that failed to load at start-up ended `vcamd run`. Now the daemon stays up
    and says why; swapping was on, so every frame stays covered (never the raw face); a file
    replaced is loaded again."""
    incoming["arrive"]()
    attempts: list[int] = []

    def factory(cfg, warm_up):
        attempts.append(1)
        if len(attempts) == 1:
            raise ModelError("swapper_light.onnx: a damaged file (test)", fix="copy it in again")
        return face_engine_factory(cfg), {}

    run = daemon(live_config(models=incoming["models"]), pipeline_factory=factory)
    engine = run.engine
    wait_for(lambda: topics(engine) == ["models"], what="the load failure reported")
    need = engine.status()["swap_needs"][0]
    assert "did not load" in need["what"] and "damaged file" in need["what"] and need["fix"] == "copy it in again"
    assert engine.status()["enabled"] is True  # asked for at start: kept, covered
    covered = run.outcomes().get(Outcome.blurred, 0)
    wait_for(lambda: run.outcomes().get(Outcome.blurred, 0) >= covered + 5, what="covered frames after the failure")
    assert set(k for k, v in run.outcomes().items() if v) <= {Outcome.blurred, Outcome.starting, Outcome.offline}
    # The same files: not tried again. A file replaced: loaded again, and swapping follows.
    swapper = incoming["paths"]["swapper"]
    data = swapper.read_bytes()
    swapper.unlink()
    swapper.write_bytes(data)
    wait_for(lambda: run.outcomes().get(Outcome.swapped, 0) >= 3, what="faces swapped after the file was replaced")
    assert len(attempts) == 2 and topics(engine) == []
    run.stop()


def test_with_swapping_off_the_camera_goes_out_as_it_is(daemon, live_config, incoming, clip_20fps):
    """Off means off as everywhere else in the product: the camera's own frame, untouched."""
    from support.video import read_video

    run = daemon(live_config(models=incoming["models"]))
    wait_for(lambda: run.outcomes().get(Outcome.off, 0) >= 3, what="frames with swapping off")
    frame = run.engine.latest_frame()
    camera = read_video(clip_20fps)
    # The nearest frame of the clip, as OpenCV decodes it (the camera's JPEG decoder differs by a
    # level here and there: 0.7 on average); a face obscured or swapped would differ by far more.
    assert min(float(np.abs(frame.astype(np.int16) - c.astype(np.int16)).mean()) for c in camera) < 1.5
    assert run.engine.set_enabled(False)["enabled"] is False  # off is never refused
    run.stop()
