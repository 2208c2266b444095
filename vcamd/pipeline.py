"""The face engine for a config: its model files resolved (`vcamd.modelstore`), the precision the
swapper runs at decided (`vcamd.precision`: its checked int8 copy, where one is kept and wanted),
then the engine built (`vcamd.faces.engine`) — the one place the floors meet, so `faces/` opens
files and never looks them up. `vcamd run` (through `live.loading`) and `vcamd swap` build their
engines here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vcamd.config import Config
from vcamd.types import ModelFiles

if TYPE_CHECKING:
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.engine import FaceEngine
    from vcamd.runtime import Sessions


def model_files(cfg: Config) -> ModelFiles:
    """Every model file `cfg` uses (every missing one named in one ModelError), and how to find the
    enhancer's when it is switched on later."""
    from vcamd.modelstore.store import ModelStore

    store = ModelStore.from_config(cfg.models)
    return ModelFiles(paths=store.paths_in_use(cfg), enhancer=lambda: store.path_for(cfg.models.enhancer, "enhancer"))


def build_face_engine(cfg: Config, sessions: Sessions | None = None, *,
                      warm_up: Callable[[FaceDetector], None] | None = None) -> FaceEngine:
    """`FaceEngine.from_config` with the model files `cfg` names, the swapper on its checked int8
    copy where `[models] precision` and the machine say so (found without hashing the model)."""
    from vcamd.faces.engine import FaceEngine
    from vcamd.precision import swapper_choice
    from vcamd.runtime import Sessions

    files = model_files(cfg)
    sessions = sessions if sessions is not None else Sessions(list(cfg.models.providers), cfg.models.threads)
    swapper = files.paths["swapper"]
    precision = swapper_choice(cfg.models.precision, swapper, sessions.providers)
    if precision.copy is not None:
        sessions.run_copy(swapper, precision.copy)
    engine = FaceEngine.from_config(cfg, files, sessions, warm_up=warm_up)
    if precision.copy is not None and not sessions.runs_copy(swapper):  # the kept copy did not load (logged)
        precision = precision.stays_float("its kept int8 copy does not load (see the log): the float model serves")
    engine.precision = precision
    return engine
