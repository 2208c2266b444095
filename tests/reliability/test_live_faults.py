"""Fault injection against the running live engine (LiveEngine.run on its thread, real SCRFD,
real FaceEngine with the light stand-in swapper, a real video file as the camera).

Each test: reach steady swapping, inject one fault for ~1-2 s, clear it, and check
- the engine kept publishing during the fault (largest gap between published frames),
- it recovered by itself (fresh swapped frames again, the engine thread alive),
- no raw face was published while swapping was on (RecordingSink compares every published face
  centre with the raw camera frame it came from; `passthrough` stays 0 in the stats).
"""

from __future__ import annotations

import time

import pytest

from vcamd.config.schema import OnMiss

pytestmark = pytest.mark.slow

MAX_GAP_S = 0.5
"""Longest allowed pause in the output while a fault lasts (the camera's cadence is 33 ms; the
offline placeholder starts after `stall_timeout_s` = 0.4 s in these runs)."""

FAULT_S = 1.5
FLAT_STD = 12.0
"""Grey-level spread of the face box below which a published face is flat: what a NaN crop
becomes after the uint8 conversion (a real or swapped face spreads > 30)."""

STEADY = {"watchdog": {"budget_ms": 1000.0, "swap_age_budget_ms": 0.0}}
"""A generous budget and no swap-age budget keep the watchdog at full quality, so every fault hits
the stage it targets (with the enhancer on, a degraded level would skip the enhancer and hide its
fault; a hung swap makes the face old)."""


def inject(run, start, clear, seconds: float = FAULT_S, until=None, what: str = "") -> tuple[float, float]:
    """Reach steady swapping, run `start()`, let the fault last `seconds` — and, with `until`, for
    as long as it takes that condition to be seen while it lasts — then run `clear()`; returns
    (t_fault, t_clear)."""
    run.wait_swapping()
    run.before_fault = run.counts()
    t_fault = time.monotonic()
    start()
    time.sleep(seconds)
    if until is not None:
        run.wait_for(until, 10.0, what)
    t_clear = time.monotonic()
    clear()
    return t_fault, t_clear


def recovered(run, t_clear: float, timeout: float = 8.0) -> float:
    """Fresh swapped frames after the fault cleared; returns how long recovery took."""
    before = run.counts()["swapped"]
    run.wait_for(lambda: run.counts()["swapped"] >= before + 10, timeout, "swapping to resume after the fault")
    return time.monotonic() - t_clear


def check_no_leak(run, stats: dict) -> None:
    leaks = run.sink.leaks()
    assert not leaks, f"{len(leaks)} raw faces published while swapping was on, e.g. {leaks[:3]}"
    assert stats["frames"]["passthrough"] == 0, stats["frames"]


def test_baseline_swaps_and_never_leaks(live) -> None:
    run = live(**STEADY)
    run.wait_swapping()
    t0 = time.monotonic()
    run.wait_for(lambda: len(run.sink.since(t0)) > 30, 30, "30 frames published in steady swapping")
    # The gap is measured up to the moment the frames were counted, not to a fixed t0 + 1.5: a
    # fast run has its 30 frames by t0 + 1.0, stops, and a fixed window would count the time after
    # the stop as a pause in the output.
    t_counted = time.monotonic()
    stats = run.stop()
    check_no_leak(run, stats)
    sink = run.sink
    mads = [r.mad for r in sink.records if r.mad is not None]
    assert len(mads) > 20, "the barcode must be readable in published frames"
    # The leak check must be able to see a leak: the raw frame compared with itself.
    assert sink.video.centre_mad(sink.video.raw(3), 3) == 0.0
    assert min(mads) > 5 * 3.0, f"every published face is far from the raw one (min MAD {min(mads):.1f})"
    assert stats["frames"]["swapped"] > 20
    assert sink.max_gap(t0, t_counted) < MAX_GAP_S
    # The NaN checks below call a face "flat" under FLAT_STD; real swapped faces never are. (The
    # start-up frames before the first swap are obscured with a coarse mosaic: flatter by design.)
    stds = [r.face_std for r in sink.since(t0)]
    assert min(stds) > 2 * FLAT_STD, f"min face std {min(stds):.1f}"
    print(f"baseline: face-centre MAD vs raw min {min(mads):.1f}, face std min {min(stds):.1f}, frames {stats['frames']}")


