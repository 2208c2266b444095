"""Loading off the loop (`vcamd.live.loading`): the pipeline build and its warm-up, and what the
loop does meanwhile — frames keep going out, every one covered, none offline.

The loading thread must never hold the interpreter lock for long (the loop and the camera reader
would starve: "camera stalled" at start-up). The `onnx` package was the culprit (its import and a
whole-model parse hold it for seconds), so loading a pipeline must not import it at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest
from support.live import WatchedEvent
from support.waiting import wait_for

from vcamd.common.types import Outcome
from vcamd.config.schema import Config
from vcamd.live.capture.sources import open_source
from vcamd.live.engine import LiveEngine
from vcamd.live.loading import PipelineBuild


def test_loading_the_face_pipeline_never_imports_the_onnx_package(live_config):
    cfg = live_config()
    code = (
        "import json, sys\n"
        "from vcamd.config.reading import config_from_dict\n"
        "from vcamd.live.loading import load_face_pipeline, warm_up_detector\n"
        f"cfg = config_from_dict(json.loads({json.dumps(cfg.model_dump(mode='json'))!r}))\n"
        "faces, providers = load_face_pipeline(cfg, lambda detector: warm_up_detector(detector, cfg, (640, 480)))\n"
        "print(json.dumps({'onnx': sorted(m for m in sys.modules if m == 'onnx' or m.startswith('onnx.')),\n"
        "                  'emap': list(faces.swapper.emap.shape), 'source': faces.source is not None}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"onnx": [], "emap": [512, 512], "source": True}


class _Pipeline:
    """A face pipeline that only records the detector's input sizes."""

    def __init__(self) -> None:
        self.sizes: list[int | None] = []

    def detect(self, frame, input_size=None, threshold=None):
        self.sizes.append(input_size)
        return []


@pytest.mark.parametrize("factory_warms_up", [True, False])
def test_the_detector_is_warmed_up_once_beside_the_load_or_after_it(live_config, factory_warms_up):
    cfg = live_config()
    pipeline, detector = _Pipeline(), _Pipeline()

    def factory(cfg: Config, warm_up):
        if factory_warms_up:
            warm_up(detector)
        return pipeline, {}

    done = threading.Event()
    build = PipelineBuild(factory, lambda apply, what: apply())
    build.start(cfg, (640, 480), loaded=lambda ready: done.set(), failed=lambda generation, exc: pytest.fail(str(exc)))
    assert done.wait(30)
    warmed, idle = (detector, pipeline) if factory_warms_up else (pipeline, detector)
    assert len(warmed.sizes) >= 2 and not idle.sizes  # square crops and the camera's aspect, each size


def test_frames_keep_going_out_covered_while_the_models_load(live_config, clip_20fps, recording_sink, face_engine_factory):
    """Started without a pipeline, the engine publishes at once: every frame obscured whole, none
    offline, for as long as the load takes; then the pipeline is installed and faces are swapped."""
    cfg = live_config()
    gate = threading.Event()

    def slow_factory(cfg: Config, warm_up):
        gate.wait(60)
        return face_engine_factory(cfg), {}

    sink = recording_sink(keep_every=1)
    engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
                        faces=None, pipeline_factory=slow_factory)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("stats", engine.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.blurred] >= 20, what="frames published while loading")
        assert engine.parts.faces is None
        # Every one covered (a camera stall on a starved machine would publish the offline card:
        # no face either; that it does not happen at start-up is measured by `vcamd bench`'s startup).
        outcomes = {outcome for outcome, count in dict(engine.parts.stats.outcomes).items() if count}
        assert outcomes <= {Outcome.blurred, Outcome.offline}, engine.parts.stats.outcomes
        gate.set()
        wait_for(lambda: engine.parts.stats.outcomes[Outcome.swapped] >= 3, what="swapping after the load")
    finally:
        gate.set()
        engine.request_quit()
        thread.join(30)
    startup = result["stats"]["startup_ms"]
    assert startup["first_frame"] is not None and startup["first_swap"] is not None and startup["first_frame"] < startup["first_swap"]


