"""`--sink SPEC` parsing: each valid form builds the right sink, anything else lists the forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from vcamd.errors import VcamdError
from vcamd.sinks.base import Sink
from vcamd.sinks.file import FileSink
from vcamd.sinks.null import NullSink
from vcamd.sinks.preview import PreviewSink
from vcamd.sinks.registry import open_sink
from vcamd.sinks.virtual import VirtualCameraSink


@pytest.mark.parametrize(
    ("spec", "kind"),
    [("virtual", VirtualCameraSink), ("", VirtualCameraSink), ("preview", PreviewSink), ("null", NullSink), (" null ", NullSink)],
)
def test_valid_specs(make_config, spec, kind):
    sink = open_sink(spec, make_config(), 640, 480, 30.0)
    assert isinstance(sink, kind) and isinstance(sink, Sink)
    assert sink.name in ("virtual", "preview", "null")


def test_file_spec_keeps_the_path(make_config, tmp_path):
    sink = open_sink(f"file:{tmp_path}/rec.mp4", make_config(), 640, 480, 25.0)
    assert isinstance(sink, FileSink) and isinstance(sink, Sink)
    assert sink.path == Path(tmp_path) / "rec.mp4"
    assert sink.describe() == f"file {tmp_path}/rec.mp4 (640×480 mp4 at 25 fps)"


def test_preview_spec_uses_the_configured_port(make_config):
    sink = open_sink("preview", make_config(preview={"port": 9123}), 640, 480, 30.0)
    assert sink.describe() == "preview page http://127.0.0.1:9123/"


@pytest.mark.parametrize("spec", ["bogus", "File:x.mp4", "virtual:foo", "previews", "v4l2", "file"])
def test_bad_specs_list_the_valid_forms(make_config, spec):
    with pytest.raises(VcamdError) as info:
        open_sink(spec, make_config(), 640, 480, 30.0)
    text = str(info.value)
    assert repr(spec) in text
    for form in ("virtual", "preview", "file:PATH.mp4", "null"):
        assert form in text


def test_file_spec_without_path(make_config):
    with pytest.raises(VcamdError, match="file:PATH.mp4"):
        open_sink("file:", make_config(), 640, 480, 30.0)


def test_bad_size(make_config):
    with pytest.raises(VcamdError, match="must be positive"):
        open_sink("null", make_config(), 0, 480, 30.0)