# ---- the camera -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["stopped", "noise", "black", "bigger", "smaller", "bgra", "gray", "tiny", "empty"])
def test_camera_fault(live, faulty_camera, mode: str) -> None:
    run = live(source=faulty_camera, **STEADY)
    t_fault, t_clear = inject(run, lambda: setattr(faulty_camera, "mode", mode), lambda: setattr(faulty_camera, "mode", "ok"))
    gap = run.sink.max_gap(t_fault, t_clear)
    recovery_s = recovered(run, t_clear)
    stats = run.stop()
    check_no_leak(run, stats)
    assert gap < MAX_GAP_S, f"output paused {gap:.2f} s while the camera was {mode}"
    if mode == "stopped":
        assert stats["frames"]["offline"] > 0, "the offline frame was published while the camera was gone"
        assert faulty_camera.opens >= 2, "the camera was reopened by itself"
    print(f"camera {mode}: max gap {gap * 1000:.0f} ms, recovered in {recovery_s:.2f} s, frames {stats['frames']}")


# ---- the models -----------------------------------------------------------------------------------

SESSION_FILES = {"swapper": "swapper.onnx", "detector": "scrfd_500m_kps.onnx", "enhancer": "enhancer.onnx"}


SESSION_FAULTS = [
    pytest.param(model, fault, id=f"{model}-{fault}")
    for model in ("swapper", "detector", "enhancer")
    for fault in ("raise", "hang", "nan")
]


@pytest.mark.parametrize(("model", "fault"), SESSION_FAULTS)
def test_session_fault(live, model: str, fault: str) -> None:
    faults: dict = {"hang_s": 2.0}
    sections = dict(STEADY)
    # max_result_age_s < the hang: a stalled swap model must stop counting as fresh (on_miss applies)
    sections["swap"] = {"max_result_age_s": 1.0}
    if model == "enhancer":
        sections["enhancer"] = {"enabled": True, "strength": 1.0}
    run = live(faults=faults, **sections)
    name = SESSION_FILES[model]
    # A failed swap, or one stalled past max_result_age_s, is a miss: on_miss = hold shows the last
    # good output (checked for leaks below) instead of a fresh swap. A stalled swap is stale only
    # max_result_age_s after the last result that came before the stall — up to one swap job into
    # the fault, longer on a busy machine — so the fault lasts until held frames are seen.
    misses = fault in ("raise", "nan") or (fault == "hang" and model != "detector")
    t_fault, t_clear = inject(run, lambda: faults.__setitem__(name, fault), lambda: faults.__setitem__(name, "ok"),
                              until=(lambda: run.counts()["held"] > run.before_fault["held"]) if misses else None,
                              what=f"held frames while the {model} session {fault}s")
    during = run.counts()
    gap = run.sink.max_gap(t_fault, t_clear)
    recovery_s = recovered(run, t_clear)
    stats = run.stop()
    check_no_leak(run, stats)
    assert gap < MAX_GAP_S, f"output paused {gap:.2f} s while the {model} session {fault}ed"
    if misses:
        assert during["held"] > run.before_fault["held"], f"no held frames during the fault: {run.before_fault} → {during}"
    if fault == "nan":
        # A NaN model output is a miss, never a face: no frame of the fault window may show the
        # flat, colourless face a NaN crop turns into after the uint8 conversion.
        window = [r for r in run.sink.since(t_fault + 0.3) if r.t <= t_clear]
        flat = [r for r in window if r.face_std < FLAT_STD]
        assert not flat, f"{len(flat)} frames published a NaN-filled face (face std {[round(r.face_std, 1) for r in flat[:5]]})"
    print(f"{model} {fault}: max gap {gap * 1000:.0f} ms, recovered in {recovery_s:.2f} s, counts at clear {during}, final {stats['frames']}")


