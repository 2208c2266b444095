"""`vcamd bench --swapper NAMES` / `--enhancer NAMES`: what each model family costs a face here.

Each named model's compute-equivalent stand-in (its family's layer list with random weights,
`vcamd.bench.families`; where a list is an estimate it says so) is built in the bench's temporary
folder, loaded through the real classes (`Swapper` with its family chosen by the model's name and
its embedding converter, `Enhancer`), and run on a real face (the bench's photo, found by the
bench's detector, aligned in the family's geometry): one untimed run, then `rounds` timed ones, the
median counted — pre- and post-processing included, as a swap costs the live engine. With `load`,
the same runs again while that many busy processes (the call app) run at normal priority.
The model file is deleted once timed (they are hundreds of MB each).
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vcamd.bench.settings import BenchSettings
from vcamd.common.errors import VcamdError

log = logging.getLogger(__name__)

DFM_BENCH_SIZE = 224
"""The DeepFaceLab stand-in's side (DeepFaceLive's published models are 224 to 384)."""


@dataclass(frozen=True)
class Timed:
    model: str
    family: str
    role: str
    params_m: float
    gmac: float
    file_mb: float
    layers: str
    """Where its layer list comes from, and whether it is an estimate."""
    estimate: bool
    quiet_ms: float
    loaded_ms: float | None
    build_s: float


def swapper_models(names: list[str]) -> list[str]:
    """The swapper models `names` asks for ("all": one model of every family and each ghost), by
    manifest name; VcamdError for a name that is neither a model nor a family."""
    from vcamd.faces.specs import SWAPPERS, family_named

    if names == ["all"]:
        return [model for spec in SWAPPERS for model in (spec.models if spec.family == "ghost_256" else spec.models[:1])] + ["deepfacelab"]
    out = []
    for name in names:
        spec = family_named(name)
        if spec is None:
            raise VcamdError(f"--swapper {name}: not a swapper model or family",
                             fix=f"use all, or some of: {', '.join(m for s in SWAPPERS for m in s.models)}, deepfacelab")
        out.append(name if name in spec.models or spec.layout == "dfm" else spec.models[0])
    return out


def enhancer_models(names: list[str]) -> list[str]:
    from vcamd.faces.specs import ENHANCERS

    known = {model: spec for spec in ENHANCERS for model in spec.models} | {spec.family: spec for spec in ENHANCERS}
    if names == ["all"]:
        return [spec.models[-1] for spec in ENHANCERS]
    for name in names:
        if name not in known:
            raise VcamdError(f"--enhancer {name}: not an enhancer model", fix=f"use all, or some of: {', '.join(sorted(known))}")
    return [known[name].models[-1] if name == known[name].family else name for name in names]


def time_models(settings: BenchSettings, tmpdir: Path, swappers: list[str], enhancers: list[str]) -> list[Timed]:
    """Each model's stand-in timed on the bench's face (see the module's doc)."""
    from vcamd.faces.detect import FaceDetector
    from vcamd.files.images import read_image
    from vcamd.inference.runtime import Sessions

    image = read_image(settings.face, "bench face")
    detector_path = _detector_path(settings)
    faces = FaceDetector(detector_path, Sessions(["cpu"], threads=1)).detect(image)
    if not faces:
        raise VcamdError(f"no face found in {settings.face}", fix="pass --face with a photo of one clearly visible face")
    face = max(faces, key=lambda f: f.area)
    rows = []
    for model in swappers:
        rows.append(_time_swapper(settings, tmpdir, model, image, face))
    for model in enhancers:
        rows.append(_time_enhancer(settings, tmpdir, model, image, face))
    return rows


def _detector_path(settings: BenchSettings) -> Path:
    path = Path(settings.detector).expanduser()
    if path.is_file():
        return path
    from vcamd.config.schema import ModelsConfig
    from vcamd.modelstore.store import ModelStore

    return ModelStore.from_config(ModelsConfig()).path_for(settings.detector, "detector")


def _time_swapper(settings: BenchSettings, tmpdir: Path, model: str, image, face) -> Timed:
    from vcamd.bench.families import FAMILY_LAYERS, build_converter, build_model_swapper, family_layer_stats, ghost_blocks
    from vcamd.faces.identity import SourceIdentity
    from vcamd.faces.specs import family_named
    from vcamd.faces.swap import EmbeddingConverter, Swapper
    from vcamd.inference.runtime import Sessions

    spec = family_named(model)
    assert spec is not None
    if spec.layout == "dfm":
        spec = spec.sized(DFM_BENCH_SIZE)
    path = tmpdir / (f"{model}.dfm" if spec.layout == "dfm" else f"{model}.onnx")
    t0 = time.monotonic()
    build_model_swapper(path, model, spec)
    build_s = time.monotonic() - t0
    sessions = Sessions(settings.providers, settings.threads)
    converter = EmbeddingConverter(build_converter(tmpdir / "converter.onnx"), sessions) if spec.converter else None
    try:
        swapper = Swapper(path, sessions, family=spec.family, converter=converter)
        rng = np.random.default_rng(3)
        raw = rng.standard_normal(512).astype(np.float32) * 20
        identity = SourceIdentity(settings.face, raw / np.linalg.norm(raw), face, raw_embedding=raw, photo=image)
        source = swapper.source_for(identity)
        crop, _ = swapper.align(image, face)
        quiet, loaded = _timings(lambda: swapper.swap([crop], source), settings)
        params, macs = family_layer_stats(spec, ghost_blocks(model) if spec.family == "ghost_256" else None)
        layers = FAMILY_LAYERS[spec.family]
        return Timed(model, spec.family, "swapper", params / 1e6, macs / 1e9, path.stat().st_size / 1e6, layers.source, layers.estimate,
                     quiet, loaded, build_s)
    finally:
        path.unlink(missing_ok=True)


def _time_enhancer(settings: BenchSettings, tmpdir: Path, model: str, image, face) -> Timed:
    from vcamd.bench.families import ENHANCER_LAYERS, build_family_enhancer, enhancer_family_stats
    from vcamd.faces.enhance import Enhancer
    from vcamd.faces.specs import ENHANCERS
    from vcamd.inference.runtime import Sessions

    spec = next(s for s in ENHANCERS if model in s.models)
    path = tmpdir / f"{model}.onnx"
    t0 = time.monotonic()
    build_family_enhancer(path, spec, compute_equivalent=True)
    build_s = time.monotonic() - t0
    try:
        enhancer = Enhancer(path, Sessions(settings.providers, settings.threads), strength=1.0)
        crop, _ = enhancer.crop.align(image, face.kps)
        quiet, loaded = _timings(lambda: enhancer.restore(crop), settings)
        params, macs = enhancer_family_stats(spec)
        layers = ENHANCER_LAYERS[spec.family]
        return Timed(model, spec.family, "enhancer", params / 1e6, macs / 1e9, path.stat().st_size / 1e6, layers.source, layers.estimate,
                     quiet, loaded, build_s)
    finally:
        path.unlink(missing_ok=True)


def _timings(run, settings: BenchSettings) -> tuple[float, float | None]:
    """(quiet median ms, loaded median ms or None) of `settings.rounds` timed runs after one untimed."""
    from vcamd.bench.scenarios import busy_processes

    def median_ms() -> float:
        run()
        times = []
        for _ in range(max(1, settings.rounds)):
            t = time.perf_counter()
            run()
            times.append((time.perf_counter() - t) * 1000.0)
        return statistics.median(times)

    quiet = median_ms()
    if not settings.load:
        return quiet, None
    with busy_processes(settings.load):
        return quiet, median_ms()


def as_dict(row: Timed) -> dict:
    return {"model": row.model, "family": row.family, "role": row.role, "params_m": round(row.params_m, 1), "gmac": round(row.gmac, 1),
            "file_mb": round(row.file_mb), "layers": row.layers, "estimate": row.estimate, "quiet_ms": round(row.quiet_ms, 1),
            "loaded_ms": None if row.loaded_ms is None else round(row.loaded_ms, 1), "build_s": round(row.build_s, 1)}
