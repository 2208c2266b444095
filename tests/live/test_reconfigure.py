"""`vcamd.live.reconfigure`: one table says how every config key takes effect while running."""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import BaseModel

from vcamd.config.schema import Config
from vcamd.live.reconfigure import APPLY_ORDER, TABLE, Apply, Owner, needs_rebuild, plan


def every_key(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every leaf field of `model`, recursively (a new nested model's keys count one by one)."""
    keys = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += every_key(annotation, prefix + (name,))
        else:
            keys.append(prefix + (name,))
    return keys


def test_every_key_of_config_has_exactly_one_entry_in_the_table():
    keys = every_key(Config)
    assert all(len(k) == 2 for k in keys), [k for k in keys if len(k) != 2]  # the table is section → key
    in_config = {(section, key) for section, key in keys}
    in_table = {(section, key) for section, entries in TABLE.items() for key in entries}
    assert in_config - in_table == set(), "keys with no entry in reconfigure.TABLE"
    assert in_table - in_config == set(), "entries in reconfigure.TABLE for keys Config does not have"
    assert {"runtime", "tray"} <= set(TABLE)


def test_plan_sorts_each_changed_key_by_how_it_takes_effect():
    old = Config()
    new = Config.model_validate({
        "models": {"swapper": "other.onnx"},
        "detection": {"full_every": 3},
        "watchdog": {"budget_ms": 80.0},
        "runtime": {"max_memory_gb": 8.0, "log_level": "debug"},
        "tray": {"enabled": False},
    })
    changes = plan(old, new)
    assert changes.rebuild == {"models.swapper"}
    assert changes.live == {"detection.full_every", "watchdog.budget_ms", "runtime.log_level"}
    assert changes.restart == {"runtime.max_memory_gb", "tray.enabled"}
    assert changes.owners == {Owner.tracker, Owner.watchdog, Owner.logging}
    assert plan(old, old) == type(changes)()
    assert needs_rebuild(old, new) and not needs_rebuild(old, Config.model_validate({"watchdog": {"budget_ms": 80.0}}))
    assert TABLE["detection"]["threshold"].apply is Apply.rebuild and TABLE["swap"]["on_miss"].apply is Apply.live


def test_every_row_names_its_owners_and_every_live_owner_has_its_turn():
    for section, rows in TABLE.items():
        for key, row in rows.items():
            assert row.owners, f"{section}.{key} names no owner"
            if row.apply is Apply.live:
                assert set(row.owners) <= set(APPLY_ORDER), f"{section}.{key}: {row.owners} never applied"
            else:
                assert row.owners == ((Owner.pipeline,) if row.apply is Apply.rebuild else (Owner.restart,))


def test_runtime_log_level_is_applied_live_unless_pinned(live_config, clip_20fps, face_engine_factory, recording_sink):
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine

    root = logging.getLogger()
    before = root.level
    try:
        cfg = live_config()
        for pinned, expected in ((False, logging.ERROR), (True, logging.INFO)):
            root.setLevel(logging.INFO)
            engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True),
                                sink_factory=lambda w, h, fps: recording_sink(), faces=face_engine_factory(cfg),
                                log_level_pinned=pinned)
            engine.on_config_change(live_config(runtime={"log_level": "error"}))
            engine.run(max_frames=2)
            assert root.level == expected and engine.cfg.runtime.log_level == "error"
    finally:
        root.setLevel(before)


