"""Is each configured model the right kind for its role, and do they fit each other? The same
checks `vcamd run` makes, made before it.

`vcamd run` finds each model with `ModelStore.path_for(value, role)` (a manifest model in the wrong
role is refused there) and loads it into the class of its role, whose constructor checks the
graph's signature (a GFPGAN file as swapper is refused by `Swapper`). `config check` and `doctor`
call exactly those here, on a CPU session, so all three accept and refuse the same files.

Models that each fit their role may still not fit each other: the swapper turns the recognizer's
embedding of the source face into its identity input, so their sizes must agree (`identity_fit`;
a 128-d recognizer with inswapper, which starts from 512-d ArcFace, fails every swap). That is
read from the two graphs' signatures (`onnxwire.signature`), without a session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.common.errors import ModelError, VcamdError
from vcamd.config.schema import Config
from vcamd.modelstore.roles import configured_models, role_named
from vcamd.modelstore.wayout import how_to_get, ways_out


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


def wrong_role_problems(cfg: Config) -> list[tuple[str, VcamdError]]:
    """For `config check`: (role, error) for every configured model that is not fit for its role.

    Models not downloaded yet are left out: `vcamd models pull` and `doctor` report those.
    """
    from vcamd.inference.runtime import Sessions
    from vcamd.modelstore.store import ModelStore
    from vcamd.remote.sessions import remote_placeholders

    store = ModelStore.from_config(cfg.models)
    absent = {(row.name, row.role) for row in store.list() if row.status in ("missing", "partial")}
    elsewhere = remote_placeholders(cfg)  # run on the Triton server: `vcamd doctor` checks them there
    sessions = None
    problems: list[tuple[str, VcamdError]] = []
    for value, role in configured_models(cfg):
        if (value, role) in absent or role in elsewhere:
            continue
        try:
            path = store.path_for(value, role)
            sessions = sessions or Sessions(["cpu"], threads=1)
            check_signature(path, role, sessions, family=cfg.models.swapper_family or None)
        except VcamdError as err:
            problems.append((role, err))
    return problems


def identity_fit(recognizer: Path, swapper: Path) -> ModelError | None:
    """Whether the recognizer's embedding has the size the swapper's family starts from: the
    error naming both models and the fix, or None when they fit — or when either graph is not
    one of its role (the role checks report that) or cannot be read."""
    from vcamd.faces.specs import swapper_candidates
    from vcamd.inference.onnxwire import WireError, signature

    try:
        _, embedding = signature(recognizer)
        swapper_inputs, _ = signature(swapper)
    except (WireError, OSError):
        return None
    # The families these inputs could be (several share one signature, all from 512-d ArcFace);
    # those that take the source face as an image, or none, do not start from the embedding.
    found = [spec for spec in swapper_candidates(swapper_inputs) if spec.uses_embedding]
    spec = found[0] if found else None
    shape = next(iter(embedding.values())) if len(embedding) == 1 else []
    if spec is None or len(shape) != 2 or not isinstance(shape[1], int) or shape[1] == spec.identity_dim:
        return None
    return ModelError(
        f"[models] recognizer {recognizer.name} gives {shape[1]}-d face embeddings, but the swapper {swapper.name} "
        f"({spec.family}) takes {spec.identity_dim}-d ones: every swap would fail",
        fix=f"set [models] recognizer to buffalo_l (ArcFace w600k_r50, {spec.identity_dim}-d; {how_to_get(['buffalo_l'])})",
    )


def identity_fit_problem(cfg: Config) -> ModelError | None:
    """`identity_fit` for the configured recognizer and swapper; None when either is not there
    (`vcamd models pull` and the role checks report those)."""
    from vcamd.modelstore.store import ModelStore

    store = ModelStore.from_config(cfg.models)
    try:
        recognizer = store.path_for(cfg.models.recognizer, "recognizer")
        swapper = store.path_for(cfg.models.swapper, "swapper")
    except VcamdError:
        return None
    return identity_fit(recognizer, swapper)
