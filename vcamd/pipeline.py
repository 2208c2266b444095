"""The face engine for a config: its model files resolved (`vcamd.modelstore`), its sessions made,
then the engine built (`vcamd.faces.engine`) — the one place the floors meet, so `faces/` opens
files and never looks them up. `vcamd run` (through `live.loading`) and `vcamd swap` build their
engines here.

Where a session is made: `make_sessions`. With `[models] server` the served roles run on a Triton
server (`vcamd.remote.sessions.RemoteSessions`, standing where `vcamd.runtime.Sessions` stands)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vcamd.config import Config
from vcamd.types import ModelFiles

if TYPE_CHECKING:
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.engine import FaceEngine
    from vcamd.runtime import Sessions


def model_files(cfg: Config) -> ModelFiles:
    """Every model file `cfg` uses (every missing one named in one ModelError), and how to find the
    enhancer's when it is switched on later. A model run on the server with no local copy stands
    as its served name (`remote.sessions.remote_placeholders`)."""
    from vcamd.modelstore.roles import configured_models
    from vcamd.modelstore.store import ModelStore
    from vcamd.remote.sessions import remote_placeholders

    store = ModelStore.from_config(cfg.models)
    elsewhere = remote_placeholders(cfg)
    wanted = [(value, role) for value, role in configured_models(cfg) if role not in elsewhere]
    paths = dict(zip((role for _, role in wanted), store.paths_for(wanted), strict=True))
    paths |= {role: path for _, role in configured_models(cfg) if (path := elsewhere.get(role)) is not None}
    enhancer = elsewhere.get("enhancer")
    return ModelFiles(paths=paths, enhancer=(lambda: enhancer) if enhancer is not None
                      else lambda: store.path_for(cfg.models.enhancer, "enhancer"))


def local_model_paths(cfg: Config) -> list[Path]:
    """The model files `cfg` loads on this machine (what must exist and fit in memory here)."""
    from vcamd.remote.sessions import remote_placeholders

    elsewhere = remote_placeholders(cfg)
    return [path for role, path in model_files(cfg).paths.items() if role not in elsewhere]


def make_sessions(cfg: Config, files: ModelFiles, local: Sessions | None = None) -> Sessions | Any:
    """The sessions the face engine loads its models with: ONNX Runtime's here, or with a server,
    `RemoteSessions` (the served roles there, the others on `local`)."""
    from vcamd.runtime import Sessions

    local = local if local is not None else Sessions(list(cfg.models.providers), cfg.models.threads)
    if not cfg.models.server:
        return local
    from vcamd.remote.sessions import RemoteSessions

    return RemoteSessions(cfg, local, files)


def local_sessions(sessions: Any) -> Any:
    """The ONNX Runtime sessions behind `sessions` (themselves when no server is set)."""
    return getattr(sessions, "local", sessions)


def build_face_engine(cfg: Config, sessions: Sessions | None = None, *,
                      warm_up: Callable[[FaceDetector], None] | None = None) -> FaceEngine:
    """`FaceEngine.from_config` with the model files `cfg` names, on `make_sessions`' sessions."""
    from vcamd.faces.engine import FaceEngine

    files = model_files(cfg)
    made = make_sessions(cfg, files, sessions)
    engine = FaceEngine.from_config(cfg, files, made, warm_up=warm_up)
    if made is not local_sessions(made):
        engine.remote = made
    return engine
