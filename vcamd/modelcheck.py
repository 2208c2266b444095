"""Is each configured model the right kind for its role? The same check `vcamd run` makes.

`vcamd run` finds each model with `ModelStore.path_for(value, role)` (a manifest model in the wrong
role is refused there) and loads it into the class of its role, whose constructor checks the
graph's signature (a GFPGAN file as swapper is refused by `Swapper`). `config check` and `doctor`
call exactly those here, on a CPU session, so all three accept and refuse the same files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from vcamd.config import Config
from vcamd.errors import ModelError, VcamdError

ROLES = ("detector", "recognizer", "swapper", "enhancer", "parser")


def _loaders() -> dict[str, Callable[[Path, Any], object]]:
    """Role → the constructor `vcamd run` loads it with (vcamd.faces.engine.FaceEngine.from_config)."""
    from vcamd.faces.detect import FaceDetector
    from vcamd.faces.enhance import Enhancer
    from vcamd.faces.identity import Recognizer
    from vcamd.faces.parse import FaceParser
    from vcamd.faces.swap import Swapper

    def parser(path: Path, sessions: Any) -> FaceParser:  # its signature check does not depend on the regions
        return FaceParser(path, sessions, ["skin"], 0.0)

    return {"detector": FaceDetector, "recognizer": Recognizer, "swapper": Swapper, "enhancer": Enhancer, "parser": parser}


def check_signature(path: Path, role: str, sessions: Any = None) -> None:
    """Load `path` as the `role` model; raises ModelError naming the file and the fix when it is not one."""
    from vcamd.runtime import Sessions

    if role not in ROLES:
        raise ValueError(f"unknown model role {role!r}")
    sessions = sessions if sessions is not None else Sessions(["cpu"], threads=1)
    try:
        _loaders()[role](path, sessions)
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 — ONNX Runtime refuses a damaged file with its own errors
        raise ModelError(f"{path.name} cannot be loaded as the {role}: {type(exc).__name__}: {exc}",
                         fix=f"fix [models] {role} in the config, or run `vcamd models pull`") from None


def roles_in_use(cfg: Config) -> list[str]:
    return ["detector", "recognizer", "swapper"] + (["enhancer"] if cfg.enhancer.enabled else []) + (["parser"] if cfg.models.parser else [])


def wrong_role_problems(cfg: Config) -> list[tuple[str, VcamdError]]:
    """For `config check`: (role, error) for every configured model that is not fit for its role.

    Models not downloaded yet are left out: `vcamd models pull` and `doctor` report those.
    """
    from vcamd.modelstore import ModelStore
    from vcamd.runtime import Sessions

    store = ModelStore.from_config(cfg.models)
    absent = {(row.name, row.role) for row in store.list() if row.status in ("missing", "partial")}
    sessions = None
    problems: list[tuple[str, VcamdError]] = []
    for role in roles_in_use(cfg):
        value = getattr(cfg.models, role)
        if (value, role) in absent:
            continue
        try:
            path = store.path_for(value, role)
            sessions = sessions or Sessions(["cpu"], threads=1)
            check_signature(path, role, sessions)
        except VcamdError as err:
            problems.append((role, err))
    return problems