def test_an_edit_cannot_switch_swapping_on_while_consent_is_withdrawn(live_config, clip_20fps, face_engine_factory, recording_sink):
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine

    cfg = live_config()
    engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True),
                        sink_factory=lambda w, h, fps: recording_sink(), faces=face_engine_factory(cfg))
    engine.apply_config(live_config(swap={"source_consent": False}))
    assert engine.parts.enabled is False
    engine.apply_config(live_config(swap={"source_consent": False, "enabled": False}))
    engine.apply_config(live_config(swap={"source_consent": False, "enabled": True}))
    assert engine.parts.enabled is False and engine.settings.consent.withdrawn
    engine.apply_config(live_config(swap={"source_consent": True, "enabled": True}))
    assert engine.parts.enabled is False  # consent given again: swapping may be switched on, not switched on by it
    engine.apply_config(live_config(swap={"source_consent": True, "enabled": False}))
    engine.apply_config(live_config(swap={"source_consent": True, "enabled": True}))
    assert engine.parts.enabled is True


# -- every live key, changed in a running engine --------------------------------------------------

NEW_LIVE_VALUES: dict[tuple[str, str], object] = {
    ("detection", "cover_threshold"): 0.25,
    ("detection", "full_every"): 7,
    ("swap", "enabled"): False,
    ("swap", "source_face"): "another.png",  # a copy of the running photo (made below)
    ("swap", "source_consent"): False,
    ("swap", "others"): "show",
    ("swap", "cover_changes"): False,
    ("swap", "on_miss"): "blur",
    ("swap", "max_result_age_s"): 2.5,
    ("smoothing", "enabled"): False,
    ("smoothing", "min_cutoff_hz"): 0.5,
    ("smoothing", "beta"): 10.0,
    ("enhancer", "enabled"): True,
    ("enhancer", "strength"): 0.4,
    ("enhancer", "weight"): 0.8,
    ("camera", "device"): "another.avi",
    ("camera", "width"): 320,
    ("camera", "height"): 240,
    ("camera", "fps"): 15.0,
    ("camera", "mjpg"): False,
    ("camera", "loop"): True,
    ("camera", "reopen_interval_s"): 0.4,
    ("camera", "stall_timeout_s"): 0.7,
    ("virtual_camera", "name"): "Renamed Camera",
    ("virtual_camera", "device"): "/dev/video9",
    ("virtual_camera", "backend"): "v4l2loopback",
    ("watchdog", "budget_ms"): 55.0,
    ("watchdog", "window"): 9,
    ("watchdog", "degrade_ratio"): 0.5,
    ("watchdog", "recover_headroom"): 0.5,
    ("watchdog", "recover_after_s"): 4.0,
    ("watchdog", "cooldown_s"): 2.0,
    ("watchdog", "lowres_scale"): 0.6,
    ("watchdog", "swap_age_budget_ms"): 900.0,
    ("disclosure", "badge"): False,
    ("disclosure", "text"): "Deepfake",
    ("disclosure", "corner"): "top-left",
    ("preview", "port"): 8799,
    ("preview", "jpeg_quality"): 60,
    ("runtime", "log_level"): "warning",
}


def test_the_tracker_and_the_publisher_see_only_the_keys_they_read():
    """Their records of the config (`TrackerSettings`, `PublisherSettings`) change with each live key
    they own, and with no other live key (an edit elsewhere does not reach them)."""
    from vcamd.live.output.publisher import PublisherSettings
    from vcamd.live.tracking.sizes import TrackerSettings

    record_of = {Owner.tracker: TrackerSettings.of, Owner.publisher: PublisherSettings.of}
    old, changed = Config(), set()
    for (section, key), value in NEW_LIVE_VALUES.items():
        new = Config.model_validate({section: {key: value}})
        if getattr(getattr(new, section), key) == getattr(getattr(old, section), key):
            continue  # that value is the default (swap.source_consent): no edit from `old`
        changed.add((section, key))
        for owner, record in record_of.items():
            assert (record(new) != record(old)) is (owner in TABLE[section][key].owners), (owner, section, key)
    owned = {(s, k) for s, rows in TABLE.items() for k, row in rows.items() if row.apply is Apply.live and set(row.owners) & set(record_of)}
    assert owned <= changed, "every key they own was edited here"