def test_swapper_model_that_always_returns_nan_never_counts_as_swapped(live, tmp_path, standin_dir) -> None:
    # A real ONNX model (run by ONNX Runtime, no wrapper) whose output is NaN: every swap "succeeds"
    # with garbage. None of it may be published as a swapped face.
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_model(str(standin_dir / "swapper.onnx"))
    last = model.graph.node[-1]
    assert list(last.output) == ["output"]
    last.output[0] = "before_nan"
    model.graph.node.append(helper.make_node("Mul", ["before_nan", "nan_scale"], ["output"]))
    emap = model.graph.initializer.pop()  # `emap` must stay the last initializer
    model.graph.initializer.append(numpy_helper.from_array(np.array(np.nan, np.float32), "nan_scale"))
    model.graph.initializer.append(emap)
    path = tmp_path / "nan_swapper.onnx"
    onnx.save_model(model, str(path))
    run = live(models={"swapper": str(path)}, **STEADY)
    run.wait_for(lambda: run.counts()["published"] > 60, 15, "frames")
    stats = run.stop()
    check_no_leak(run, stats)
    assert stats["frames"]["swapped"] == 0, f"NaN swaps were published as swapped faces: {stats['frames']}"
    flat = [r for r in run.sink.records if r.face_std < FLAT_STD]
    assert not flat, f"{len(flat)} frames show a NaN-filled face"


# ---- the virtual camera -----------------------------------------------------------------------------


def test_sink_write_fails_for_a_while(live, caplog) -> None:
    import logging

    caplog.set_level(logging.WARNING, logger="vcamd")
    run = live(**STEADY)
    sink = run.sink
    run.wait_swapping()
    sink.fail_for(45)
    # Conditions, not clocks: on a busy machine 45 frames take longer than 1.5 s to be published.
    run.wait_for(lambda: sink.failed == 45, 60, "the 45 injected write failures to be hit")
    t_clear = time.monotonic()
    run.wait_for(lambda: len(sink.since(t_clear)) >= 10, 30, "frames reaching the sink again")
    after = len(sink.since(t_clear))
    print(f"sink fails: 10 frames reached the sink {time.monotonic() - t_clear:.2f} s after the last failure")
    stats = run.stop()
    check_no_leak(run, stats)
    assert sink.failed == 45, "every injected failure reached the sink"
    assert after >= 10, "frames reach the sink again once writes succeed"
    assert stats["frames"]["published"] > 45 + after
    # A device failing at 30 fps for an hour must not write 100 000 log lines: the streak is
    # reported, not every frame of it (as the swap worker does for model errors).
    lines = [r for r in caplog.records if "sink write failed" in r.getMessage()]
    assert len(lines) <= 5, f"{len(lines)} log lines for one streak of 45 failed writes"


def test_virtual_camera_write_fails_then_reopens(live, recording, tmp_path) -> None:
    # The real VirtualCameraSink (retry, drop, close and reopen after a streak) in front of a
    # "device" whose writes fail 45 times in a row.
    from vcamd.config.schema import VirtualCameraConfig
    from vcamd.sinks.virtual import VirtualCameraSink

    device = tmp_path / "video-test"
    device.touch()
    frames = recording.sink()
    opened = []

    def factory(width, height, fps, dev, backend):
        opened.append(dev)
        return recording.camera(frames)

    sink = VirtualCameraSink(VirtualCameraConfig(device=str(device)), 480, 270, 30.0, camera_factory=factory, system="Linux")
    run = live(sink=sink, **STEADY)
    run.sink = frames  # what reached the "device"
    run.wait_swapping()
    frames.fail_for(45)
    run.wait_for(lambda: frames.failed == 45, 60, "the 45 injected device failures to be hit")
    t_clear = time.monotonic()
    run.wait_for(lambda: len(frames.since(t_clear)) >= 10, 30, "frames reaching the device again after the reopen")
    stats = run.stop()
    check_no_leak(run, stats)
    counters = {"write_failures": sink.write_failures, "frames_dropped": sink.frames_dropped, "reopens": sink.reopens}
    assert counters["write_failures"] >= 45 and counters["frames_dropped"] > 0, counters
    assert counters["reopens"] >= 1 and len(opened) >= 2, f"the device was reopened after the streak: {counters}"
    assert len(frames.since(t_clear)) >= 10, "frames reach the device again"
    print(f"virtual camera: {counters}, 10 frames reached the device {time.monotonic() - t_clear:.2f} s after the last failure")


