"""The swapper's precision: float or its checked int8 copy on the CPU's integer units (`vcamd.inference.precision`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.config.schema import Config
from vcamd.doctor.results import CheckResult, Status, ok

NAME = "precision"


def check_precision(cfg: Config, daemon_status: dict[str, Any] | None = None) -> CheckResult:
    """What `[models] precision` gives on this machine: the CPU's int8 units, the swapper's int8 copy
    (kept and checked, failed, or not built yet) — and what the running daemon really runs, when
    one answers. A copy that failed its check is worth knowing (!); everything else is fine."""
    from vcamd.common.errors import VcamdError
    from vcamd.inference.precision import int8_units, swapper_choice
    from vcamd.inference.runtime import resolve_providers
    from vcamd.modelstore.store import ModelStore

    setting = cfg.models.precision
    units = int8_units()
    head = f"[models] precision = \"{setting}\"; this CPU's int8 dot-product units: {units.describe()}"
    running = (daemon_status or {}).get("precision")
    if isinstance(running, dict) and running.get("swapper"):
        why = ((daemon_status or {}).get("precision_why") or {}).get("swapper")
        return ok(NAME, f"{head}; the running daemon's swapper runs in {running['swapper']}" + (f" ({why})" if why else ""))
    if cfg.models.server:  # served: no int8 copy here, and maybe no local file to look up
        choice = swapper_choice(setting, Path(cfg.models.swapper), resolve_providers(list(cfg.models.providers)), server=cfg.models.server)
        return ok(NAME, f"{head}; the swapper runs in float" + (f": {choice.why}" if choice.why else ""))
    try:
        swapper = ModelStore.from_config(cfg.models).path_for(cfg.models.swapper, "swapper")
        choice = swapper_choice(setting, swapper, resolve_providers(list(cfg.models.providers)))
    except VcamdError as err:  # the models and providers checks say what is wrong
        return ok(NAME, f"{head}; the swapper's precision is decided once it can load ({err.message})")
    if choice.runs == "int8":
        return ok(NAME, f"{head}; {swapper.name} runs its int8 copy ({choice.why})")
    if choice.build:
        return ok(NAME, f"{head}; {swapper.name}: its int8 copy is built in the background on the first `vcamd run` "
                        "(the float model serves meanwhile), or now: `vcamd models quantize`")
    if choice.failed_check:
        return CheckResult(NAME, Status.warn, f"{head}; {swapper.name} runs in float: {choice.why}",
                           "nothing to fix: the float model is the right one for these weights "
                           "(`vcamd models quantize --again` checks again after a model or ONNX Runtime update)")
    return ok(NAME, f"{head}; {swapper.name} runs in float" + (f": {choice.why}" if choice.why else ""))
