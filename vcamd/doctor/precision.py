"""The precision of the models with an int8 copy (the swapper, the enhancer, the face parser, the detector): float, or
their checked int8 copy on the CPU's integer units (`vcamd.inference.precision`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.config.schema import Config
from vcamd.doctor.results import CheckResult, Status, ok

NAME = "precision"


def check_precision(cfg: Config, daemon_status: dict[str, Any] | None = None) -> CheckResult:
    """What `[models] precision` gives on this machine: the CPU's int8 units, each model's int8 copy
    (kept and checked, failed, or not built yet) — and what the running daemon really runs, when
    one answers. A copy that failed its check is worth knowing (!); everything else is fine."""
    from vcamd.inference.precision import INT8_ROLES, int8_units

    setting = cfg.models.precision
    head = f"[models] precision = \"{setting}\"; this CPU's int8 dot-product units: {int8_units().describe()}"
    running = (daemon_status or {}).get("precision")
    if isinstance(running, dict) and running.get("swapper"):
        why = (daemon_status or {}).get("precision_why") or {}
        said = [f"the running daemon's {role} runs in {running[role]}" + (f" ({why[role]})" if why.get(role) else "")
                for role in INT8_ROLES if running.get(role)]
        return ok(NAME, f"{head}; {'; '.join(said)}")
    used = {"swapper": cfg.models.swapper, "enhancer": cfg.models.enhancer if cfg.enhancer.enabled else "", "parser": cfg.models.parser,
            "detector": cfg.models.detector}
    said, failed = [], []
    for role in INT8_ROLES:
        if used[role]:
            line, check_failed = _role(cfg, role, used[role])
            said.append(line)
            failed += [role] if check_failed else []
    if failed:
        return CheckResult(NAME, Status.warn, f"{head}; {'; '.join(said)}",
                           f"nothing to fix: the float model is the right one for these weights ({', '.join(failed)}; "
                           "`vcamd models quantize --again` checks again after a model or ONNX Runtime update)")
    return ok(NAME, f"{head}; {'; '.join(said)}")


def _role(cfg: Config, role: str, value: str) -> tuple[str, bool]:
    """What the `role` model (`value`: its `[models]` entry) runs at, in words, and whether its copy failed its check."""
    from vcamd.common.errors import VcamdError
    from vcamd.inference.precision import role_choice
    from vcamd.inference.runtime import resolve_providers
    from vcamd.modelstore.store import ModelStore
    from vcamd.remote.sessions import served_roles

    providers = resolve_providers(list(cfg.models.providers))
    if role in served_roles(cfg):  # served: no int8 copy here, and maybe no local file to look up
        choice = role_choice(role, cfg.models.precision, Path(value), providers, server=cfg.models.server)
        return f"the {role} runs in float" + (f": {choice.why}" if choice.why else ""), False
    try:
        from vcamd.models.int8detector import looks_for

        model = ModelStore.from_config(cfg.models).path_for(value, role)
        choice = role_choice(role, cfg.models.precision, model, providers, looks=looks_for(cfg) if role == "detector" else None)
    except VcamdError as err:  # the models and providers checks say what is wrong
        return f"the {role}'s precision is decided once it can load ({err.message})", False
    if choice.runs == "int8":
        return f"the {role} {model.name} runs its int8 copy ({choice.why})", False
    if choice.build:
        return (f"the {role} {model.name}: its int8 copy is built in the background on the first `vcamd run` "
                "(the float model serves meanwhile), or now: `vcamd models quantize`"), False
    return f"the {role} {model.name} runs in float" + (f": {choice.why}" if choice.why else ""), choice.failed_check