# ---- the source face -------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["deleted", "not-an-image", "zero-size"])
def test_source_face_file_breaks_while_running(live, tmp_path, assets, fault: str) -> None:
    import shutil

    from vcamd.common.errors import FaceError

    face = tmp_path / "me.png"
    shutil.copy(assets / "images" / "newton.png", face)
    run = live(swap={"source_face": str(face)}, **STEADY)
    run.wait_swapping()
    t_fault = time.monotonic()
    if fault == "deleted":
        face.unlink()
    elif fault == "not-an-image":
        face.write_text("not a photo any more")
    else:
        face.write_bytes(b"")
    with pytest.raises(FaceError) as info:
        run.engine.set_source_face(face)  # what `vcamd set-face` and the tray call
    assert str(face) in str(info.value)
    run.wait_swapping()  # still swapping with the identity it had
    assert run.engine.status()["enabled"]
    # The file comes back: setting it works again.
    shutil.copy(assets / "images" / "newton.png", face)
    run.engine.set_source_face(face)
    run.wait_swapping()
    gap = run.sink.max_gap(t_fault, time.monotonic())
    stats = run.stop()
    check_no_leak(run, stats)
    assert gap < MAX_GAP_S
    print(f"source face {fault}: max gap {gap * 1000:.0f} ms, frames {stats['frames']}")


# ---- the config file --------------------------------------------------------------------------------


def _write_config(path, cfg) -> None:
    import tomli_w

    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None}
        return value

    tmp = path.with_suffix(".tmp")
    tmp.write_text(tomli_w.dumps(clean(cfg.model_dump(mode="json"))))
    tmp.replace(path)


@pytest.fixture
def watched(live, live_cfg, tmp_path):
    """A live run whose config file is watched as `vcamd run` watches it: a ConfigWatcher calling
    the engine's `on_config_change` / `on_config_error` (polling every 0.1 s instead of 0.5 s)."""
    from vcamd.live.reload import ConfigWatcher

    path = tmp_path / "config.toml"
    cfg = live_cfg(**STEADY)
    _write_config(path, cfg)
    run = live(config=cfg, config_path=path)
    watcher = ConfigWatcher(path, run.engine.on_config_change, run.engine.on_config_error, interval=0.1, current=cfg).start()
    run.config_file, run.cfg, run.watcher = path, cfg, watcher
    yield run
    watcher.close()


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ("[swap\nenabled = true\n", "TOML"),
        ("[camera]\nfps = -5\n", "fps"),
        ("[swap]\non_miss = \"show-everything\"\n", "on_miss"),
        ("[swap]\nsource_face = 42\n", "source_face"),
    ],
    ids=["invalid-toml", "bad-fps", "bad-on-miss", "bad-type"],
)
def test_config_edited_into_something_broken(watched, broken: str, expected: str) -> None:
    run = watched
    run.wait_swapping()
    t_fault = time.monotonic()
    run.config_file.write_text(broken)
    run.wait_for(lambda: run.engine.status()["config_error"], 4.0, "the config error to show in status")
    error = run.engine.status()["config_error"]
    assert expected in error and "config.toml" in error, error
    run.wait_swapping()  # still running on the last good config
    _write_config(run.config_file, run.cfg)  # the user fixes it
    t_fixed = time.monotonic()
    run.wait_for(lambda: run.engine.status()["config_error"] is None, 4.0, "the config error to clear")
    cleared_s = time.monotonic() - t_fixed
    run.wait_swapping()
    gap = run.sink.max_gap(t_fault, time.monotonic())
    stats = run.stop()
    check_no_leak(run, stats)
    assert gap < MAX_GAP_S
    print(f"config {expected}: max gap {gap * 1000:.0f} ms, error cleared {cleared_s:.2f} s after the fix, frames {stats['frames']}")


