"""`--sink SPEC` parsing: each valid form builds the right sink, anything else lists the forms; the registry is the one list."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from vcamd.commands.run import _open_output_page
from vcamd.common.errors import VcamdError
from vcamd.config.schema import Config
from vcamd.sinks.base import Sink
from vcamd.sinks.file import FileSink
from vcamd.sinks.null import NullSink
from vcamd.sinks.preview import PreviewSink, preview_page
from vcamd.sinks.registry import FORMS, OUTPUT_SECTIONS, SINK_FORMS, open_sink
from vcamd.sinks.virtual import VirtualCameraSink

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("spec", "kind"),
    [("virtual", VirtualCameraSink), ("", VirtualCameraSink), ("preview", PreviewSink), ("null", NullSink), (" null ", NullSink)],
)
def test_valid_specs(make_config, spec, kind):
    sink = open_sink(spec, make_config(), 640, 480, 30.0)
    assert isinstance(sink, kind) and isinstance(sink, Sink)


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


# -- the registry is the one list of sinks -------------------------------------------------------------


def test_every_registered_form_builds_a_sink_of_the_one_protocol(make_config, tmp_path):
    for form in FORMS:
        spec = f"{form.name}:{tmp_path / 'out.mp4'}" if form.takes_argument else form.name
        sink = open_sink(spec, make_config(preview={"port": 0}), 64, 48, 30.0)
        assert isinstance(sink, Sink), form
        assert sink.url is None, form  # nothing to watch before open()
    assert SINK_FORMS == "virtual (the default), preview, file:PATH.mp4, null"
    assert OUTPUT_SECTIONS == ("virtual_camera", "preview")
    assert all(section in Config.model_fields for section in OUTPUT_SECTIONS)


def test_run_help_lists_the_registered_forms_and_the_cli_registry_is_light():
    # `vcamd status` imports every command module: the registry must not pull in OpenCV or pydantic.
    code = (
        "import sys, vcamd.commands.run as run, vcamd.sinks.registry as r; "
        "print(r.SINK_FORMS); print(sorted(m for m in ('cv2', 'numpy', 'pydantic', 'vcamd.sinks.base') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.splitlines() == [SINK_FORMS, "[]"]
    helped = subprocess.run([sys.executable, "-m", "vcamd", "run", "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0
    assert all(form.usage in " ".join(helped.stdout.split()) for form in FORMS)


def test_the_preview_page_is_packaged_data():
    # The page is a file beside the module, listed in the package data so a wheel carries it.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "sinks/preview_page.html" in pyproject["tool"]["setuptools"]["package-data"]["vcamd"]
    assert preview_page() == (REPO / "vcamd" / "sinks" / "preview_page.html").read_bytes()
    assert preview_page().startswith(b"<!doctype html>") and b"/stream.mjpg" in preview_page()


class _Engine:
    def __init__(self, sink) -> None:
        self.sink = sink


def test_the_tray_opens_the_page_of_a_sink_that_has_one(make_config, tmp_path, monkeypatch):
    monkeypatch.setenv("VCAMD_RUNTIME_DIR", str(tmp_path / "rt"))
    opened: list = []
    preview = open_sink("preview", make_config(preview={"port": 0}), 64, 48, 30.0)
    preview.open()
    try:
        _open_output_page(_Engine(preview), opened.append)
        # A private page holding a one-time login address: neither the token nor a code goes on the
        # opener's command line, which every local user can read.
        page = opened[0]
        assert page.parent == tmp_path / "rt" and oct(page.stat().st_mode & 0o777) == "0o600"
        assert f'content="0;url={preview.url}?code=' in page.read_text() and preview.url.startswith("http://127.0.0.1:")
        assert preview.access.token not in page.read_text()
    finally:
        preview.close()
    for engine in (_Engine(None), _Engine(NullSink(64, 48)), _Engine(preview)):  # not running yet, no page, closed
        with pytest.raises(VcamdError, match=r"control page is not available.*\[panel\]"):
            _open_output_page(engine, opened.append)
    assert len(opened) == 1
