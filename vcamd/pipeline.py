"""The face engine for a config: its model files resolved (`vcamd.modelstore`), then the engine built
(`vcamd.faces.engine`) — the one place the two floors meet, so `faces/` opens files and never
looks them up. `vcamd run` (through `live.loading`) and `vcamd swap` build their engines here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vcamd.config import Config
from vcamd.types import ModelFiles

if TYPE_CHECKING:
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.engine import FaceEngine
    from vcamd.runtime import Sessions


def converter_for(cfg: Config) -> str:
    """The embedding converter `cfg` uses ("" = none): `[models] converter`, else — when the swapper's
    family takes its identity through one (ghost, simswap, hififace) — the family's own, by its
    manifest name. The family is `[models] swapper_family`, else the one the swapper's name names
    (`ghost_2_256`, `/models/simswap_256.onnx`); a swapper known only by its inputs is told at load,
    where a missing converter is said with its fix (`FaceEngine.from_config`)."""
    from vcamd.faces.specs import family_named

    if cfg.models.converter:
        return cfg.models.converter
    spec = family_named(cfg.models.swapper_family or cfg.models.swapper.replace("\\", "/").rsplit("/", 1)[-1])
    return (spec.converter or "") if spec is not None and spec.source.kind == "converted" else ""


def has_own_identity(cfg: Config) -> bool:
    """Whether the configured swapper is, by its name or `[models] swapper_family`, one with its own
    trained identity (a DeepFaceLab `.dfm` model): it swaps without a source photo."""
    from vcamd.faces.specs import family_named

    spec = family_named(cfg.models.swapper_family or cfg.models.swapper)
    return spec is not None and spec.source.kind == "none"


def model_files(cfg: Config) -> ModelFiles:
    """Every model file `cfg` uses (every missing one named in one ModelError), and how to find the
    enhancer's when it is switched on later."""
    from vcamd.modelstore.store import ModelStore

    store = ModelStore.from_config(cfg.models)
    return ModelFiles(paths=store.paths_in_use(cfg), enhancer=lambda: store.path_for(cfg.models.enhancer, "enhancer"))


def build_face_engine(cfg: Config, sessions: Sessions | None = None, *,
                      warm_up: Callable[[FaceDetector], None] | None = None) -> FaceEngine:
    """`FaceEngine.from_config` with the model files `cfg` names."""
    from vcamd.faces.engine import FaceEngine

    return FaceEngine.from_config(cfg, model_files(cfg), sessions, warm_up=warm_up)
