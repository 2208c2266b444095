"""The face engine for a config: its model files resolved (`vcamd.modelstore`), its sessions made,
the precision each of the swapper, the enhancer and the parser runs at decided (`vcamd.inference.precision`:
its checked int8 copy, where one is kept and wanted and the model runs here), then the engine built (`vcamd.faces.engine`) — the one
place the floors meet, so `faces/` opens files and never looks them up. `vcamd run` (through
`live.loading`) and `vcamd swap` build their engines here.

Where a session is made: `make_sessions`. With `[models] server` the served roles run on a Triton
server (`vcamd.remote.sessions.RemoteSessions`, standing where `vcamd.inference.runtime.Sessions` stands)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vcamd.common.types import ModelFiles
from vcamd.config.schema import Config

if TYPE_CHECKING:
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.engine import FaceEngine
    from vcamd.inference.runtime import Sessions


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
    enhancer's when it is switched on later. A model run on the server with no local copy stands
    as its served name (`remote.sessions.remote_placeholders`)."""
    from vcamd.modelstore.store import ModelStore
    from vcamd.remote.sessions import remote_placeholders

    store = ModelStore.from_config(cfg.models)
    elsewhere = remote_placeholders(cfg)
    paths = store.paths_in_use(cfg, served=elsewhere)
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
    from vcamd.inference.runtime import Sessions

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
    """`FaceEngine.from_config` with the model files `cfg` names, on `make_sessions`' sessions; the
    swapper, the enhancer, the parser and the detector each on its checked int8 copy where `[models] precision` and
    the machine say so (found without hashing the model) — only where ONNX Runtime runs it here: a
    served model stays as served."""
    from vcamd.faces.engine import FaceEngine
    from vcamd.inference.precision import INT8_ROLES, role_choice

    files = model_files(cfg)
    made = make_sessions(cfg, files, sessions)
    local = local_sessions(made)
    from vcamd.remote.sessions import served_roles

    served = served_roles(cfg)
    models = {role: files.paths[role] for role in INT8_ROLES if role in files.paths}
    from vcamd.models.int8detector import looks_for

    precisions = {role: role_choice(role, cfg.models.precision, path, local.providers, server=cfg.models.server if role in served else "",
                                    looks=looks_for(cfg) if role == "detector" else None)
                  for role, path in models.items()}
    for role, choice in precisions.items():
        if choice.copy is not None:
            local.run_copy(models[role], choice.copy)
    engine = FaceEngine.from_config(cfg, files, made, warm_up=warm_up)
    for role, choice in precisions.items():
        if choice.copy is not None and not local.runs_copy(models[role]):  # the kept copy did not load (logged)
            precisions[role] = choice.stays_float("its kept int8 copy does not load (see the log): the float model serves")
    swapper = precisions["swapper"]
    if swapper.build:
        from vcamd.inference.precision import family_has_int8, no_int8_for

        if not family_has_int8(family := engine.swapper.spec.family):  # `vcamd.models.quantize` builds none for it
            precisions["swapper"] = swapper.stays_float(no_int8_for(family))
    engine.precisions = precisions
    if made is not local:
        engine.remote = made
    return engine
