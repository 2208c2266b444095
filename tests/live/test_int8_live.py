"""The int8 copies in the live daemon (`vcamd.live.int8upgrade.Int8Upgrade`: the swapper's, the enhancer's, the
parser's; the detector's: test_int8_detector_live.py): built in the background on first use while the float model serves — the first frame and the first swap never
wait for it — switched to between two frames without a raw one, kept for the next start; a copy
that fails its check leaves the float model, and status says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import tomli_w
from support.waiting import wait_for

from vcamd.bench.daemon import DaemonRun
from vcamd.common.types import Outcome
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine
from vcamd.live.int8upgrade import Int8Built
from vcamd.live.loading import load_face_pipeline


def _engine(cfg, clip, sink):
    return LiveEngine(cfg, source=open_source(str(clip), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
                      faces=None, pipeline_factory=load_face_pipeline)


def _run(engine) -> tuple[threading.Thread, dict]:
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("stats", engine.run()), daemon=True)
    thread.start()
    return thread, result


def _swapper(engine) -> tuple[str | None, str]:
    status = engine.status()
    return (status.get("precision") or {}).get("swapper"), (status.get("precision_why") or {}).get("swapper", "")


def test_the_float_model_serves_while_the_int8_copy_is_built_then_the_copy_takes_over(
        tmp_path, cache, live_config, clip_20fps, recording_sink, monkeypatch):
    """The build is held until the engine has published its first frame and its first swapped face
    (a condition, not a timer): neither waited for it. Released, the copy is built and checked for
    real and the swapper switches to it between two frames, with no raw frame."""
    from vcamd.bench.standins import build_swapper
    from vcamd.live import int8upgrade
    from vcamd.models.quantize import Job

    asked, release = threading.Event(), threading.Event()
    requests: list[Job] = []

    def held_build(request: Job, stop: threading.Event) -> Int8Built:
        requests.append(request)
        asked.set()
        release.wait(120)
        built = request.run()
        return Int8Built(built.kept.verdict, built.kept.model)

    monkeypatch.setattr(int8upgrade, "build_in_child", held_build)
    cfg = live_config(models={"swapper": str(build_swapper(tmp_path / "swapper.onnx", heavy_convs=1)), "precision": "int8"})
    sink = recording_sink(keep_every=1000)
    engine = _engine(cfg, clip_20fps, sink)
    thread, result = _run(engine)
    try:
        wait_for(asked.is_set, timeout_s=90, what="the int8 build asked for (calibration faces seen)")
        startup = engine.stats_json()["startup_ms"]
        assert startup["first_frame"] is not None and startup["first_swap"] is not None  # both before the build ends
        runs, why = _swapper(engine)
        assert runs == "float" and "being built" in why
        swapped = engine.parts.stats.outcomes[Outcome.swapped]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] > swapped + 10, what="float swaps while the build waits")
        faces = requests[0].faces
        assert len(faces.crops) >= 2 and faces.crops[0].shape == (128, 128, 3)  # the source photo's face and faces seen
        release.set()
        wait_for(lambda: _swapper(engine)[0] == "int8", timeout_s=120, what="the swapper on its int8 copy")
        assert "PSNR" in _swapper(engine)[1]
        swapped = engine.parts.stats.outcomes[Outcome.swapped]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] > swapped + 10, what="int8 swaps")
    finally:
        release.set()
        engine.request_quit()
        thread.join(30)
    stats = result["stats"]
    assert stats["frames"]["passthrough"] == 0
    assert stats["precision"]["swapper"] == "int8"  # (the detector's copy: tests/live/test_int8_detector_live.py)
    (change,) = [c for c in stats["precision_changes"] if c["model"] == "swapper"]
    assert change["to"] == "int8" and change["after_ms"] > stats["startup_ms"]["first_swap"]
    assert engine.parts.faces.swapper.session is not None and engine.parts.faces.seen is None

    # The next start (the copy kept): on int8 from the first swap, nothing built.
    faces, _ = load_face_pipeline(cfg)
    assert faces.precision.runs == "int8" and not faces.precision.build and faces.sessions.runs_copy(faces.swapper.path)


def test_a_swapper_whose_int8_copy_fails_its_check_stays_float_and_status_says_why(tmp_path, cache, live_config, clip_20fps,
                                                                                    recording_sink):
    """The real background build (a child process), on a stand-in whose activations 8 bits cannot hold."""
    from vcamd.bench.standins import build_unquantizable_swapper

    cfg = live_config(models={"swapper": str(build_unquantizable_swapper(tmp_path / "wide.onnx")), "precision": "int8"})
    engine = _engine(cfg, clip_20fps, recording_sink(keep_every=1000))
    thread, result = _run(engine)
    try:
        wait_for(lambda: "failed the fidelity check" in _swapper(engine)[1], timeout_s=180, what="the check's verdict in status")
        runs, why = _swapper(engine)
        assert runs == "float" and "PSNR" in why
        swapped = engine.parts.stats.outcomes[Outcome.swapped]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] > swapped + 5, what="float swaps after the verdict")
    finally:
        engine.request_quit()
        thread.join(30)
    assert [c for c in result["stats"]["precision_changes"] if c["model"] == "swapper"] == [] and result["stats"]["frames"]["passthrough"] == 0
    # The verdict is kept: the next start runs float at once and builds nothing.
    faces, _ = load_face_pipeline(cfg)
    assert faces.precision.runs == "float" and faces.precision.failed_check and not faces.precision.build


def test_the_enhancer_and_the_parser_get_their_copies_in_the_background_and_a_failed_one_says_why(
        tmp_path, cache, live_config, clip_20fps, recording_sink):
    """The real background builds (a child process each), one role after another: the swapper's and the
    enhancer's copies pass and are switched to; the parser's (a stand-in whose activations 8 bits cannot
    hold) fails, and the parser runs on in float with the reason in status."""
    from vcamd.bench.int8standins import build_conv_parser, build_residual_enhancer
    from vcamd.bench.standins import build_swapper

    enhancer = build_residual_enhancer(tmp_path / "enhancer.onnx")
    parser = build_conv_parser(tmp_path / "wide_parser.onnx", unquantizable=True)
    cfg = live_config(models={"swapper": str(build_swapper(tmp_path / "swapper.onnx", heavy_convs=1)), "enhancer": str(enhancer),
                              "parser": str(parser), "precision": "int8"}, enhancer={"enabled": True})
    engine = _engine(cfg, clip_20fps, recording_sink(keep_every=1000))
    thread, result = _run(engine)

    def shown() -> tuple[dict, dict]:
        status = engine.status()
        return status.get("precision") or {}, status.get("precision_why") or {}

    try:
        wait_for(lambda: "failed the fidelity check" in shown()[1].get("parser", ""), timeout_s=240, poll_s=0.5,
                 what="the parser's verdict in status")
        wait_for(lambda: shown()[0].get("enhancer") == "int8", timeout_s=60, what="the enhancer on its int8 copy")
        runs, why = shown()
        assert runs | {"detector": "-"} == {"detector": "-", "recognizer": "float", "swapper": "int8", "enhancer": "int8", "parser": "float"}
        assert "PSNR" in why["enhancer"] and "changes class" in why["parser"]
        faces = engine.parts.faces
        assert faces.sessions.runs_copy(enhancer) and not faces.sessions.runs_copy(parser)
        swapped = engine.parts.stats.outcomes[Outcome.swapped]
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] > swapped + 5, what="swaps after the switch")
    finally:
        engine.request_quit()
        thread.join(30)
    stats = result["stats"]
    assert stats["frames"]["passthrough"] == 0 and stats["precision"]["enhancer"] == "int8"
    assert [c["model"] for c in stats["precision_changes"] if c["model"] != "detector"] == ["swapper", "enhancer"]


def test_precision_float_builds_nothing_and_says_nothing(cache, live_config, clip_20fps, recording_sink, monkeypatch):
    from vcamd.live import int8upgrade

    monkeypatch.setattr(int8upgrade, "build_in_child", lambda request, stop: pytest.fail("no int8 build with precision = float"))
    engine = _engine(live_config(models={"precision": "float"}), clip_20fps, recording_sink(keep_every=1000))
    thread, result = _run(engine)
    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 5, what="swapping")
        assert engine.status()["precision"] == {"detector": "float", "recognizer": "float", "swapper": "float"}
        assert engine.status()["precision_why"] == {}
    finally:
        engine.request_quit()
        thread.join(30)
    assert not (cache / "int8").exists()


@pytest.mark.slow
def test_vcamd_run_shows_the_precision_in_status_and_stats(tmp_path, live_config, clip_20fps):
    """`vcamd run` as a user runs it: `vcamd status --json` and the stats JSON say what each model
    runs at; the copy is built by the real child process and switched to while it runs."""
    from vcamd.bench.standins import build_swapper

    cfg = live_config(models={"swapper": str(build_swapper(tmp_path / "swapper.onnx", heavy_convs=1)), "precision": "int8"})
    config, stats_path = tmp_path / "config.toml", tmp_path / "stats.json"
    config.write_text(tomli_w.dumps(cfg.model_dump(mode="json", exclude_none=True)))
    runtime = Path(tempfile.mkdtemp(prefix="v8-", dir="/tmp")) / "rt"  # short: a Unix socket path must fit
    env = {"VCAMD_CACHE_DIR": str(tmp_path / "cache")}
    try:
        with DaemonRun(config, clip_20fps, "null", runtime, args=["--stats-json", str(stats_path)], env=env,
                       log=tmp_path / "daemon.log") as run:
            def vcamd(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run([sys.executable, "-m", "vcamd", *args], capture_output=True, text=True, timeout=60,
                                      env={**os.environ, **env, "VCAMD_RUNTIME_DIR": str(runtime)})

            def status() -> dict:
                """What `vcamd status --json` prints ({} before the daemon listens)."""
                assert run.returncode is None, "the daemon exited"
                answer = vcamd("status", "--json")
                return json.loads(answer.stdout) if answer.returncode == 0 else {}

            wait_for(lambda: (status().get("precision") or {}).get("swapper") == "int8", timeout_s=180, poll_s=2.0,
                     what="`vcamd status --json` saying the swapper runs in int8")
            shown = status()
            assert shown["precision"]["recognizer"] == "float" and "PSNR" in shown["precision_why"]["swapper"]
            table = vcamd("status").stdout
            assert "swapper int8" in table and "Precision, why" in table
            run.quit()
    finally:
        shutil.rmtree(runtime.parent, ignore_errors=True)
    stats = json.loads(stats_path.read_text())
    assert stats["precision"]["swapper"] == "int8" and stats["precision_changes"][0]["to"] == "int8"
