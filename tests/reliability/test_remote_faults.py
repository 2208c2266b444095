"""The swap on a real Triton server (`vcamd serve` on 127.0.0.1) that goes away: killed
mid-run (SIGKILL to all its processes), restarted, absent at start, or replaced by the local
model (`fallback = "local"`). The daemon keeps publishing at the camera's rate, never shows a raw
face (the recording sink compares every published face with the raw camera frame), and swaps on
the server again once it is back.

How fast it swaps again after the server's return is a benchmark row (`vcamd bench --scenarios
remote`), not a timed assertion here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.triton import TritonProcess

from vcamd.tray.view import view_from_status

from .test_live_faults import MAX_GAP_S, STEADY, check_no_leak

pytestmark = pytest.mark.slow


@pytest.fixture
def server(standin_dir: Path, tmp_path: Path):
    """`vcamd serve` of the live tests' stand-in swapper, stopped at the end."""
    config = tmp_path / "server.toml"
    config.write_text(f'[models]\nswapper = "{standin_dir / "swapper.onnx"}"\nproviders = ["cpu"]\nthreads = 1\n')
    process = TritonProcess(config, log=tmp_path / "serve.log")
    yield process
    process.stop()


def server_state(run) -> str | None:
    status = run.engine.status().get("server")
    return None if status is None else status["state"]


def test_server_killed_mid_run_then_back(live, server) -> None:
    server.start().wait_ready()
    run = live(models={"server": server.url}, **STEADY)
    run.wait_swapping(timeout=60)
    assert run.engine.status()["server"]["models"] == {"swapper": "swapper"}
    before = run.counts()
    t_kill = time.monotonic()
    server.kill()
    run.wait_for(lambda: server_state(run) == "away", 10, "the status to show the server away")
    # The tray's status item says so too, from the same status the daemon reports.
    assert f"Server: {server.url} away" in view_from_status(run.engine.status()).detail
    # The outage lasts until held frames are seen (and at least a second): the faces are held, not raw.
    run.wait_for(lambda: run.counts()["held"] > before["held"] + 10 and time.monotonic() - t_kill > 1.0, 30,
                 "held frames while the server is dead")
    during = run.counts()
    # A still face keeps the swap made before the kill (`live.swapbook`: it shows the face as it is,
    # for up to REFRESH_S) until its refresh goes to the dead server and fails; from then on no
    # frame is swapped until the server is back, and no swap is made meanwhile.
    swaps = run.engine.parts.worker.swaps
    run.wait_for(lambda: run.counts()["held"] > during["held"] + 10, 30, "more held frames while the server is dead")
    assert run.counts()["swapped"] == during["swapped"], "frames counted as swapped after the outage was seen"
    assert run.engine.parts.worker.swaps == swaps, "a swap made while the server was dead"
    during = run.counts()
    server.start()
    server.wait_ready()
    t_back = time.monotonic()
    run.wait_for(lambda: run.counts()["swapped"] >= during["swapped"] + 10, 30, "swapping again after the server's return")
    gap = run.sink.max_gap(t_kill, t_back)
    assert server_state(run) == "up"
    assert f"Server: {server.url} up" in view_from_status(run.engine.status()).detail
    stats = run.stop()
    check_no_leak(run, stats)
    assert gap < MAX_GAP_S, f"output paused {gap:.2f} s while the server was away"


def test_fallback_runs_the_local_swapper_while_the_server_is_away(live, server) -> None:
    server.start().wait_ready()
    run = live(models={"server": server.url, "fallback": "local"}, **STEADY)
    run.wait_swapping(timeout=60)
    swapper = run.faces.swapper.session
    run.wait_for(lambda: swapper.ran_remote > 3, 30, "swaps on the server")
    server.kill()
    local_before = swapper.ran_local
    before = run.counts()
    run.wait_for(lambda: swapper.ran_local > local_before + 5 and run.counts()["swapped"] > before["swapped"] + 10, 30,
                 "swapped frames from the local model while the server is away")
    server.start().wait_ready()
    remote_before = swapper.ran_remote
    run.wait_for(lambda: swapper.ran_remote > remote_before + 3, 30, "the server's swapper used again once back")
    stats = run.stop()
    check_no_leak(run, stats)


def test_server_absent_at_start(tmp_path, assets, standin_dir, face_video, server) -> None:
    """`vcamd run`'s path (models loaded in the background): no server yet, so no face pipeline —
    every frame is covered, none raw; once the server runs, the swap starts."""
    from vcamd.live.capture.sources import VideoFileCamera
    from vcamd.live.engine import LiveEngine
    from vcamd.live.loading import load_face_pipeline

    from .conftest import LiveRun, RecordingSink, live_config

    cfg = live_config(tmp_path, assets, standin_dir, face_video, models={"server": server.url}, **STEADY)
    sink = RecordingSink(face_video)
    engine = LiveEngine(cfg, source=VideoFileCamera(face_video.path, loop=True), sink_factory=lambda w, h, fps: sink,
                        faces=None, pipeline_factory=load_face_pipeline)
    run = LiveRun(engine).start()
    run.sink = sink  # type: ignore[attr-defined]
    try:
        run.wait_for(lambda: run.counts()["published"] > 60, 30, "frames published with no server")
        assert run.counts()["swapped"] == 0
        server.start().wait_ready()
        run.wait_swapping(timeout=60)
        assert server_state(run) == "up"
        stats = run.stop()
    finally:
        if run.alive():
            engine.request_quit()
            run.thread.join(8)
    check_no_leak(run, stats)
