"""Int8 copies of the user's models (the swapper, the enhancer, the face parser, the detector: `vcamd.models.int8roles`):
built from the user's own weights with ONNX Runtime's quantiser, calibrated on real aligned faces (the detector: whole images),
checked against the float model (`vcamd.inference.fidelity`), kept (`vcamd.inference.int8cache`).

How (`onnxruntime.quantization.quantize_static`): static quantisation in the QDQ format, u8
activations and s8 weights per output channel (7-bit weights on an x86 CPU without VNNI: ONNX
Runtime's own guidance), the Conv, MatMul and Gemm nodes — where the time goes (92 % of the
swapper's int8 copy's time is its QLinearConv: docs/performance.md, "int8 on the CPU"). Calibrated
with each tensor's min/max over the calibration faces: the source photo's face and faces the camera
saw (`vcamd.faces.calibration`), each fed to the model the way the live path feeds it (the swapper:
swapped to the source identity; the enhancer and the parser: aligned to their crop).

`RECIPES` are tried in order until one passes the check: every such node in int8 (fastest), then
the same with the first and last convolution kept in float (the image in and the image out, the
layers most sensitive to rounding, under 1 % of inswapper's work). None passing: the verdict is
kept as failed and the float model stays.

Built three ways: `vcamd models quantize` (in the foreground, printing the check), the daemon on
first use (`python -m vcamd.models.quantize JOB_DIR` at a lower priority, so its gigabytes and its
minute of CPU stay out of the daemon: `live.int8upgrade.Int8Upgrade`), and `vcamd bench`. Importing
this module is cheap; ONNX Runtime's quantiser and onnx are imported when a copy is built.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vcamd.common.errors import ModelError
from vcamd.common.stopping import held_off
from vcamd.faces.calibration import CalibrationFaces
from vcamd.inference.detectcheck import Looks
from vcamd.inference.int8recipes import OP_TYPES, RECIPES, Recipe, build_key, onnxruntime_version
from vcamd.models.int8roles import Report, RoleCheck, check_for

if TYPE_CHECKING:
    from vcamd.inference.int8cache import Entry, Kept
    from vcamd.inference.runtime import Sessions

log = logging.getLogger(__name__)

PER_CHANNEL_OPSET = 13
"""Per-channel weights need DequantizeLinear's `axis` (opset 13): an older model is converted first
(`onnx.version_converter`), in the temporary float32 copy."""

BUILD_NICE = 10
"""The background build's niceness: the live loop and swap outrank it."""


# -- building and checking ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Attempt:
    recipe: Recipe
    report: Report
    float_ms: float
    """Median ms of one face through the float model (the check's own runs)."""
    int8_ms: float

    @property
    def speedup(self) -> float:
        return self.float_ms / self.int8_ms if self.int8_ms > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {"recipe": asdict(self.recipe), "float_ms": round(self.float_ms, 1), "int8_ms": round(self.int8_ms, 1),
                "speedup": round(self.speedup, 2), "check": self.report.to_json()}


@dataclass(frozen=True)
class Built:
    """A build's outcome: what is kept now, and each recipe tried (none when another build had
    already made the entry)."""

    kept: Kept
    attempts: list[Attempt] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.kept.verdict.passed


def build_checked(model: Path, recognizer: Path, faces: CalibrationFaces, *, role: str = "swapper", providers: Sequence[str] = ("cpu",),
                  threads: int = 0, reduce_range: bool = False, looks: Looks | None = None, say: Callable[[str], None] = log.info) -> Built:
    """Build, check and keep the int8 copy of `model`, a `role` model (`vcamd.models.int8roles`; its
    calibration `faces` aligned to `int8roles.calibration_crop`), or its failed verdict, unless already
    kept; one build per model file at a time across processes. The detector's copy is checked at
    `looks` (its settings: part of the build key). Raises ModelError when the model or the
    recogniser cannot be run (nothing is kept then)."""
    from vcamd.inference import int8cache
    from vcamd.inference.modelhashes import sha256_of

    started = time.monotonic()
    model = Path(model).expanduser().resolve()
    sha = sha256_of(model)
    entry = int8cache.Entry(sha, build_key(reduce_range, role, looks))
    with int8cache.build_lock(sha):
        kept = int8cache.read(entry)
        if kept is not None:
            return Built(kept, seconds=time.monotonic() - started)
        with _quiet_quantiser():
            attempts = _attempts(model, check_for(role, model, recognizer, faces, list(providers), threads, looks), entry,
                                 providers=list(providers), threads=threads, reduce_range=reduce_range, say=say)
        passed = next((a for a in attempts if a.report.passed), None)
        shown = passed or attempts[-1]
        details = {"model": str(model), "role": role, "recipe": asdict(shown.recipe), "attempts": [a.to_json() for a in attempts],
                   "calibration_faces": len(faces.crops), "onnxruntime": onnxruntime_version(), "reduce_range": reduce_range}
        summary = shown.report.summary() + (f"; {shown.speedup:.1f}× faster" if passed else "")
        kept = int8cache.record(entry, passed is not None, summary, details, _built_path(entry) if passed else None)
    return Built(kept, attempts, time.monotonic() - started)


