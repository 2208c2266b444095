"""ConfigWatcher on real files: edits, broken edits, bursts, atomic saves, deletion."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path

import pytest
from support.waiting import wait_for

from vcamd.common.errors import ConfigError
from vcamd.config.reading import load_config
from vcamd.config.schema import Config
from vcamd.live.reload import ConfigWatcher

APPLY_WITHIN_S = 20.0
"""How long a test waits for an edit to be applied before calling the watcher broken: a bound, not
the ~2 s it takes (its poll and debounce), so a busy machine makes a test slower, never red."""

BASE = """\
[camera]
fps = 30.0

[enhancer]
enabled = false
"""


def differing_sections(old: Config, new: Config) -> set[str]:
    """The sections the test sees change from one reported config to the next."""
    return {name for name in Config.model_fields if getattr(old, name) != getattr(new, name)}


class Events:
    """What the watcher reported, in order: ("change", config, sections that differ from the
    config reported before, or from the file as the test started) or ("error", err)."""

    def __init__(self, start: Config) -> None:
        self.queue: queue.Queue[tuple] = queue.Queue()
        self.last = start

    def on_change(self, config: Config) -> None:
        sections, self.last = differing_sections(self.last, config), config
        self.queue.put(("change", config, sections))

    def on_error(self, err: ConfigError) -> None:
        self.queue.put(("error", err))

    def on_note(self, message: str) -> None:
        self.queue.put(("note", message))

    def next(self, timeout: float = APPLY_WITHIN_S) -> tuple:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no reload event within {timeout} s") from None

    def none_within(self, seconds: float) -> bool:
        try:
            event = self.queue.get(timeout=seconds)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected event {event}")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(BASE)
    return path


@pytest.fixture
def events(config_file: Path) -> Events:
    return Events(load_config(config_file)[0])


FAST = {"interval": 0.1, "settle_s": 0.1}
"""Quicker polling for the tests that are about what is reported, not about the default timing."""


def start_watcher(config_file: Path, events: Events, **timing: float) -> ConfigWatcher:
    current, _ = load_config(config_file)
    events.last = current  # the sections each event reports differ from this
    return ConfigWatcher(config_file, events.on_change, events.on_error, current=current, **timing).start()


@pytest.fixture
def watcher(config_file: Path, events: Events):
    w = start_watcher(config_file, events, **FAST)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture
def default_watcher(config_file: Path, events: Events):
    """With the daemon's default timing (0.5 s polls)."""
    w = start_watcher(config_file, events)
    try:
        yield w
    finally:
        w.close()


def wait_for_loads(w: ConfigWatcher, count: int, timeout: float = APPLY_WITHIN_S) -> None:
    wait_for(lambda: w.loads >= count, f"the watcher to load {count} times", timeout_s=timeout,
             detail=lambda: f"it loaded {w.loads} times")


def test_an_edit_is_applied(config_file, events, default_watcher):
    watcher = default_watcher
    wait_for_loads(watcher, 1)  # the first look compares the file with `current`: nothing changed
    assert events.none_within(0.1)
    started = time.monotonic()
    config_file.write_text(BASE.replace("fps = 30.0", "fps = 15.0").replace("enabled = false", "enabled = true"))
    kind, config, sections = events.next()
    elapsed = time.monotonic() - started
    assert kind == "change"
    assert sections == {"camera", "enhancer"}
    assert config.camera.fps == 15.0 and config.enhancer.enabled is True
    assert watcher.config == config and watcher.error is None
    print(f"edit applied after {elapsed * 1000:.0f} ms")


def test_a_change_that_changes_nothing_is_not_reported(config_file, events, watcher):
    wait_for_loads(watcher, 1)
    config_file.write_text("# a comment\n" + BASE)
    wait_for_loads(watcher, 2)
    assert events.none_within(0.3)


def test_broken_edits_keep_the_last_good_config_until_fixed(config_file, events, watcher):
    wait_for_loads(watcher, 1)
    good = watcher.config

    config_file.write_text(BASE + "[camera\n")
    kind, err = events.next()
    assert kind == "error" and "invalid TOML" in str(err)
    assert watcher.config is good and watcher.error is err

    config_file.write_text(BASE.replace("fps = 30.0", "fps = -1"))
    kind, err = events.next()
    assert kind == "error" and err.problems == ["[camera] fps = -1: Input should be greater than 0"]
    assert watcher.config is good

    config_file.write_text(BASE.replace("fps = 30.0", "fsp = 30.0"))
    kind, err = events.next()
    assert kind == "error" and "[camera] fsp: unknown key" in str(err)

    config_file.write_text(BASE)  # fixed, back to exactly the last good config
    kind, config, sections = events.next()
    assert (kind, sections) == ("change", set())  # nothing to restart, but the error is cleared
    assert config == good and watcher.error is None