def _runs_on(engine, owner: Owner, section: str, key: str):
    """The value of [section] key that `owner`'s part is running with now."""
    parts = engine.parts
    if owner is Owner.watchdog:
        return getattr(parts.watchdog.cfg, key)
    if owner is Owner.tracker:
        applied = parts.tracker.applied  # `TrackerSettings`: the keys it reads, by their names
        return getattr(applied, key), applied.full_every == parts.tracker.full_every
    if owner is Owner.frames:
        policy = engine.frames.policy
        return getattr(policy.smoothing, key) if section == "smoothing" else getattr(policy, key)
    if owner is Owner.publisher:
        return getattr(getattr(parts.publisher.applied, section), key)
    if owner is Owner.camera:
        return getattr(parts.camera, key), parts.reader.source is parts.source
    if owner is Owner.swapping:
        return parts.enabled
    if owner is Owner.consent:
        return not engine.settings.consent.withdrawn
    if owner is Owner.source_face:
        return parts.faces.source.path if parts.faces.source is not None else None
    if owner is Owner.enhancer:
        enhancer = parts.faces.enhancer
        if key == "enabled":
            return parts.watchdog.enhancer_enabled
        return getattr(enhancer, key) if enhancer is not None else None
    if owner is Owner.logging:
        return logging.getLevelName(logging.getLogger().level).lower()
    raise AssertionError(f"no probe for {owner}")


def _expected(owner: Owner, section: str, key: str, value):
    if owner is Owner.tracker:
        return value, True
    if owner is Owner.camera:
        return value, True
    return value


def test_every_live_key_changed_in_a_running_engine_takes_effect(live_config, clip_20fps, face_engine_factory, recording_sink,
                                                                  assets, tmp_path_factory, tmp_path):
    """One key at a time (so a key that only worked because another key's owner ran is caught), on
    a running engine, through the loop as a config edit arrives: each owner's part runs with the
    new value afterwards, and the stream never stops."""
    import shutil
    import threading

    from tests.support.waiting import wait_for
    from vcamd.bench.standins import build_enhancer
    from vcamd.config.reading import config_from_dict
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine

    live_keys = {(s, k) for s, rows in TABLE.items() for k, row in rows.items() if row.apply is Apply.live}
    assert live_keys == set(NEW_LIVE_VALUES), "give every live key a new value here"
    enhancer = build_enhancer(tmp_path_factory.mktemp("enh") / "gfpgan_light.onnx")
    another = tmp_path / "another.avi"
    shutil.copy(clip_20fps, another)
    # Float: with a detector copy wanted, a cover_threshold or lowres_scale edit also rebuilds the pipeline
    # (`reconfigure.detector_copy`), which this engine (no pipeline factory) cannot: tests/test_int8_detector_guards.py.
    cfg = live_config(models={"enhancer": str(enhancer), "precision": "float"})
    sinks = []
    engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True),
                        sink_factory=lambda w, h, fps: sinks.append(recording_sink(keep_every=1000)) or sinks[-1],
                        faces=face_engine_factory(cfg), source_factory=lambda camera: open_source(str(another), camera, loop=True))
    root, level = logging.getLogger(), logging.getLogger().level
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    data = cfg.model_dump(mode="json")
    try:
        wait_for(lambda: engine.parts.stats.published >= 3, what="the first frames")
        for (section, key), value in NEW_LIVE_VALUES.items():
            if (section, key) == ("swap", "source_face"):
                value = tmp_path / str(value)
                shutil.copy(assets / "images" / "newton.png", value)
            if (section, key) == ("camera", "device"):
                value = str(another)
            data[section][key] = str(value) if isinstance(value, Path) else value
            new = config_from_dict(data)
            assert getattr(getattr(new, section), key) != getattr(getattr(engine.cfg, section), key), (section, key)
            published = engine.parts.stats.published
            engine.on_config_change(new)
            for owner in TABLE[section][key].owners:
                want = _expected(owner, section, key, getattr(getattr(new, section), key))
                wait_for(lambda: _runs_on(engine, owner, section, key) == want, what=f"{section}.{key} applied by the {owner}",
                         detail=lambda: f"runs on {_runs_on(engine, owner, section, key)!r}, want {want!r}")
            wait_for(lambda: engine.parts.stats.published > published + 2, what=f"frames after {section}.{key}")
        assert engine.status()["config_error"] is not None  # consent withdrawn is said, not hidden
        assert len(sinks) >= 2, "the output was reopened for its sections"
    finally:
        engine.request_quit()
        thread.join(10)
        root.setLevel(level)
    assert not thread.is_alive()