def _built_path(entry: Entry) -> Path:
    return entry.model.with_name(f".{entry.model.name}.passed")


def _attempts(model: Path, check: RoleCheck, entry: Any, *, providers: list[str], threads: int, reduce_range: bool,
              say: Callable[[str], None]) -> list[Attempt]:
    """Each recipe in turn until one passes; the passing copy is left at `_built_path(entry)`."""
    import os

    from vcamd.files.private_files import private_temporary
    from vcamd.inference.runtime import Sessions

    floats, float_ms = check.outputs(Sessions(providers, threads))
    say(f"float model: {float_ms:.0f} ms a face")
    attempts: list[Attempt] = []
    with _float32_source(model) as (source, convs):
        for recipe in RECIPES:
            say(f"quantising: {recipe.name}")
            built: Path | None = None
            try:
                with held_off():  # a stop (SIGTERM) comes once `built` names the file to remove
                    built = private_temporary(entry.model, "building")
                excluded = [convs[0], convs[-1]] if recipe.keep_ends_float and convs else []
                quantize_copy(source, built, check.feeds(), excluded=excluded, reduce_range=reduce_range)
                int8s, int8_ms = check.outputs(_copy_sessions(model, built, providers, threads))
                report = check.compare(floats, int8s)
            except BaseException:
                if built is not None:
                    built.unlink(missing_ok=True)
                raise
            attempt = Attempt(recipe, report, float_ms, int8_ms)
            attempts.append(attempt)
            say(f"{recipe.name}: {'passed' if report.passed else 'failed'} ({int8_ms:.0f} ms a face)")
            if report.passed:
                os.replace(built, _built_path(entry))
                return attempts
            built.unlink(missing_ok=True)
    return attempts


def _copy_sessions(model: Path, copy: Path, providers: list[str], threads: int) -> Sessions:
    """Sessions whose `model` runs `copy`; ModelError when the copy does not load."""
    from vcamd.inference.runtime import Sessions

    sessions = Sessions(providers, threads)
    sessions.run_copy(model, copy)
    sessions.get(model, background=True)
    if not sessions.runs_copy(model):
        raise ModelError(f"the int8 copy of {model.name} does not load", fix="see the log; the float model serves")
    return sessions


@contextlib.contextmanager
def _float32_source(model: Path) -> Iterator[tuple[Path, list[str]]]:
    """The model as the quantiser takes it, and its Conv nodes' names in graph order: the file
    itself when it is float32 with named nodes at opset 13 or later; else a float32 copy with names
    (an fp16 export's weights and casts widened to float32 — widening loses nothing — nameless nodes
    named, an older opset converted: `PER_CHANNEL_OPSET`) in a temporary folder."""
    import tempfile

    import onnx
    from onnx import TensorProto, numpy_helper

    proto = onnx.load(str(model))
    graph = proto.graph
    changed = False
    for i, init in enumerate(graph.initializer):
        if init.data_type == TensorProto.FLOAT16:
            graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
            changed = True
    for i, node in enumerate(graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
            changed = True
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT16:
                attr.i = TensorProto.FLOAT
                changed = True
            elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT16:
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name))
                changed = True
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT16:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
            changed = True
    if next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), PER_CHANNEL_OPSET) < PER_CHANNEL_OPSET:
        from onnx import version_converter

        proto = version_converter.convert_version(proto, PER_CHANNEL_OPSET)  # the SCRFD exports are opset 12
        graph = proto.graph
        changed = True
    convs = [node.name for node in graph.node if node.op_type == "Conv"]
    if not changed:
        del proto, graph
        yield model, convs
        return
    with tempfile.TemporaryDirectory(prefix="vcamd-int8-") as tmp:
        path = Path(tmp) / "float32.onnx"
        onnx.save_model(proto, str(path))
        del proto, graph
        yield path, convs


