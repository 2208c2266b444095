"""The running daemon: whether its control socket answers, and its status for the other checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcamd.doctor.results import CheckResult, Status, ok


def check_control_socket(directory: Path | None = None) -> tuple[CheckResult, dict[str, Any] | None]:
    """The daemon check, and the daemon's status when it answers."""
    from vcamd.control.client import ControlClient
    from vcamd.control.protocol import ControlError, DaemonNotRunning

    name = "daemon"
    try:
        status = ControlClient(directory, timeout_s=3.0).status()
    except DaemonNotRunning as err:
        return CheckResult(name, Status.warn, err.message,
                           "start it: `vcamd run`, or `vcamd service install` to start it with your session"), None
    except (ControlError, OSError) as err:
        return CheckResult(name, Status.fail, f"the control socket does not answer: {err}",
                           "restart the daemon (`vcamd quit`, then `vcamd run`); see its log"), None
    state = status.get("state", "?")
    swap = "on" if status.get("enabled") else "off"
    needs = [str(n.get("label", "?")) for n in status.get("swap_needs") or [] if isinstance(n, dict)]
    if needs:
        swap += f" (it needs {', '.join(needs)}: `vcamd status` says how to get each)"
    detail = f"running ({state}), swap {swap}, control socket answers"
    if status.get("config_error"):
        return CheckResult(name, Status.warn, f"{detail}; it rejected the last config edit: {status['config_error']}",
                           "fix the config file; the daemon keeps the last good config until then"), status
    return ok(name, detail), status