def test_a_fix_that_also_changes_something_reports_it(config_file, events, watcher):
    config_file.write_text("[camera]\nfps = 'fast'\n")
    assert events.next()[0] == "error"
    config_file.write_text(BASE.replace("fps = 30.0", "fps = 24.0"))
    kind, config, sections = events.next()
    assert (kind, sections, config.camera.fps) == ("change", {"camera"}, 24.0)


def test_fifty_edits_in_a_second_load_once_or_a_few_times_and_end_right(config_file, events, default_watcher):
    watcher = default_watcher
    wait_for_loads(watcher, 1)
    loads_before = watcher.loads
    started = time.monotonic()
    for i in range(50):
        config_file.write_text(BASE.replace("fps = 30.0", f"fps = {i + 1}.0"))
        time.sleep(0.02)
    editing_s = time.monotonic() - started  # ~1 s; longer on a loaded machine
    changes = [events.next()]
    while changes[-1][1].camera.fps != 50.0:  # collect until the last edit is loaded
        changes.append(events.next())
    # Continuous editing is loaded at most once per max_delay_s (1.5 s) plus once when it settles:
    # one load for a 1 s burst, a second only when the machine stretched the burst past 1.5 s.
    allowed = 1 + int(editing_s / watcher.max_delay_s)
    assert watcher.loads - loads_before <= allowed + 1, (watcher.loads - loads_before, editing_s)
    assert all(kind == "change" and sections == {"camera"} for kind, _, sections in changes)
    assert changes[-1][1].camera.fps == 50.0 and watcher.config.camera.fps == 50.0
    print(f"50 edits in {editing_s:.2f} s → {watcher.loads - loads_before} load(s)")


def test_an_editors_atomic_save_by_rename_is_seen(config_file, events, watcher):
    wait_for_loads(watcher, 1)
    replacement = config_file.with_name(".config.toml.swp")
    replacement.write_text(BASE.replace("enabled = false", "enabled = true"))
    os.replace(replacement, config_file)
    kind, config, sections = events.next()
    assert (kind, sections, config.enhancer.enabled) == ("change", {"enhancer"}, True)


def test_a_deleted_file_is_an_error_until_it_comes_back(config_file, events, watcher):
    wait_for_loads(watcher, 1)
    good = watcher.config
    config_file.unlink()
    kind, err = events.next()
    assert kind == "error" and "file not found" in str(err)
    assert watcher.config is good
    config_file.write_text(BASE.replace("fps = 30.0", "fps = 60.0"))
    kind, config, sections = events.next()
    assert (kind, sections, config.camera.fps) == ("change", {"camera"}, 60.0)


def test_with_missing_ok_a_missing_file_means_the_defaults(tmp_path, events):
    """Once it has stayed missing for confirm_s (a file deleted and written again is not applied)."""
    path = tmp_path / "not-yet.toml"
    with ConfigWatcher(path, events.on_change, events.on_error, missing_ok=True, confirm_s=0.3, **FAST) as w:
        assert w.config == Config()
        path.write_text("[camera]\nfps = 10.0\n")
        kind, config, sections = events.next()
        assert (kind, sections, config.camera.fps) == ("change", {"camera"}, 10.0)
        path.unlink()
        kind, err = events.next()
        assert kind == "error" and "removes [camera]" in str(err)
        kind, config, sections = events.next()
        assert (kind, sections, config) == ("change", {"camera"}, Config())


def test_the_first_look_catches_an_edit_made_before_start(config_file, events):
    current, _ = load_config(config_file)
    events.last = current  # the sections each event reports differ from this
    config_file.write_text(BASE.replace("fps = 30.0", "fps = 25.0"))
    with ConfigWatcher(config_file, events.on_change, events.on_error, current=current, **FAST):
        kind, config, sections = events.next()
        assert (kind, sections, config.camera.fps) == ("change", {"camera"}, 25.0)


def test_starting_on_a_broken_file_without_a_current_config_raises(config_file, events):
    config_file.write_text("[camera]\nfps = 0\n")
    with pytest.raises(ConfigError, match=r"\[camera\] fps = 0"):
        ConfigWatcher(config_file, events.on_change, events.on_error).start()