def quantize_copy(source: Path, out: Path, feeds: Iterable[dict[str, np.ndarray]], *, excluded: Sequence[str] = (),
                  reduce_range: bool = False) -> None:
    """`onnxruntime.quantization.quantize_static` of `source` into `out` the way every int8 copy is
    built (the module doc: QDQ, u8 activations, s8 weights per output channel, `OP_TYPES`, min/max
    calibration), calibrated on `feeds` (the model's inputs, one dict per sample); the nodes named in
    `excluded` stay float. The swapper's copy, and `benchmarks/int8_models.py`'s of the enhancer and parser."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

    # onnxruntime ships no types, so its reader's base class is Any to the checker.
    class Feeds(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._left = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._left, None)

    quantize_static(str(source), str(out), Feeds(), quant_format=QuantFormat.QDQ, op_types_to_quantize=list(OP_TYPES),
                    per_channel=True, reduce_range=reduce_range, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    nodes_to_exclude=list(excluded), calibrate_method=CalibrationMethod.MinMax)


@contextlib.contextmanager
def _quiet_quantiser() -> Iterator[None]:
    """The quantiser's advice on the root logger ("consider pre-processing") and ONNX Runtime's
    warnings about its calibration graph are not the user's to read."""
    import onnxruntime

    class NotQuantiser(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "onnxruntime" not in record.pathname

    root, quiet = logging.getLogger(), NotQuantiser()
    root.addFilter(quiet)
    onnxruntime.set_default_logger_severity(3)
    try:
        yield
    finally:
        root.removeFilter(quiet)


# -- the daemon's background build: `python -m vcamd.models.quantize JOB_DIR` --------------------------------

@dataclass(frozen=True)
class Job:
    """One int8 build asked for: the model file and its role, the recogniser that checks it, the
    calibration faces (aligned to the role's crop: `int8roles.calibration_crop`) and the settings the
    copy is built for. The daemon hands it to its child process through JOB_DIR (job.json + faces.npz)."""

    model: Path
    recognizer: Path
    faces: CalibrationFaces
    providers: list[str]
    threads: int
    reduce_range: bool
    role: str = "swapper"
    looks: Looks | None = None
    """The detector's: the sizes and thresholds its copy is checked at (`vcamd.inference.detectcheck`)."""

    def run(self, say: Callable[[str], None] = log.info) -> Built:
        """`build_checked` for this job."""
        return build_checked(self.model, self.recognizer, self.faces, role=self.role, providers=self.providers, threads=self.threads,
                             reduce_range=self.reduce_range, looks=self.looks, say=say)

    def write(self, folder: Path) -> None:
        (folder / "job.json").write_text(json.dumps({"model": str(self.model), "recognizer": str(self.recognizer), "providers": self.providers,
                                                     "threads": self.threads, "reduce_range": self.reduce_range, "role": self.role,
                                                     "looks": asdict(self.looks) if self.looks else None}),
                                         encoding="utf-8")
        self.faces.save(folder / "faces.npz")

    @classmethod
    def read(cls, folder: Path) -> Job:
        data = json.loads((folder / "job.json").read_text(encoding="utf-8"))
        return cls(Path(data["model"]), Path(data["recognizer"]), CalibrationFaces.load(folder / "faces.npz"), list(data["providers"]),
                   int(data["threads"]), bool(data["reduce_range"]), str(data.get("role", "swapper")),
                   Looks(**data["looks"]) if data.get("looks") else None)


def main(argv: list[str]) -> int:
    """Run one background build (JOB_DIR from the daemon) at a lower priority; the last line of
    stdout is its verdict as JSON: {"passed", "summary", "copy"}."""
    import os

    from vcamd.common.errors import VcamdError

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(BUILD_NICE)
    try:
        built = Job.read(Path(argv[0])).run()
    except VcamdError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    verdict = built.kept.verdict
    print(json.dumps({"passed": verdict.passed, "summary": verdict.summary, "copy": str(built.kept.model) if built.kept.model else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
