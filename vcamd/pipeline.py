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
