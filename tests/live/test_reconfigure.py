"""`vcamd.live.reconfigure`: one table says how every config key takes effect while running."""

from __future__ import annotations

import logging

from pydantic import BaseModel

from vcamd.config import Config
from vcamd.live.reconfigure import TABLE, Apply, needs_rebuild, plan


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
    assert changes.sections == {"detection", "watchdog", "runtime"}
    assert plan(old, old) == type(changes)()
    assert needs_rebuild(old, new) and not needs_rebuild(old, Config.model_validate({"watchdog": {"budget_ms": 80.0}}))
    assert TABLE["detection"]["threshold"] is Apply.rebuild and TABLE["swap"]["on_miss"] is Apply.live


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
            engine.on_config_change(live_config(runtime={"log_level": "error"}), {"runtime"})
            engine.run(max_frames=2)
            assert root.level == expected and engine.cfg.runtime.log_level == "error"
    finally:
        root.setLevel(before)
