"""The engine's control plane: every change goes through the loop and is answered with the state
after it applied; one toggle; one owner of config_error; a face chosen while models load survives
the rebuild; photos embedded off the control threads and off the loop; status is a snapshot."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import cv2
import pytest
import tomli_w
from support.waiting import wait_for

from vcamd.common.errors import ConfigError, ModelError
from vcamd.common.quality import Level
from vcamd.common.types import Outcome
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine


@pytest.fixture
def other_face(tmp_path, newton) -> Path:
    path = tmp_path / "other_face.png"
    cv2.imwrite(str(path), cv2.flip(newton, 1))
    return path


class Running:
    """A LiveEngine running on its own thread until `stop()`."""

    def __init__(self, engine: LiveEngine) -> None:
        self.engine = engine
        self.result: dict = {}
        self.thread = threading.Thread(target=lambda: self.result.setdefault("stats", engine.run()), daemon=True)
        self.thread.start()
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 3, what="swapping")

    def stop(self) -> dict:
        self.engine.request_quit()
        self.thread.join(15)
        assert not self.thread.is_alive()
        return self.result["stats"]


@pytest.fixture
def start(live_config, clip_20fps, face_engine_factory, recording_sink, tmp_path):
    running: list[Running] = []

    def make(cfg=None, **engine_args) -> Running:
        cfg = cfg or live_config()
        config_path = tmp_path / "config.toml"
        config_path.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)))
        engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True),
                            sink_factory=lambda w, h, fps: recording_sink(keep_every=1000),
                            faces=face_engine_factory(cfg), config_path=config_path, **engine_args)
        running.append(Running(engine))
        return running[-1]

    yield make
    for run in running:
        if run.thread.is_alive():
            run.stop()


def write(path: Path, cfg) -> None:
    path.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)))


def test_every_answer_is_the_state_after_the_change(start, other_face):
    run = start()
    engine = run.engine
    answer = engine.set_source_face(other_face)
    assert answer["source_face"] == str(other_face)  # the new face, not the one before
    assert engine.parts.faces.source.path == other_face
    assert engine.set_quality(Level.low_res)["quality"] == "low_res"
    assert engine.set_quality(None)["quality"] == "auto"
    assert engine.toggle()["enabled"] is False
    assert engine.toggle()["enabled"] is True
    run.stop()


def test_set_face_with_a_group_photo_says_which_face_it_took(start, other_face, assets):
    engine = start().engine
    group = assets / "images" / "solvay_conference_1927.png"
    answer = engine.set_source_face(group)
    assert answer["source_face"] == str(group)
    assert answer["source_face_pick"] == engine.parts.faces.source.which_face()
    # How many of the 29 the detector finds depends on the config's detection size; several, in any case.
    assert engine.parts.faces.source.faces_in_photo > 1
    assert answer["source_face_pick"].startswith(f"the largest of the {engine.parts.faces.source.faces_in_photo} faces in the photo (")
    # Issue 36 item 5: not only in set-face's answer — the status every surface reads says it too
    # (`vcamd status`, the control page's upload answer and its poll, the tray).
    assert engine.status()["source_face_pick"] == answer["source_face_pick"]
    assert engine.set_source_face(other_face)["source_face_pick"] is None  # one face: nothing to say
    assert engine.status()["source_face_pick"] is None


@pytest.mark.parametrize("name, why", [("a\0b.png", "holds a NUL byte"), ("n" * 300 + ".png", "too long for a file name")])
def test_set_face_with_an_impossible_path_says_what_is_wrong_with_it(start, tmp_path, name, why):
    """Issue 36 item 5: the live engine answered "internal error" (ValueError: embedded null byte;
    OSError: File name too long); the old face stays."""
    from vcamd.common.errors import FaceError

    engine = start().engine
    before = engine.status()["source_face"]
    with pytest.raises(FaceError, match=why):
        engine.set_source_face(tmp_path / name)
    assert engine.status()["source_face"] == before


def test_toggles_from_two_threads_never_cancel_out(start):
    """Tray and socket toggles at once: each flips the state the loop has, so 2 × 15 toggles
    leave it where it started (read-then-set from two threads could lose flips)."""
    run = start()
    engine = run.engine
    barrier = threading.Barrier(2)
    answers: list[bool] = []

    def flip() -> None:
        barrier.wait()
        for _ in range(15):
            answers.append(engine.toggle()["enabled"])

    threads = [threading.Thread(target=flip) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert engine.status()["enabled"] is True and len(answers) == 30
    assert answers.count(False) == 15  # every flip landed: half of the answers say off
    run.stop()


def test_a_broken_file_fails_the_reload_with_its_reason_until_fixed(start, live_config):
    run = start()
    engine = run.engine
    engine.config_path.write_text("[swap]\non_miss = 'sometimes'\n")
    with pytest.raises(ConfigError, match="on_miss"):
        engine.reload_config()
    assert "on_miss" in engine.status()["config_error"]
    write(engine.config_path, live_config(swap={"on_miss": "blur"}))
    answer = engine.reload_config()
    assert answer["config_error"] is None and engine.cfg.swap.on_miss == "blur"
    run.stop()


def test_a_failed_model_load_stays_reported_until_fixed(start, live_config, face_engine_factory):
    """One owner of config_error: an unrelated valid edit after a failed load does not clear it."""

    def factory(cfg, warm_up):
        if cfg.models.swapper.endswith("missing.onnx"):
            raise ModelError("swapper missing.onnx not found", fix="vcamd models pull")
        return face_engine_factory(cfg), {}

    run = start(pipeline_factory=factory)
    engine = run.engine
    broken = live_config(models={"swapper": "/nowhere/missing.onnx"})
    write(engine.config_path, broken)
    engine.reload_config()
    wait_for(lambda: "missing.onnx" in (engine.status()["config_error"] or ""), what="the load error")
    # An unrelated, valid edit: the models still did not load, so it stays reported.
    write(engine.config_path, live_config(models={"swapper": "/nowhere/missing.onnx"}, watchdog={"budget_ms": 90.0}))
    answer = engine.reload_config()
    assert engine.cfg.watchdog.budget_ms == 90.0
    wait_for(lambda: "missing.onnx" in (engine.status()["config_error"] or ""), what="the error still reported")
    assert "missing.onnx" in (answer["config_error"] or "")
    # Fixed: the running models are what the file says again, the error is gone.
    write(engine.config_path, live_config(watchdog={"budget_ms": 90.0}))
    assert engine.reload_config()["config_error"] is None
    run.stop()


def test_a_face_chosen_while_models_load_survives_the_rebuild(start, live_config, face_engine_factory, other_face):
    gate = threading.Event()
    built: list = []

    def slow_factory(cfg, warm_up):
        gate.wait(30)
        faces = face_engine_factory(cfg)
        built.append(faces)
        return faces, {"swapper.onnx": "CPUExecutionProvider"}

    run = start(pipeline_factory=slow_factory)
    engine = run.engine
    write(engine.config_path, live_config(detection={"threshold": 0.45}))  # a rebuild
    engine.reload_config()
    assert engine.set_source_face(other_face)["source_face"] == str(other_face)  # while the models load
    gate.set()
    wait_for(lambda: built and engine.parts.faces is built[0], what="the rebuilt pipeline installed")
    wait_for(lambda: engine.parts.faces.source is not None and engine.parts.faces.source.path == other_face, what="the chosen face in the new pipeline")
    assert engine.status()["source_face"] == str(other_face)
    run.stop()


def test_photos_are_embedded_on_the_face_loader_thread(start, other_face):
    run = start()
    engine = run.engine
    real = engine.parts.faces.set_source_face
    threads: list[str] = []

    def recording(path):
        threads.append(threading.current_thread().name)
        return real(path)

    engine.parts.faces.set_source_face = recording
    engine.set_source_face(other_face)
    assert threads == ["face-loader"]
    run.stop()


def test_status_is_a_snapshot_that_costs_the_loop_nothing(live_config, clip_20fps, face_engine_factory, recording_sink):
    cfg = live_config()
    engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True),
                        sink_factory=lambda w, h, fps: recording_sink(), faces=face_engine_factory(cfg))
    calls = []
    real = engine.parts.stats.live_numbers
    engine.parts.stats.live_numbers = lambda **parts: calls.append(1) or real(**parts)
    for _ in range(200):
        engine.status()
    assert calls == []  # no statistics computed for a status request
    engine.set_enabled(False)  # a command refreshes the snapshot once
    assert len(calls) == 1 and engine.status()["enabled"] is False


def test_stats_say_how_live_the_face_is_and_what_each_face_got(live_config, clip_20fps, run_live):
    stats, _, engine = run_live(live_config(), clip_20fps, frames=40)
    faces, frames = stats["faces"], stats["frames"]
    assert set(faces) == {"swapped", "held", "obscured", "unsure", "side_on"} and faces["unsure"] == 0  # largest: no unsure places asked for
    assert faces["swapped"] >= frames["swapped"] > 0  # one face here: at least one per swapped frame
    age = stats["swap_age_ms"]
    assert set(age) == {"p50", "p95"} and 0 < age["p50"] <= age["p95"]
    # A swap is computed on an earlier (or the same) camera frame than the one it is shown on.
    assert age["p50"] >= stats["latency_ms"]["p50"] * 0.5
    status = engine.status()
    assert status["faces"] == faces and set(status["swap_age_ms"]) == {"p50", "p95"}


def test_without_a_source_face_swapping_starts_off_and_says_how_to_set_one(live_config, clip_20fps, run_live, caplog):
    """Before issue 42 swapping started on with every face covered and "no source face" as a
    config error; now it starts off and the status says what is missing and how to set it."""
    cfg = live_config(swap={"source_face": None})
    with caplog.at_level(logging.INFO):
        stats, _, engine = run_live(cfg, clip_20fps, frames=20)
    text = caplog.text
    assert "no source face is set" in text and "vcamd set-face PHOTO" in text
    assert "swap model failed" not in text
    assert stats["frames"]["swapped"] == 0 and stats["frames"]["passthrough"] == 0 and stats["frames"]["off"] == 20
    status = engine.status()
    assert status["config_error"] is None and not status["enabled"]
    assert [need["topic"] for need in status["swap_needs"]] == ["face"]


# ---- one photo lane for every surface (issue 27 item 3) ------------------------------------------


def post_photo(panel, photo: bytes):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", panel.port, timeout=60)
    try:
        conn.request("POST", "/api/face?consent=yes&name=me.png", body=photo,
                     headers={"Authorization": f"Bearer {panel.token}", "Host": f"127.0.0.1:{panel.port}"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_one_photo_lane_for_the_socket_the_page_and_the_engine(start, other_face, newton, tmp_path):
    """Sixteen concurrent page uploads of a small PNG that decodes to 64 MP took the daemon from
    0.5 to 4.5–5.9 GB: the socket read one photo at a time, the page bypassed that lane. Now while
    one photo is being read, every surface is told "busy" at once, and nothing queues a photo."""
    import contextlib
    import tempfile

    from vcamd.common.errors import VcamdError
    from vcamd.config.schema import PanelConfig
    from vcamd.control.client import ControlClient
    from vcamd.control.server import ControlServer
    from vcamd.panel import PanelServer

    run = start()
    engine = run.engine
    real = engine.parts.faces.set_source_face
    reading, release = threading.Event(), threading.Event()

    def slow(path):
        reading.set()
        release.wait(30)
        return real(path)

    engine.parts.faces.set_source_face = slow
    def first_read() -> None:
        with contextlib.suppress(VcamdError):  # "still being read after 8 s" on a busy machine: fine here
            engine.set_source_face(other_face)

    first = threading.Thread(target=first_read, daemon=True)
    first.start()
    assert reading.wait(15)
    runtime = Path(tempfile.mkdtemp(prefix="vl-", dir="/tmp")) / "rt"  # short: a Unix socket path must fit
    with PanelServer(engine, PanelConfig(), faces_dir=tmp_path / "faces") as panel, ControlServer(engine, runtime):
        with pytest.raises(VcamdError, match="busy: another source face photo is being loaded"):
            engine.set_source_face(other_face)  # the tray, in-process
        with pytest.raises(VcamdError, match="busy: another source face photo is being loaded"):
            ControlClient(runtime).set_source_face(other_face)  # `vcamd set-face`
        photo = cv2.imencode(".png", newton)[1].tobytes()
        status, body = post_photo(panel, photo)  # the control page
        assert status == 503 and b"busy: another source face photo" in body
        assert not (tmp_path / "faces").exists() or not list((tmp_path / "faces").iterdir())  # not kept
        release.set()
        first.join(30)
        wait_for(lambda: not engine.photo_lane.busy, what="the lane free once the read ended")
        status, body = post_photo(panel, photo)
        assert status == 200, body
    run.stop()


def test_the_page_never_decodes_a_photo_on_its_own_thread(start, newton, tmp_path, monkeypatch):
    """The page checks an upload from its header only; the one decode happens on the engine's
    face-loader thread, inside the lane (before: a full decode per upload on each HTTP thread)."""
    from vcamd.config.schema import PanelConfig
    from vcamd.panel import PanelServer

    run = start()
    engine = run.engine
    real_imdecode = cv2.imdecode
    decoded_on: list[str] = []

    def recording(*args, **kwargs):
        decoded_on.append(threading.current_thread().name)
        return real_imdecode(*args, **kwargs)

    monkeypatch.setattr(cv2, "imdecode", recording)
    with PanelServer(engine, PanelConfig(), faces_dir=tmp_path / "faces") as panel:
        status, body = post_photo(panel, cv2.imencode(".png", newton)[1].tobytes())
    assert status == 200, body
    assert decoded_on == ["face-loader"]
    run.stop()