def test_config_edited_50_times_in_a_second(watched) -> None:
    run = watched
    run.wait_swapping()
    t_fault = time.monotonic()
    for i in range(50):
        on_miss = OnMiss.blur if i % 2 else OnMiss.hold
        edited = run.cfg.model_copy(
            update={
                "swap": run.cfg.swap.model_copy(update={"on_miss": on_miss}),
                "disclosure": run.cfg.disclosure.model_copy(update={"text": f"edit {i}"}),
            }
        )
        if i % 7 == 3:
            run.config_file.write_text("[swap\n")  # some saves are half-written
        else:
            _write_config(run.config_file, edited)
        time.sleep(0.02)
    run.wait_for(lambda: run.engine.cfg.disclosure.text == "edit 49", 5.0, "the last edit to be applied")
    assert run.engine.status()["config_error"] is None
    assert run.engine.cfg.swap.on_miss.value == "blur"
    run.wait_swapping()
    gap = run.sink.max_gap(t_fault, time.monotonic())
    stats = run.stop()
    check_no_leak(run, stats)
    assert gap < MAX_GAP_S
    assert run.watcher.loads < 50, f"50 saves in a second were loaded {run.watcher.loads} times"
    print(f"50 edits: {run.watcher.loads} loads, max gap {gap * 1000:.0f} ms")


def test_config_points_source_face_at_a_deleted_file(watched, tmp_path) -> None:
    run = watched
    run.wait_swapping()
    t_fault = time.monotonic()
    gone = tmp_path / "deleted-face.png"
    edited = run.cfg.model_copy(update={"swap": run.cfg.swap.model_copy(update={"source_face": gone})})
    _write_config(run.config_file, edited)
    run.wait_for(lambda: run.engine.status()["config_error"], 4.0, "the bad source face to show in status")
    assert str(gone) in run.engine.status()["config_error"]
    run.wait_swapping()  # still swapping with the face it had
    _write_config(run.config_file, run.cfg)
    run.wait_for(lambda: run.engine.status()["config_error"] is None, 4.0, "the error to clear")
    gap = run.sink.max_gap(t_fault, time.monotonic())
    stats = run.stop()
    check_no_leak(run, stats)
    assert gap < MAX_GAP_S
    print(f"config source face deleted: max gap {gap * 1000:.0f} ms, frames {stats['frames']}")


def test_config_emptied_while_written_keeps_the_running_config(watched) -> None:
    """An editor writing in place leaves the file empty for a moment. Before: applied after 0.25 s —
    the camera switched to device 0 (offline frames) and the source face was gone."""
    run = watched
    run.watcher.confirm_s = 600.0  # held for the whole test: what matters is what happens meanwhile
    run.wait_swapping()
    source, camera = run.engine.cfg.swap.source_face, run.engine.cfg.camera
    run.config_file.write_text("")
    run.wait_for(lambda: "removes" in (run.engine.status()["config_error"] or ""), 8.0, "the held edit to show in status")
    assert "[swap]" in run.engine.status()["config_error"]
    run.wait_swapping()  # still running on the last good config
    assert run.engine.cfg.swap.source_face == source and run.engine.cfg.camera == camera
    _write_config(run.config_file, run.cfg)  # the editor finishes writing
    run.wait_for(lambda: run.engine.status()["config_error"] is None, 8.0, "the note to clear")
    stats = run.stop()
    check_no_leak(run, stats)
    assert stats["frames"]["offline"] == 0