def test_open_publishes_the_starting_card_at_once_and_starts_loading(live_config, clip_20fps, recording_sink):
    """`vcamd run` opens the engine before its control plane: the output gets the "starting" card
    at once and the models start loading; an engine that then never runs is released by close()."""
    from vcamd.common.errors import ModelError
    from vcamd.live.output.placeholder import STARTING_MESSAGE, offline_frame

    cfg = live_config()
    asked, closed = threading.Event(), threading.Event()

    def factory(cfg: Config, warm_up):
        asked.set()
        closed.wait(30)  # still loading when the engine is closed
        raise ModelError("not loaded in this test")

    sink = recording_sink(keep_every=1)
    engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True), sink_factory=lambda w, h, fps: sink,
                        faces=None, pipeline_factory=factory)
    engine.open()
    engine.open()  # once is enough: one card, one load
    assert sink.opened and len(sink.frames) == 1
    np.testing.assert_array_equal(sink.frames[0], offline_frame(*engine.parts.publisher.size, STARTING_MESSAGE))
    assert engine.stats_json()["startup_ms"]["first_frame"] is not None
    assert asked.wait(30), "the models did not start loading at open()"
    engine.close()
    closed.set()
    assert sink.closed and engine.status()["state"] == "stopped"
    engine.close()  # once is enough; again does nothing


class _Shapes:
    """A detector that records the (frame shape, input size) of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], int | None]] = []

    def detect(self, frame, input_size=None, threshold=None):
        self.calls.append((frame.shape[:2], input_size))
        return []


def test_the_install_waits_only_for_the_best_rungs_detector_shapes_the_rest_follow_the_first_swap(live_config):
    """Before the install: the camera frame at the full-detection size and a square crop at the
    tracking size (what the first swap's frames run); the lower rungs' shapes once the first swap
    has landed. Before, every shape was built before the install, on the first swap's way."""
    from vcamd.common.newest import NewestSlot

    cfg = live_config()
    full, track = cfg.detection.size, cfg.detection.track_size
    detector, ready = _Shapes(), []
    build = PipelineBuild(lambda cfg, warm_up: (warm_up(detector), (detector, {}))[1], lambda apply, what: apply())
    build.start(cfg, (1280, 720), loaded=ready.append, failed=lambda generation, exc: pytest.fail(str(exc)))
    wait_for(lambda: ready, "the pipeline built")
    assert detector.calls == [((720, 1280), full), ((64, 64), track)]

    from vcamd.live.loading import warm_rest_after_first_swap, warm_up_pairs

    results: NewestSlot[object] = NewestSlot()
    later = warm_rest_after_first_swap(results, ready[0].warm_rest, current=lambda: True, cap_s=None)
    assert later.is_alive() and len(detector.calls) == 2  # no swap yet: waiting
    results.put(object())  # the first swap lands
    later.join(30)
    every = {(blank.shape[:2], size) for blank, size in warm_up_pairs(cfg, (1280, 720), "all")}
    assert len(every) > 2 and sorted(detector.calls) == sorted(every)  # each shape once


def test_the_rest_is_not_built_for_a_pipeline_replaced_meanwhile():
    from vcamd.common.newest import NewestSlot
    from vcamd.live.loading import warm_rest_after_first_swap

    results: NewestSlot[object] = NewestSlot()
    built: list[bool] = []
    later = warm_rest_after_first_swap(results, lambda: built.append(True), current=lambda: False, cap_s=None)
    results.put(object())
    later.join(30)
    assert not later.is_alive() and built == []


def test_the_rest_waits_for_the_first_swap_to_be_shown_not_only_to_land():
    """The frame that shows the first swap is located and composed while the lower rungs' shapes
    wait: they are built once it went out (`Startup.shown`), not as soon as the result lands."""
    from vcamd.common.newest import NewestSlot
    from vcamd.live.loading import warm_rest_after_first_swap

    results: NewestSlot[object] = NewestSlot()
    shown, built = WatchedEvent(), threading.Event()
    later = warm_rest_after_first_swap(results, built.set, current=lambda: True, cap_s=None, shown=shown)
    results.put(object())  # the first swap lands
    wait_for(lambda: built.is_set() or shown.waited.is_set(), what="the warm-up past the landing")
    assert not built.is_set(), "built as the result landed, before the swap was shown"
    shown.set()  # the first swapped face went out
    later.join(30)
    assert built.is_set()