# -- one diff per edit, each owner its part ---------------------------------------------------------

def _counting_plans(monkeypatch) -> list[int]:
    """Count `reconfigure.plan` evaluations (every diff of two configs goes through it)."""
    from vcamd.live import reconfigure

    calls = [0]
    real = reconfigure.plan

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(reconfigure, "plan", counted)
    return calls


def test_a_config_edit_is_diffed_once(live_config, clip_20fps, face_engine_factory, recording_sink, monkeypatch):
    """Through the loop, as the watcher hands an edit over, with the status refreshed after it and
    every 10 frames. Before: `apply` diffed the edit, then asked whether the pipeline must be
    rebuilt (a second diff, the same as `file_valid`'s when nothing changed), and while a model
    differed each status refresh asked it again: 2 for a live edit, 7 for a model over these 21
    frames, 2 for the badge."""
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import STATUS_EVERY, LiveEngine

    cfg = live_config()
    calls = _counting_plans(monkeypatch)
    edits = {
        "a live key": live_config(watchdog={"budget_ms": 55.0}),
        "a rebuild key": live_config(detection={"size": 384}),
        # A model differs from the running pipeline's: the status says it is loading at each refresh.
        "a model": live_config(models={"swapper": "inswapper_128"}),
        "nothing": cfg,
    }
    for what, new in edits.items():
        engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True),
                            sink_factory=lambda w, h, fps: recording_sink(), faces=face_engine_factory(cfg))
        calls[0] = 0
        engine.on_config_change(new)
        engine.run(max_frames=2 * STATUS_EVERY + 1)
        assert calls[0] == 1, f"an edit of {what}: {calls[0]} diffs"
        assert engine.cfg == new
    calls[0] = 0
    engine.set_badge(False)  # the tray's and the page's switch: an edit too
    assert calls[0] == 1 and engine.cfg.disclosure.badge is False


def test_a_watchdog_edit_through_the_settings_keeps_the_level_and_the_frames(live_config, clip_20fps, face_engine_factory,
                                                                              recording_sink):
    """[watchdog] recover_after_s judges no frame: the running engine's watchdog keeps its level and
    its half-full window, so the next step needs only the frames the window lacked."""
    from vcamd.live.capture.sources import open_source
    from vcamd.live.engine import LiveEngine

    cfg = live_config(watchdog={"cooldown_s": 0.0})
    engine = LiveEngine(cfg, source=open_source(str(clip_20fps), cfg.camera, loop=True),
                        sink_factory=lambda w, h, fps: recording_sink(), faces=face_engine_factory(cfg))
    dog = engine.parts.watchdog
    window = cfg.watchdog.window
    for _ in range(window + 5):  # a window over budget: one step down; then 5 frames of the next
        dog.observe(10 * cfg.watchdog.budget_ms)
    level, transitions = dog.level, len(dog.transitions)
    assert transitions == 1
    engine.settings.file_valid(live_config(watchdog={"cooldown_s": 0.0, "recover_after_s": 4.0}))
    assert dog.cfg.recover_after_s == 4.0 and dog.level is level
    for _ in range(window - 5):
        dog.observe(10 * cfg.watchdog.budget_ms)
    assert len(dog.transitions) == transitions + 1
