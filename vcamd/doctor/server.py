"""`[models] server`: whether the Triton server answers, how far it is, and whether it serves the
models this config asks of it — each checked by its role's own loader, as `vcamd run` checks it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.common.errors import VcamdError
from vcamd.config.schema import Config
from vcamd.doctor.results import CheckResult, Status, ok
from vcamd.remote.summary import describe_server

NAME = "server"
REACH_S = 5.0


def check_server(cfg: Config, daemon_status: dict[str, Any] | None = None, *, reach_s: float = REACH_S) -> CheckResult | None:
    """None without a server. With the daemon running on it, what the daemon sees; else a link of
    our own: reached within `reach_s`, each served role loaded through it."""
    if not cfg.models.server:
        return None
    running = (daemon_status or {}).get("server")
    if isinstance(running, dict) and running.get("url") == cfg.models.server:
        return _from_status(running, "the daemon's link")
    from vcamd.common.types import ModelFiles
    from vcamd.inference.runtime import Sessions
    from vcamd.modelstore.roles import role_named
    from vcamd.remote.sessions import RemoteSessions, served_roles

    served = served_roles(cfg)
    wanted = {role: s for role, s in served.items() if role != "enhancer" or cfg.enhancer.enabled}
    enhancer = Path(served["enhancer"].name) if "enhancer" in served else Path("enhancer")
    files = ModelFiles(paths={role: Path(s.name) for role, s in wanted.items()}, enhancer=lambda: enhancer)
    remote_cfg = cfg.model_copy(update={"models": cfg.models.model_copy(update={"fallback": "none"})})
    try:
        remote = RemoteSessions(remote_cfg, Sessions(["cpu"], threads=1), files)
    except VcamdError as err:
        return CheckResult(NAME, Status.fail, err.message, err.fix or "")
    try:
        remote.link.want(*(s.name for s in wanted.values()))
        if not remote.link.wait_up(reach_s):
            status = remote.link.status()
            return CheckResult(NAME, Status.fail, f"{cfg.models.server} does not answer within {reach_s:g} s ({status['error']})",
                               "start it there: `vcamd serve` (README \"The swap on a GPU elsewhere\"); faces are held or "
                               "obscured until it answers" + ("; the local models run meanwhile" if cfg.models.fallback == "local" else ""))
        for role, spec in wanted.items():
            try:
                role_named(role).loader_class()(Path(spec.name), remote)
            except VcamdError as err:
                return CheckResult(NAME, Status.fail, f"{cfg.models.server}, the {role}: {err.message}", err.fix or "")
        return _from_status(remote.server_status(), "checked now")
    finally:
        remote.close()


def _from_status(status: dict[str, Any], how: str) -> CheckResult:
    text = describe_server(status)
    if status.get("state") != "up":
        return CheckResult(NAME, Status.fail if how == "checked now" else Status.warn, f"{text} ({how})",
                           "start it, or check the network between the two machines")
    return ok(NAME, f"{text} ({how})")