def test_a_failing_callback_does_not_stop_the_watching(config_file, events):
    calls: list[Config] = []

    def on_change(config: Config) -> None:
        calls.append(config)
        if len(calls) == 1:
            raise RuntimeError("engine bug while applying")
        events.on_change(config)

    current, _ = load_config(config_file)
    events.last = current  # the sections each event reports differ from this
    with ConfigWatcher(config_file, on_change, events.on_error, current=current, **FAST) as w:
        wait_for_loads(w, 1)
        config_file.write_text(BASE.replace("fps = 30.0", "fps = 20.0"))
        wait_for_loads(w, 2)
        config_file.write_text(BASE.replace("fps = 30.0", "fps = 10.0"))
        kind, config, sections = events.next()
        assert (kind, sections, config.camera.fps) == ("change", {"camera"}, 10.0)
    assert [c.camera.fps for c in calls] == [20.0, 10.0]


def test_start_and_close_are_idempotent(config_file, events):
    w = ConfigWatcher(config_file, events.on_change, events.on_error)
    assert w.start() is w and w.start() is w
    w.close()
    w.close()


def test_a_load_is_counted_once_its_outcome_is_in_place(config_file, events, monkeypatch):
    """`loads` went up when a load began: a caller that waited for the count could read the config
    from before that load (a loaded run lost test_a_deleted_file_is_an_error_until_it_comes_back
    so: `watcher.config is good` failed, `good` having been read mid-load)."""
    import vcamd.live.reload

    real_load = vcamd.live.reload.load_config

    def slow_load(path):
        loaded = real_load(path)
        time.sleep(0.3)  # a busy machine's slow load, made certain
        return loaded

    monkeypatch.setattr(vcamd.live.reload, "load_config", slow_load)
    current, _ = load_config(config_file)
    events.last = current  # the sections each event reports differ from this
    with ConfigWatcher(config_file, events.on_change, events.on_error, current=current, **FAST) as w:
        wait_for_loads(w, 1)
        assert w.config is not current and w.config == current  # the file's own load, kept
        config_file.write_text("[camera]\nfps = \"fast\"\n")
        wait_for_loads(w, 2)
        assert w.error is not None and "fps" in str(w.error)


FULL = """\
[swap]
source_face = "face.png"
source_consent = true

[camera]
device = "synthetic"
fps = 15.0

[enhancer]
enabled = true
"""


def test_a_file_emptied_or_cut_at_a_section_while_written_is_not_applied(config_file, events):
    """An editor or sync tool writing in place: the file empty, then cut after its first section, for
    longer than the settle time. Before: each was applied (camera back to device 0, the source face
    gone); now each is held and said, and the complete file is applied as one edit."""
    config_file.write_text(FULL)
    current, _ = load_config(config_file)
    events.last = current  # the sections each event reports differ from this
    with ConfigWatcher(config_file, events.on_change, events.on_error, current=current, confirm_s=600, **FAST) as w:
        config_file.write_text("")
        kind, err = events.next()
        assert kind == "error" and "removes [swap], [enhancer], [camera]" in str(err), err
        assert "vcamd reload" in str(err)
        config_file.write_text(FULL[:FULL.index("[camera]")])  # cut at a section boundary
        kind, err = events.next()
        assert kind == "error" and "removes [enhancer], [camera]" in str(err), err
        assert w.config is current
        config_file.write_text(FULL.replace("fps = 15.0", "fps = 20.0"))
        kind, config, sections = events.next()
        assert kind == "change" and config.camera.device == "synthetic" and config.camera.fps == 20.0
        assert config.swap.source_face == config_file.parent / "face.png" and w.error is None


def test_removing_a_section_or_the_source_face_on_purpose_applies_once_settled_and_says_so(config_file, events):
    config_file.write_text(FULL)
    current, _ = load_config(config_file)
    events.last = current  # the sections each event reports differ from this
    with ConfigWatcher(config_file, events.on_change, events.on_error, current=current, confirm_s=0.3,
                       on_note=events.on_note, **FAST) as w:
        config_file.write_text(FULL.replace('source_face = "face.png"\n', "").replace("[enhancer]\nenabled = true\n", ""))
        kind, err = events.next()
        assert kind == "error" and "removes [enhancer], [swap] source_face" in str(err), err
        kind, config, sections = events.next()
        assert (kind, sections) == ("change", {"swap", "enhancer"})
        assert config.swap.source_face is None and config.enhancer.enabled is False and config.camera.device == "synthetic"
        kind, note = events.next()
        assert kind == "note" and "removed [enhancer], [swap] source_face: the defaults apply there now" in note
        assert w.config is config
