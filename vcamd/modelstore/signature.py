"""Whether a model file is one of its role: loaded by the class `vcamd run` loads it with.

The store proves each file it downloads, unpacks or verifies this way, and `config check`, `doctor`
and `vcamd bench` ask the same of the files the config names (`vcamd.models.modelcheck`), so all of
them accept and refuse the same files. The class of each role is named in the role table
(`vcamd.config.roles`, imported on use); the session is a CPU one unless the caller has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.common.errors import ModelError
from vcamd.common.wayout import ways_out
from vcamd.config.roles import role_named


def check_signature(path: Path, role: str, sessions: Any = None, *, family: str | None = None) -> None:
    """Load `path` as the `role` model; raises ModelError naming the file and the fix when it is not one.
    `family`: for a swapper, its family or model name (`[models] swapper_family`, a manifest name)
    when the file's own name may not say it (a download's `.part`, a user's file)."""
    from vcamd.inference.runtime import Sessions

    loader = role_named(role).loader_class()  # the class `vcamd run` loads it with (FaceEngine.from_config, through vcamd.models.pipeline)
    sessions = sessions if sessions is not None else Sessions(["cpu"], threads=1)
    try:
        loader(path, sessions, family=family) if role == "swapper" and family else loader(path, sessions)
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 — ONNX Runtime refuses a damaged file with its own errors
        raise ModelError(f"{path.name} cannot be loaded as the {role}: {type(exc).__name__}: {exc}",
                         fix=f"fix [models] {role} in the config, or get the file again: {ways_out()}") from None
