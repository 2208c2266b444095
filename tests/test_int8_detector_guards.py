"""What keeps the detector's int8 copy to the settings and the files it was checked with: a live edit of a
setting its check was made at (`[detection] cover_threshold`, `[watchdog] lowres_scale`) builds the pipeline
anew (its detector float until a copy is checked at the new looks), and a cache folder another local user can
write to is never read (a "passed" copy planted there would decide who gets covered)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from vcamd.config.schema import Config


@pytest.mark.parametrize(("section", "key", "value"), [("detection", "cover_threshold", 0.35), ("watchdog", "lowres_scale", 0.75)])
def test_a_live_edit_of_a_setting_the_detectors_check_was_made_at_rebuilds_a_pipeline_on_the_copy(section, key, value):
    from vcamd.inference.precision import FLOAT
    from vcamd.live.reconfigure import TABLE, Apply, detector_copy, plan
    from vcamd.models.int8detector import looks_for

    old = Config()
    new = Config.model_validate({section: {key: value}})
    assert TABLE[section][key].apply is Apply.live and looks_for(new) != looks_for(old)
    on_copy = SimpleNamespace(precisions={"detector": replace(FLOAT, runs="int8")})
    building = SimpleNamespace(precisions={"detector": replace(FLOAT, build=True)})
    assert detector_copy(on_copy) and detector_copy(building)
    assert not detector_copy(SimpleNamespace(precisions={"swapper": FLOAT})) and not detector_copy(None)
    edit = plan(old, new, detector_copy=True)
    assert edit.pipeline_outdated  # the running copy (or the one being built) was checked at the old looks
    assert edit.live == {f"{section}.{key}"}  # and the tracker still takes it at once
    assert not plan(old, new).pipeline_outdated  # a float detector: nothing to check again
    assert not plan(old, Config.model_validate({"detection": {"full_every": 3}}), detector_copy=True).pipeline_outdated  # not a look


@pytest.mark.skipif(os.name != "posix", reason="folder modes are POSIX")
def test_a_copy_in_a_cache_folder_other_users_can_write_is_never_loaded(cache):
    from vcamd.inference import int8cache

    entry = int8cache.Entry("ab" * 32, "0123456789abcdef")
    kept = int8cache.record(entry, False, "failed: a face missed", {}, None)
    assert int8cache.read(entry) is not None and kept.model is None
    planted = b"not a checked copy"
    entry.model.write_bytes(planted)
    entry.verdict_file.write_text(json.dumps({"passed": True, "summary": "planted", "model_size": len(planted)}), encoding="utf-8")
    assert int8cache.read(entry) is not None  # the user's own folder: read
    os.chmod(int8cache.folder(), 0o777)  # as a folder another local user could have put the files in
    try:
        assert int8cache.read(entry) is None
    finally:
        os.chmod(int8cache.folder(), 0o700)
    assert int8cache.read(entry) is not None
