"""`--sink SPEC` → a sink: every output form in one table.

A new sink is its module (a class with `from_spec`) plus one `SinkForm` line in `FORMS`; the
`--sink` help, the error for an unknown spec and `open_sink` all come from the table. Importing
this module is light (the CLI builds its help from it): a sink's module is imported when it is built.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vcamd.common.errors import VcamdError

if TYPE_CHECKING:
    from vcamd.config.schema import Config
    from vcamd.sinks.base import Sink


@dataclass(frozen=True, slots=True)
class SinkForm:
    usage: str
    """How the user writes it: "preview", or "file:PATH.mp4" for a form that takes an argument."""
    sink: str
    """"module:Class"; the class builds itself with `from_spec(argument, cfg, width, height, fps)`."""
    section: str | None = None
    """The config section the sink reads ([virtual_camera], [preview]): a change to it reopens the output."""
    note: str = ""
    """Shown after the usage in the help, e.g. "(the default)"."""

    @property
    def name(self) -> str:
        return self.usage.partition(":")[0]

    @property
    def takes_argument(self) -> bool:
        return ":" in self.usage

    def build(self, argument: str, cfg: Config, width: int, height: int, fps: float) -> Sink:
        module, _, cls = self.sink.partition(":")
        sink: Sink = getattr(importlib.import_module(module), cls).from_spec(argument, cfg, width, height, fps)
        return sink


FORMS: tuple[SinkForm, ...] = (
    SinkForm("virtual", "vcamd.sinks.virtual:VirtualCameraSink", "virtual_camera", "(the default)"),
    SinkForm("preview", "vcamd.sinks.preview:PreviewSink", "preview"),
    SinkForm("file:PATH.mp4", "vcamd.sinks.file:FileSink"),
    SinkForm("null", "vcamd.sinks.null:NullSink"),
)
"""The first form is what an empty spec means."""

OUTPUT_SECTIONS = tuple(form.section for form in FORMS if form.section is not None)
"""Config sections whose change reopens the output."""

SINK_FORMS = ", ".join(f"{form.usage} {form.note}".strip() for form in FORMS)
"""`virtual (the default), preview, file:PATH.mp4, null`: for help texts and errors."""


def open_sink(spec: str, cfg: Config, width: int, height: int, fps: float) -> Sink:
    """Build the sink named by `--sink SPEC`; the caller opens it (`.open()`) before the first frame."""
    if width <= 0 or height <= 0 or fps <= 0:
        raise VcamdError(f"sink size {width}×{height} at {fps} fps is not valid", fix="width, height and fps must be positive")
    text = spec.strip()
    name, colon, argument = text.partition(":")
    form = next((f for f in FORMS if f.name == name), None) if text else FORMS[0]
    if form is None or bool(colon) != form.takes_argument:
        raise VcamdError(f"unknown sink {spec!r}", fix=f"use one of: {SINK_FORMS}")
    return form.build(argument, cfg, width, height, fps)
